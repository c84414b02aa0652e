// The console: routes in the URL's fragment (`#/topics/orders`, so a reload keeps the page),
// the sign-in form when the node asks for credentials, and the page being shown.

import { authorization, onUnauthenticated, signIn, signOut } from "./api.js";
import * as access from "./access.js";
import * as cluster from "./cluster.js";
import * as groups from "./groups.js";
import * as messages from "./messages.js";
import * as subscriptions from "./subscriptions.js";
import * as throughput from "./throughput.js";
import * as topics from "./topics.js";
import { field, h, problem } from "./ui.js";

const ROUTES = [
  [/^\/cluster$/, cluster.page, "cluster"],
  [/^\/topics$/, topics.list, "topics"],
  [/^\/topics\/([^/]+)$/, topics.detail, "topics"],
  [/^\/topics\/([^/]+)\/messages$/, messages.browse, "topics"],
  [/^\/topics\/([^/]+)\/tail$/, messages.tail, "topics"],
  [/^\/groups$/, groups.list, "groups"],
  [/^\/groups\/([^/]+)$/, groups.detail, "groups"],
  [/^\/subscriptions$/, subscriptions.list, "subscriptions"],
  [/^\/subscriptions\/([^/]+)$/, subscriptions.detail, "subscriptions"],
  [/^\/access$/, access.page, "access"],
  [/^\/throughput$/, throughput.page, "throughput"],
];

const main = document.getElementById("main");
const account = document.getElementById("account");
let current = null; // the shown page's AbortController: its timers and streams stop with it

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
    main.replaceChildren(
      h("h1", {}, "Not found"),
      h("p", {}, `The console has no page ${route}. `, h("a", { href: "#/cluster" }, "Go to the cluster")),
    );
    return;
  }
  const [pattern, page] = found;
  const params = pattern.exec(route).slice(1).map(decodeURIComponent);
  main.setAttribute("aria-busy", "true");
  try {
    const content = await page(params, query, controller.signal);
    if (controller.signal.aborted) return;
    main.replaceChildren(content);
    if (focus) main.querySelector("h1")?.focus();
  } catch (error) {
    if (controller.signal.aborted) return;
    if (error.status === 401) return; // the sign-in form is shown
    main.replaceChildren(problem(error));
  } finally {
    if (!controller.signal.aborted) {
      main.removeAttribute("aria-busy");
      main.dataset.shown = location.hash; // what is on screen (the browser tests wait on it)
      document.title = `${main.querySelector("h1")?.textContent ?? "Console"} · Sluice`;
    }
  }
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
  const kind = h("select", { id: "login-kind", name: "kind" },
    h("option", { value: "key" }, "API key"),
    h("option", { value: "basic" }, "HTTP Basic (user and password)"));
  const key = h("input", { id: "login-key", name: "key", type: "password", autocomplete: "off" });
  const user = h("input", { id: "login-user", name: "user", autocomplete: "username" });
  const password = h("input", { id: "login-password", name: "password", type: "password", autocomplete: "current-password" });
  const keyField = field("API key", key, "As sent in Authorization: Bearer …");
  const basicFields = h("div", { hidden: true }, field("User", user), field("Password", password));
  kind.addEventListener("change", () => {
    keyField.hidden = kind.value !== "key";
    basicFields.hidden = kind.value !== "basic";
  });
  const form = h(
    "form",
    { class: "action login", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title", tabindex: "-1" }, "Sign in"),
    h("p", {}, "This node requires credentials. They stay in this browser tab (session storage) and are sent only to this node, with each API call; the console acts with their ACLs."),
    authorization() ? problem(error) : null,
    h("fieldset", {}, h("legend", {}, "Credentials"), field("Kind", kind), keyField, basicFields,
      h("button", { type: "submit" }, "Sign in")),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (kind.value === "basic") signIn("basic", user.value, password.value);
    else signIn("key", key.value.trim());
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
