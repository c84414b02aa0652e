// Topics: the list (partitions, size, retention, tiering), creating one, and a topic's page:
// its configs (altered in place), its partitions, growing them, deleting the topic.

import { ExactInteger, api, describe, path } from "./api.js";
import { describeAll } from "./cluster.js";
import {
  bytes, confirm, duration, empty, facts, field, form, h, heading, link, origin, plural, problem,
  refresh, show, table,
} from "./ui.js";

const size = (topic) => {
  const sizes = topic.partitions.map((p) => p.size_bytes).filter((s) => s !== null);
  return sizes.length ? sizes.reduce((a, b) => a + b, 0) : null;
};
const tiering = (configs) =>
  configs["remote.storage.enable"]
    ? `tiered (local: ${duration(configs["local.retention.ms"])})`
    : "local only";

function createForm() {
  return form(
    "Create a topic",
    [
      field("Name", h("input", { id: "create-name", name: "name", required: true, maxlength: 249, pattern: "[A-Za-z0-9._\\-]+" }), "Letters, digits, . _ and -"),
      field("Partitions", h("input", { id: "create-partitions", name: "partitions", type: "number", min: 1, max: 10000, value: 1, required: true })),
      field("Replication factor", h("input", { id: "create-replication", name: "replication_factor", type: "number", min: 1, placeholder: "the node's default" })),
      field("Retention (ms)", h("input", { id: "create-retention", name: "retention", type: "number", min: -1, placeholder: "7 days; -1: forever" })),
    ],
    "Create topic",
    (data) => {
      const body = { name: data.name, partitions: Number(data.partitions) };
      if (data.replication_factor) body.replication_factor = Number(data.replication_factor);
      if (data.retention) body.configs = { "retention.ms": Number(data.retention) };
      return api("POST", "/v1/topics", body);
    },
    (topic) => {
      location.hash = `#${path("/topics", topic.name)}`;
    },
  );
}

export async function list(_params, _query, signal, me) {
  const topics = await describeAll(signal, false);
  // CREATE on the cluster; one allowed only on some topic names (a prefixed ACL) is told no.
  const creates = me.cluster_authorized_operations.includes("create");
  return h(
    "section",
    {},
    heading("Topics"),
    topics.length
      ? table(
          plural(topics.length, "topic"),
          [
            ["Name", (t) => link(path("/topics", t.name), t.name)],
            ["Partitions", (t) => t.partitions.length],
            ["Size", (t) => bytes(size(t))],
            ["Retention", (t) => duration(t.configs["retention.ms"])],
            ["Cleanup", (t) => t.configs["cleanup.policy"]],
            ["Storage", (t) => tiering(t.configs)],
            ["Records", (t) => link(`${path("/topics", t.name)}/messages`, "browse")],
          ],
          topics,
        )
      : creates
        ? empty(
            "No topics yet (or none you may describe). Create one with the form below, or with curl:",
            `curl -X POST ${origin()}/v1/topics -H 'Content-Type: application/json' -d '{"name": "orders", "partitions": 3}'`,
          )
        : empty("No topics yet, or none you may describe.", null),
    creates
      ? createForm()
      : h("p", { class: "note", id: "no-create" }, "You may not create topics here: that needs CREATE on the cluster (ask an administrator for the ACL)."),
  );
}

function configValue(raw) {
  if (raw === "") return null; // remove the override
  if (raw === "true" || raw === "false") return raw === "true";
  if (/^-?\d+$/.test(raw) && !Number.isSafeInteger(Number(raw))) return new ExactInteger(raw); // Long.MAX stays exact
  return /^-?\d+(\.\d+)?$/.test(raw) ? Number(raw) : raw;
}

export async function detail([name], _query, signal) {
  const topic = await describe(path("/v1/topics", name), signal);
  const may = (operation) => topic.authorized_operations.includes(operation);
  const configNames = Object.keys(topic.configs).sort();
  const topicPath = path("/topics", name);
  const alter = form(
    "Change a config",
    [
      field("Config", h("select", { id: "alter-config", name: "config" }, configNames.map((c) => h("option", { value: c }, c)))),
      field("Value", h("input", { id: "alter-value", name: "value" }), "Empty: back to the default"),
    ],
    "Apply",
    (data) => api("PATCH", path("/v1/topics", name), { configs: { [data.config]: configValue(data.value) } }),
    refresh,
  );
  const grow = form(
    "Add partitions",
    [field("Partitions", h("input", { id: "grow-partitions", name: "partitions", type: "number", min: topic.partitions.length + 1, value: topic.partitions.length + 1 }), "Partitions can be added, never removed")],
    "Grow",
    (data) => api("PATCH", path("/v1/topics", name), { partitions: Number(data.partitions) }),
    refresh,
  );
  const remove = h("button", { type: "button", class: "danger", id: "delete-topic" }, "Delete topic…");
  const removed = h("div", { "aria-live": "polite" });
  remove.addEventListener("click", async () => {
    if (!(await confirm(`Delete topic ${name} and every record in it? This cannot be undone.`, "Delete", name))) return;
    try {
      await api("DELETE", path("/v1/topics", name));
      location.hash = "#/topics";
    } catch (error) {
      removed.replaceChildren(problem(error));
    }
  });
  return h(
    "section",
    {},
    heading(`Topic ${name}`, h("p", { class: "actions" },
      link(`${topicPath}/messages`, "Browse records"), " · ", link(`${topicPath}/tail`, "Live tail"))),
    facts([
      ["Topic id", h("code", {}, topic.topic_id)],
      ["Partitions", topic.partitions.length],
      ["Size", bytes(size(topic))],
      ["Retention", duration(topic.configs["retention.ms"])],
      ["Storage", tiering(topic.configs)],
    ]),
    topic.configs["remote.storage.enable"]
      ? h("p", { class: "note" }, "Tiered: records from the log start up to the local log start are read from S3; the rest are on the node's disk.")
      : null,
    table(
      "Partitions",
      [
        ["Partition", (p) => link(`${topicPath}/messages?partition=${p.partition}`, p.partition)],
        ["Leader", (p) => show(p.leader)],
        ["Replicas", (p) => p.replicas.join(", ")],
        ["In sync", (p) => p.isr.join(", ")],
        ["Log start", (p) => show(p.log_start_offset)],
        ["Local log start", (p) => show(p.local_log_start_offset)],
        ["High watermark", (p) => show(p.high_watermark)],
        ["Log end", (p) => show(p.log_end_offset)],
        ["Size", (p) => bytes(p.size_bytes)],
      ],
      topic.partitions,
    ),
    table(
      "Configs (overrides in bold)",
      [
        ["Name", (c) => h("code", {}, c)],
        ["Value", (c) => (c in topic.overrides ? h("strong", {}, show(topic.configs[c])) : show(topic.configs[c]))],
      ],
      configNames,
    ),
    may("alter")
      ? [alter, grow]
      : h("p", { class: "note", id: "no-alter" }, "You may not change this topic's configs or partitions: that needs ALTER on it."),
    h("h2", {}, "Delete"),
    may("delete")
      ? [remove, removed]
      : h("p", { class: "note", id: "no-delete" }, "You may not delete this topic: that needs DELETE on it."),
  );
}
