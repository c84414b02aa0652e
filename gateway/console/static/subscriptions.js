// Subscriptions: push deliveries' state, positions and lag per partition, retries and
// dead-lettered records (with a link to browse the dead-letter topic); pause and resume.

import { api, get, path } from "./api.js";
import { empty, facts, h, heading, link, origin, plural, problem, refresh, show, table } from "./ui.js";

export async function list(_params, _query, signal) {
  const { subscriptions } = await get("/v1/subscriptions", signal);
  return h(
    "section",
    {},
    heading("Subscriptions"),
    subscriptions.length
      ? table(
          plural(subscriptions.length, "subscription"),
          [
            ["Name", (s) => link(path("/subscriptions", s.name), s.name)],
            ["Topic", (s) => link(path("/topics", s.topic), s.topic)],
            ["Endpoint", (s) => h("code", {}, s.endpoint)],
            ["State", (s) => h("span", { class: `state-${s.state}` }, s.state ?? (s.paused ? "paused" : "—"))],
          ],
          subscriptions,
        )
      : empty(
          "No push subscriptions yet (or none you may describe). One POSTs a topic's records to your endpoint:",
          `curl -X POST ${origin()}/v1/subscriptions -H 'Content-Type: application/json' -d '{"name": "orders-hook", "topic": "orders", "endpoint": "https://example.com/hook"}'`,
        ),
  );
}

export async function detail([name], _query, signal) {
  const sub = await get(path("/v1/subscriptions", name), signal);
  const status = h("div", { "aria-live": "polite" });
  const act = async (verb) => {
    try {
      await api("POST", path("/v1/subscriptions", name, verb));
      refresh();
    } catch (error) {
      status.replaceChildren(problem(error));
    }
  };
  const toggle = sub.paused
    ? h("button", { type: "button", id: "resume", onclick: () => act("resume") }, "Resume")
    : h("button", { type: "button", id: "pause", onclick: () => act("pause") }, "Pause");
  const dlt = sub.dead_letter_topic;
  return h(
    "section",
    {},
    heading(`Subscription ${name}`, h("p", { class: "actions" }, toggle)),
    status,
    facts([
      ["State", h("span", { class: `state-${sub.state}`, id: "subscription-state" }, sub.state)],
      ...(sub.pause_reason ? [["Paused because", sub.pause_reason]] : []),
      ["Topic", link(path("/topics", sub.topic), sub.topic)],
      ["Endpoint", h("code", {}, sub.endpoint)],
      ["Group (positions)", link(path("/groups", sub.group), sub.group)],
      ["Lag", sub.lag === null || sub.lag === undefined ? "—" : plural(sub.lag, "record")],
      ["Delivered", sub.delivered],
      ["Retried", sub.retried],
      ["In flight", sub.in_flight],
      ["Dead-lettered", dlt ? h("span", {}, `${sub.dead_lettered} to `, link(`${path("/topics", dlt)}/messages?order=newest`, dlt)) : `${sub.dead_lettered} (no dead-letter topic)`],
    ]),
    table(
      "Partitions",
      [
        ["Partition", (p) => p.partition],
        ["State", (p) => p.state],
        ["Position (committed)", (p) => show(p.committed_offset)],
        ["High watermark", (p) => show(p.high_watermark)],
        ["Lag", (p) => show(p.lag)],
        ["In flight", (p) => show(p.in_flight)],
        ["Attempts", (p) => show(p.attempts)],
        ["Last error", (p) => show(p.last_error)],
      ],
      sub.partitions,
    ),
  );
}
