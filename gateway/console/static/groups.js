// Groups: the list, and a group's members, assignment, committed offsets and lag per
// partition, with its total lag charted while the page is open; reset offsets, delete.

import { api, describe, get, path } from "./api.js";
import {
  chart, confirm, empty, facts, field, form, h, heading, link, origin, plural, problem, refresh, show, table,
} from "./ui.js";

const LAG_POLL_MS = 5000;
const LAG_SPAN_MS = 10 * 60 * 1000;
const lagHistory = new Map(); // group -> [[time_ms, total lag], ...], while the console is open

export async function list(_params, _query, signal) {
  const { groups } = await get("/v1/groups", signal);
  return h(
    "section",
    {},
    heading("Consumer groups"),
    groups.length
      ? table(
          plural(groups.length, "group"),
          [
            ["Group", (g) => link(path("/groups", g.group), g.group)],
            ["State", (g) => g.state],
            ["Members", (g) => g.members],
          ],
          groups,
        )
      : empty(
          "No consumer groups yet (or none you may describe). A consumer joins one with:",
          `curl -X POST ${origin()}/v1/groups/my-group/members -H 'Content-Type: application/json' -d '{"topics": ["orders"]}'`,
        ),
  );
}

function remember(name, group) {
  const now = Date.now();
  const points = lagHistory.get(name) ?? [];
  points.push([now, group.lag]);
  while (points.length && points[0][0] < now - LAG_SPAN_MS) points.shift();
  lagHistory.set(name, points);
}

function lagChart(name) {
  return chart([{ name: "total lag", points: lagHistory.get(name) ?? [] }], {
    span_ms: LAG_SPAN_MS,
    unit: "records",
    summary: `Total lag of ${name}: ${plural(lagHistory.get(name)?.at(-1)?.[1] ?? 0, "record")} now`,
    idle: "No lag",
  });
}

function resetForm(name, group) {
  const topics = [...new Set(group.partitions.map((p) => p.topic))];
  return form(
    "Reset committed offsets (the group must have no members)",
    [
      field("Topic", h("select", { id: "reset-topic", name: "topic" }, topics.map((t) => h("option", { value: t }, t)))),
      field("Partitions", h("input", { id: "reset-partitions", name: "partitions", placeholder: "all", pattern: "[0-9, ]*" }), "Comma-separated; empty: every partition"),
      field("To", h("select", { id: "reset-to", name: "to" },
        h("option", { value: "earliest" }, "the earliest offset"),
        h("option", { value: "latest" }, "the latest offset"),
        h("option", { value: "offset" }, "an offset"),
        h("option", { value: "time" }, "a time"))),
      field("Offset or time", h("input", { id: "reset-value", name: "value", placeholder: "42 or 2026-11-25T09:00:00Z" })),
    ],
    "Reset offsets…",
    async (data) => {
      const body = { topic: data.topic };
      if (data.to === "offset") body.to = Number(data.value);
      else if (data.to === "time") body.to = { timestamp: Date.parse(data.value) };
      else body.to = data.to;
      const partitions = data.partitions.split(",").map((p) => p.trim()).filter(Boolean);
      if (partitions.length) body.partitions = partitions.map(Number);
      const what = `${partitions.length ? `partitions ${partitions.join(", ")}` : "every partition"} of ${data.topic}`;
      if (!(await confirm(`Reset group ${name}'s committed offsets of ${what} to ${data.to === "offset" || data.to === "time" ? data.value : data.to}?`, "Reset"))) return null;
      return api("PUT", path("/v1/groups", name, "offsets"), body);
    },
    (answer) => {
      if (answer) refresh();
    },
  );
}

export async function detail([name], _query, signal) {
  const group = await describe(path("/v1/groups", name), signal);
  const may = (operation) => group.authorized_operations.includes(operation);
  remember(name, group);
  const chartBox = h("div", {}, lagChart(name));
  const timer = setInterval(async () => {
    try {
      const fresh = await get(path("/v1/groups", name), signal);
      remember(name, fresh);
      chartBox.replaceChildren(lagChart(name));
    } catch {
      // the next poll tries again; leaving the page stops it
    }
  }, LAG_POLL_MS);
  signal.addEventListener("abort", () => clearInterval(timer));
  const removed = h("div", { "aria-live": "polite" });
  const remove = h("button", { type: "button", class: "danger", id: "delete-group" }, "Delete group…");
  remove.addEventListener("click", async () => {
    if (!(await confirm(`Delete group ${name} and its committed offsets?`, "Delete"))) return;
    try {
      await api("DELETE", path("/v1/groups", name));
      location.hash = "#/groups";
    } catch (error) {
      removed.replaceChildren(problem(error));
    }
  });
  return h(
    "section",
    {},
    heading(`Group ${name}`),
    facts([
      ["State", group.state],
      ["Generation", group.generation],
      ["Assignor", group.assignor],
      ["Total lag", plural(group.lag, "record")],
    ]),
    chartBox,
    group.members.length
      ? table(
          "Members",
          [
            ["Member", (m) => h("code", {}, m.member_id)],
            ["Topics", (m) => m.topics.join(", ")],
            ["Assignment", (m) => m.assignment.map((a) => `${a.topic}: ${a.partitions.join(", ")}`).join("; ") || "—"],
            ["Session timeout", (m) => `${m.session_timeout_ms} ms`],
          ],
          group.members,
        )
      : h("p", { class: "note" }, "No members now: its offsets can be reset or the group deleted."),
    group.partitions.length
      ? table(
          "Committed offsets and lag per partition",
          [
            ["Topic", (p) => link(path("/topics", p.topic), p.topic)],
            ["Partition", (p) => p.partition],
            ["Committed", (p) => show(p.committed_offset)],
            ["End", (p) => p.log_end_offset],
            ["Lag", (p) => show(p.lag)],
            ["Owner", (p) => (p.owner ? h("code", {}, p.owner) : "—")],
          ],
          group.partitions,
        )
      : empty("No partitions: the group has no committed offsets and no subscribed topics.", null),
    group.partitions.length && may("read") ? resetForm(name, group) : null,
    group.partitions.length && !may("read")
      ? h("p", { class: "note", id: "no-reset" }, "You may not reset this group's offsets: that needs READ on it.")
      : null,
    h("h2", {}, "Delete"),
    may("delete")
      ? [remove, removed]
      : h("p", { class: "note", id: "no-delete" }, "You may not delete this group: that needs DELETE on it."),
  );
}
