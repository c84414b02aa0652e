// Access: API keys (a new one's secret shown once), ACL bindings and quotas. Each section
// shows the node's refusal when the signed-in principal may not see it.

import { ApiError, api, get, path } from "./api.js";
import { confirm, empty, field, form, h, heading, origin, problem, refresh, show, table } from "./ui.js";

const OPERATIONS = ["read", "write", "create", "delete", "alter", "describe"];
const select = (id, name, values) => h("select", { id, name }, values.map((v) => h("option", { value: v }, v)));

/** A section's content, or the problem that stopped it (a 403 for a principal without ACLs). */
async function section(title, load) {
  try {
    return h("section", {}, h("h2", {}, title), await load());
  } catch (error) {
    if (!(error instanceof ApiError) || error.status === 401) throw error;
    return h("section", {}, h("h2", {}, title), problem(error));
  }
}

function removeButton(label, question, run) {
  const button = h("button", { type: "button", class: "danger small", "aria-label": label }, "Remove…");
  button.addEventListener("click", async () => {
    if (!(await confirm(question, "Remove"))) return;
    try {
      await run();
      refresh();
    } catch (error) {
      button.replaceWith(problem(error));
    }
  });
  return button;
}

/** The credentials' table (or what to do when there is none). */
function keyList(found) {
  return found.length
    ? table("Credentials", [
        ["Key id", (k) => h("code", {}, k.key_id)],
        ["Principal", (k) => k.principal],
        ["Type", (k) => k.type],
        ["Created", (k) => new Date(k.created_ms).toISOString()],
        ["", (k) => removeButton(`Revoke ${k.key_id}`, `Revoke ${k.type} ${k.key_id} of ${k.principal}? Clients using it are refused from now on.`,
          () => api("DELETE", path("/v1/auth/keys", k.key_id)))],
      ], found)
    : empty("No credentials yet.", `sluice auth create-key --principal alice`);
}

async function keys(signal) {
  const { keys: found } = await get("/v1/auth/keys", signal);
  const list = h("div", { id: "credentials" }, keyList(found));
  const create = form(
    "Create a credential",
    [
      field("Principal", h("input", { id: "key-principal", name: "principal", required: true, maxlength: 255 })),
      field("Type", select("key-type", "type", ["api-key", "basic"])),
    ],
    "Create",
    (data) => api("POST", "/v1/auth/keys", data),
    (key) => {
      const { secret: _shownOnce, ...listed } = key; // the list never holds a secret
      found.push(listed);
      list.replaceChildren(keyList(found)); // listed at once, the secret still on screen
      return h("div", { class: "secret", role: "alert" },
        h("p", {}, h("strong", {}, "Copy the secret now: it is not stored and will not be shown again.")),
        h("p", {}, `${key.type} for ${key.principal}: `, h("code", { id: "new-secret" }, key.secret)),
        h("button", { type: "button", onclick: refresh }, "Done"));
    },
  );
  return h("div", {}, list, create);
}

/** A principal without ALTER on the cluster sees the ACL and quota lists, not their forms;
 * one without DESCRIBE on it, not the lists. */
const noAlter = (what) =>
  h("p", { class: "note" }, `You may not change ${what}: that needs ALTER on the cluster.`);
const noDescribe = (what) =>
  h("p", { class: "note" }, `You may not see ${what}: that needs DESCRIBE on the cluster.`);

async function acls(signal, describes, alters) {
  const found = describes ? (await get("/v1/acls", signal)).acls : null;
  const add = !alters ? noAlter("ACL bindings") : form(
    "Add an ACL binding",
    [
      field("Principal", h("input", { id: "acl-principal", name: "principal", required: true, placeholder: "alice or *" })),
      field("Resource type", select("acl-resource-type", "resource_type", ["topic", "group", "cluster"])),
      field("Resource name", h("input", { id: "acl-resource-name", name: "resource_name", required: true, placeholder: "orders, or cluster" })),
      field("Pattern", select("acl-pattern-type", "pattern_type", ["literal", "prefixed"])),
      field("Operation", select("acl-operation", "operation", OPERATIONS)),
      field("Permission", select("acl-permission", "permission", ["allow", "deny"])),
    ],
    "Add",
    (data) => api("POST", "/v1/acls", data),
    refresh,
  );
  return h("div", {},
    found === null ? noDescribe("the ACL bindings") : found.length
      ? table("ACL bindings", [
          ["Principal", (a) => a.principal],
          ["Resource", (a) => `${a.resource_type} ${a.resource_name}${a.pattern_type === "prefixed" ? "*" : ""}`],
          ["Operation", (a) => a.operation],
          ["Permission", (a) => a.permission],
          ["", (a) => removeButton(`Remove ${a.permission} ${a.operation} for ${a.principal}`, `Remove the binding ${a.permission} ${a.principal} ${a.operation} on ${a.resource_type} ${a.resource_name}?`,
            () => api("DELETE", "/v1/acls", a))],
        ], found)
      : empty("No ACL bindings: only super users may do anything.",
          `curl -X POST ${origin()}/v1/acls -H 'Content-Type: application/json' -d '{"principal": "alice", "resource_type": "topic", "resource_name": "orders", "pattern_type": "literal", "operation": "read", "permission": "allow"}'`),
    add);
}

async function quotas(signal, describes, alters) {
  const found = describes ? (await get("/v1/quotas", signal)).quotas : null;
  const number = (v) => (v === "" ? null : Number(v));
  const set = !alters ? noAlter("quotas") : form(
    "Set a principal's quota",
    [
      field("Principal", h("input", { id: "quota-principal", name: "principal", required: true, placeholder: "alice or <default>" })),
      field("Produce bytes/s", h("input", { id: "quota-produce", name: "produce", type: "number", min: 1 })),
      field("Fetch bytes/s", h("input", { id: "quota-fetch", name: "fetch", type: "number", min: 1 })),
      field("Requests/s", h("input", { id: "quota-requests", name: "requests", type: "number", min: 0, step: "any" })),
    ],
    "Set",
    (data) => api("PUT", path("/v1/quotas", data.principal), {
      produce_bytes_per_second: number(data.produce),
      fetch_bytes_per_second: number(data.fetch),
      requests_per_second: number(data.requests),
    }),
    refresh,
  );
  return h("div", {},
    found === null ? noDescribe("the quotas") : found.length
      ? table("Quotas", [
          ["Principal", (q) => q.principal],
          ["Produce bytes/s", (q) => show(q.produce_bytes_per_second)],
          ["Fetch bytes/s", (q) => show(q.fetch_bytes_per_second)],
          ["Requests/s", (q) => show(q.requests_per_second)],
          ["", (q) => removeButton(`Remove the quota of ${q.principal}`, `Remove ${q.principal}'s quota?`,
            () => api("DELETE", path("/v1/quotas", q.principal)))],
        ], found)
      : empty("No quotas: every principal may go as fast as the node.", null),
    set);
}

/** Credentials are listed and made by super users only, and without --auth, offline: say so
 * instead of asking for a refusal. */
async function noKeys(me) {
  return me.auth
    ? h("p", { class: "note", id: "no-keys" }, "Only super users manage credentials: ask one for a key, or make it where the node keeps them (sluice auth create-key).")
    : empty("This node runs without --auth: credentials are created offline, and checked once it runs with --auth.",
        "sluice auth create-key --data-dir DIR --principal alice");
}

export async function page(_params, _query, signal, me) {
  const describes = me.cluster_authorized_operations.includes("describe");
  const alters = me.cluster_authorized_operations.includes("alter");
  const parts = await Promise.all([
    section("API keys and Basic logins", () => (me.super_user ? keys(signal) : noKeys(me))),
    section("ACL bindings", () => acls(signal, describes, alters)),
    section("Quotas", () => quotas(signal, describes, alters)),
  ]);
  return h(
    "section",
    {},
    heading("Access"),
    me.auth
      ? null
      : h("p", { class: "note" }, "This node runs without --auth: no credentials are checked; ACL bindings and quotas are kept, and enforced once it runs with --auth."),
    ...parts,
  );
}
