// The console: routes in the URL's fragment (`#/topics/orders`, so a reload keeps the page),
// the sign-in form when the node asks for credentials, and the page being shown.

import { authorization, onUnauthenticated, signIn, signOut, whoami } from "./api.js";
import * as access from "./access.js";
import * as cluster from "./cluster.js";
import * as groups from "./groups.js";
import * as messages from "./messages.js";
import * as queues from "./queues.js";
import * as schemas from "./schemas.js";
import * as subscriptions from "./subscriptions.js";
import * as throughput from "./throughput.js";
import * as topics from "./topics.js";
import * as transactions from "./transactions.js";
import { field, h, heading, problem } from "./ui.js";

// [pattern, page, navigation section, what the route's name names (for "Topic 'x' not found")]
const ROUTES = [
  [/^\/cluster$/, cluster.page, "cluster"],
  [/^\/topics$/, topics.list, "topics"],
  [/^\/topics\/([^/]+)$/, topics.detail, "topics", "Topic"],
  [/^\/topics\/([^/]+)\/messages$/, messages.browse, "topics", "Topic"],
  [/^\/topics\/([^/]+)\/tail$/, messages.tail, "topics", "Topic"],
  [/^\/groups$/, groups.list, "groups"],
  [/^\/groups\/([^/]+)$/, groups.detail, "groups", "Group"],
  [/^\/queues$/, queues.list, "queues"],
  [/^\/queues\/([^/]+)$/, queues.detail, "queues", "Share group"],
  [/^\/transactions$/, transactions.list, "transactions"],
  [/^\/transactions\/([^/]+)$/, transactions.detail, "transactions", "Transaction"],
  [/^\/subscriptions$/, subscriptions.list, "subscriptions"],
  [/^\/subscriptions\/([^/]+)$/, subscriptions.detail, "subscriptions", "Subscription"],
  [/^\/schemas$/, schemas.list, "schemas"],
  [/^\/schemas\/([^/]+)$/, schemas.detail, "schemas", "Subject"],
  [/^\/access$/, access.page, "access"],
  [/^\/throughput$/, throughput.page, "throughput"],
];

const main = document.getElementById("main");
const account = document.getElementById("account");
let current = null; // the shown page's AbortController: its timers and streams stop with it
let refused = null; // the credentials the node last refused: {kind, error}, until the next sign-in

function parse() {
  const raw = location.hash.replace(/^#/, "") || "/cluster";
  const [route, query = ""] = raw.split("?", 2);
  return { route, query: new URLSearchParams(query) };
}

async function render(focus = false) {
  current?.abort();
  const controller = (current = new AbortController());
  const { route, query } = parse();
  const found = ROUTES.find(([pattern]) => pattern.test(route));
  for (const a of document.querySelectorAll("nav a")) {
    if (found?.[2] === a.dataset.section) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  showAccount();
  if (!found) {
    shown(h("section", {}, heading(`Page '${route}' not found`),
      h("p", {}, `The console has no page ${route}. `, h("a", { href: "#/cluster" }, "Go to the cluster"))), focus);
    return;
  }
  const [pattern, page, , noun] = found;
  const params = pattern.exec(route).slice(1).map(decodeURIComponent);
  main.setAttribute("aria-busy", "true");
  try {
    const me = await whoami(controller.signal);
    const content = await page(params, query, controller.signal, me);
    if (!controller.signal.aborted) shown(content, focus);
  } catch (error) {
    if (controller.signal.aborted) return;
    if (error.status === 401) return; // the sign-in form is shown
    shown(h("section", {}, heading(failed(error, noun, params[0])), problem(error)), focus);
  }
}

/** An error page's heading: what was not found ("Topic 'x' not found"), or the refusal. */
function failed(error, noun, name) {
  if (error.status === 404 && noun) return `${noun} '${name}' not found`;
  if (error.status === 403) return "Access refused";
  return error.problem?.title || "The page could not be shown";
}

/** Put `content` on screen, its heading in the document's title. */
function shown(content, focus) {
  main.replaceChildren(content);
  main.removeAttribute("aria-busy");
  main.dataset.shown = location.hash; // what is on screen (the browser tests wait on it)
  document.title = `${main.querySelector("h1")?.textContent ?? "Console"} · Sluice`;
  if (focus) main.querySelector("h1")?.focus();
}

function showAccount() {
  account.replaceChildren(
    authorization()
      ? h("button", { type: "button", onclick: () => { signOut(); location.reload(); } }, "Sign out")
      : "",
  );
}

function login(error) {
  current?.abort();
  // Credentials the node refuses are forgotten at once: the page offers another sign-in, not
  // a "Sign out" of credentials that never signed anyone in.
  const stored = authorization();
  if (stored) {
    refused = { kind: stored.startsWith("Basic ") ? "basic" : "key", error };
    signOut();
  }
  showAccount();
  const kind = h("select", { id: "login-kind", name: "kind" },
    h("option", { value: "key" }, "API key"),
    h("option", { value: "basic", selected: refused?.kind === "basic" }, "HTTP Basic (user and password)"));
  const key = h("input", { id: "login-key", name: "key", type: "password", autocomplete: "off" });
  const user = h("input", { id: "login-user", name: "user", autocomplete: "username" });
  const password = h("input", { id: "login-password", name: "password", type: "password", autocomplete: "current-password" });
  const keyField = field("API key", key, "As sent in Authorization: Bearer …");
  const basicFields = h("div", {}, field("User", user), field("Password", password));
  const chosen = () => {
    keyField.hidden = kind.value !== "key";
    basicFields.hidden = kind.value !== "basic";
  };
  kind.addEventListener("change", chosen);
  chosen();
  const form = h(
    "form",
    { class: "action login", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title", tabindex: "-1" }, "Sign in"),
    h("p", {}, "This node requires credentials. They stay in this browser tab (session storage) and are sent only to this node, with each API call; the console acts with their ACLs."),
    refused
      ? h("div", { id: "refused" },
          h("p", { class: "bad" }, refused.kind === "basic"
            ? "The node refused that user and password. Enter another login, or an API key."
            : "The node refused that API key. Enter another key, or a user and password."),
          problem(refused.error))
      : null,
    h("fieldset", {}, h("legend", {}, "Credentials"), field("Kind", kind), keyField, basicFields,
      h("button", { type: "submit" }, "Sign in")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (kind.value === "basic") signIn("basic", user.value, password.value);
    else signIn("key", key.value.trim());
    refused = null;
    render();
  });
  main.removeAttribute("aria-busy");
  main.dataset.shown = "sign-in";
  main.replaceChildren(form);
  document.title = "Sign in · Sluice";
  (kind.value === "key" ? key : user).focus();
}

onUnauthenticated(login);
document.getElementById("skip").addEventListener("click", (event) => {
  event.preventDefault(); // the fragment holds the route
  main.focus();
});
window.addEventListener("hashchange", () => render(true));
render();
