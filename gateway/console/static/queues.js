// Queues (share groups): the list, and a share group's members, each share-partition's window
// (start and end offsets, records in flight by state, lag) with its total lag and records in
// flight charted while the page is open; the queue-mode subscriptions that deliver through it
// (and their dead letters); start a topic over, delete.

import { api, get, path } from "./api.js";
import {
  chart, confirm, empty, facts, field, form, h, heading, link, origin, plural, problem, refresh, show, table,
} from "./ui.js";

const POLL_MS = 5000;
const SPAN_MS = 10 * 60 * 1000;
const history = new Map(); // group -> [[time_ms, lag, in flight], ...], while the console is open

export async function list(_params, _query, signal) {
  const { share_groups: groups } = await get("/v1/share-groups", signal);
  return h(
    "section",
    {},
    heading("Queues (share groups)"),
    groups.length
      ? table(
          plural(groups.length, "share group"),
          [
            ["Share group", (g) => link(path("/queues", g.group), g.group)],
            ["State", (g) => g.state],
            ["Members", (g) => g.members],
          ],
          groups,
        )
      : empty(
          "No share groups yet (or none you may describe). A consumer joins one with:",
          `curl -X POST ${origin()}/v1/share-groups/my-queue/members -H 'Content-Type: application/json' -d '{"topics": ["orders"]}'`,
        ),
  );
}

function inFlight(group) {
  return group.partitions.reduce((sum, p) => sum + p.acquired, 0);
}

function remember(name, group) {
  const now = Date.now();
  const points = history.get(name) ?? [];
  points.push([now, group.lag, inFlight(group)]);
  while (points.length && points[0][0] < now - SPAN_MS) points.shift();
  history.set(name, points);
}

function queueChart(name) {
  const points = history.get(name) ?? [];
  const last = points.at(-1) ?? [0, 0, 0];
  return chart(
    [
      { name: "lag", points: points.map(([t, lag]) => [t, lag]) },
      { name: "acquired", points: points.map(([t, , held]) => [t, held]) },
    ],
    {
      span_ms: SPAN_MS,
      unit: "records",
      summary: `${name}: ${plural(last[1], "record")} not yet done, ${plural(last[2], "record")} acquired now`,
      idle: "Nothing waiting and nothing acquired",
    },
  );
}

function resetForm(name, group) {
  const topics = [...new Set(group.partitions.map((p) => p.topic))];
  return form(
    "Start a topic over (the share group must have no members)",
    [
      field("Topic", h("select", { id: "queue-reset-topic", name: "topic" }, topics.map((t) => h("option", { value: t }, t)))),
      field("To", h("select", { id: "queue-reset-to", name: "to" },
        h("option", { value: "earliest" }, "the earliest offset"),
        h("option", { value: "latest" }, "the latest offset"))),
    ],
    "Start over…",
    async (data) => {
      if (!(await confirm(`Start share group ${name}'s partitions of ${data.topic} over at the ${data.to} offset? Records in flight are forgotten.`, "Start over"))) return null;
      return api("PUT", path("/v1/share-groups", name, "offsets"), { topic: data.topic, to: data.to });
    },
    (answer) => {
      if (answer) refresh();
    },
  );
}

async function deliveredBy(name, signal) {
  // the queue-mode subscriptions whose share group this is (their group is named after them)
  const { subscriptions } = await get("/v1/subscriptions", signal);
  return subscriptions.filter((s) => s.mode === "queue" && s.group === name);
}

export async function detail([name], _query, signal) {
  const [group, pushers] = await Promise.all([
    get(path("/v1/share-groups", name), signal),
    deliveredBy(name, signal),
  ]);
  remember(name, group);
  const chartBox = h("div", {}, queueChart(name));
  const timer = setInterval(async () => {
    try {
      remember(name, await get(path("/v1/share-groups", name), signal));
      chartBox.replaceChildren(queueChart(name));
    } catch {
      // the next poll tries again; leaving the page stops it
    }
  }, POLL_MS);
  signal.addEventListener("abort", () => clearInterval(timer));
  const removed = h("div", { "aria-live": "polite" });
  const remove = h("button", { type: "button", class: "danger", id: "delete-share-group" }, "Delete share group…");
  remove.addEventListener("click", async () => {
    if (!(await confirm(`Delete share group ${name}, its configs and its records in flight?`, "Delete"))) return;
    try {
      await api("DELETE", path("/v1/share-groups", name));
      location.hash = "#/queues";
    } catch (error) {
      removed.replaceChildren(problem(error));
    }
  });
  const configs = Object.entries(group.configs);
  return h(
    "section",
    {},
    heading(`Share group ${name}`),
    facts([
      ["State", group.state],
      ["Not yet done", plural(group.lag, "record")],
      ["Acquired now", plural(inFlight(group), "record")],
      ["Configs", configs.length ? configs.map(([k, v]) => `${k}=${v}`).join(", ") : "the defaults"],
    ]),
    chartBox,
    pushers.length
      ? table(
          "Delivered by push subscriptions",
          [
            ["Subscription", (s) => link(path("/subscriptions", s.name), s.name)],
            ["Endpoint", (s) => h("code", {}, s.endpoint)],
            ["Dead letters", (s) => (s.dead_letter_topic ? link(path("/topics", s.dead_letter_topic, "messages"), s.dead_letter_topic) : "—")],
          ],
          pushers,
        )
      : null,
    group.members.length
      ? table(
          "Members",
          [
            ["Member", (m) => h("code", {}, m.member_id)],
            ["Topics", (m) => m.topics.join(", ")],
            ["Acquired", (m) => m.acquired],
            ["Session timeout", (m) => `${m.session_timeout_ms} ms`],
          ],
          group.members,
        )
      : h("p", { class: "note" }, "No members now: a topic can be started over or the share group deleted."),
    group.partitions.length
      ? table(
          "Records in flight per partition",
          [
            ["Topic", (p) => link(path("/topics", p.topic), p.topic)],
            ["Partition", (p) => p.partition],
            ["Start", (p) => p.start_offset],
            ["End", (p) => p.end_offset],
            ["High watermark", (p) => show(p.high_watermark)],
            ["Acquired", (p) => p.acquired],
            ["Available", (p) => p.available],
            ["Acknowledged", (p) => p.acknowledged],
            ["Archived", (p) => p.archived],
            ["Lag", (p) => show(p.lag)],
          ],
          group.partitions,
        )
      : empty("No partitions read yet: a member's first acquire starts them.", null),
    group.partitions.length ? resetForm(name, group) : null,
    h("h2", {}, "Delete"),
    remove,
    removed,
  );
}
