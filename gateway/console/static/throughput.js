// Throughput: produce and fetch rates per topic, and the produces the admission control
// admitted and shed, from the node's own counters (GET /v1/traffic, polled while the page is
// open), charted and tabled.

import { get, notAllowed } from "./api.js";
import { bytes, chart, empty, h, heading, origin, table } from "./ui.js";

const POLL_MS = 2000;
const SPAN_MS = 5 * 60 * 1000;
const samples = []; // [{time_ms, topics: Map(topic -> counters), admission}], while the console is open

function remember(answer) {
  samples.push({
    time_ms: answer.time_ms,
    topics: new Map(answer.topics.map((t) => [t.topic, t])),
    admission: answer.admission,
  });
  while (samples.length > 2 && samples[0].time_ms < answer.time_ms - SPAN_MS) samples.shift();
}

/** Per topic, [[time_ms, rate], ...] of `field` per second between consecutive samples. */
function rates(field) {
  const series = new Map();
  for (let i = 1; i < samples.length; i += 1) {
    const [before, after] = [samples[i - 1], samples[i]];
    const seconds = (after.time_ms - before.time_ms) / 1000;
    if (seconds <= 0) continue;
    for (const [topic, counts] of after.topics) {
      const old = before.topics.get(topic)?.[field] ?? 0;
      const rate = Math.max(0, counts[field] - old) / seconds; // a restart resets the counters
      if (!series.has(topic)) series.set(topic, []);
      series.get(topic).push([after.time_ms, rate]);
    }
  }
  return [...series].map(([name, points]) => ({ name, points }));
}

/** [[time_ms, rate], ...] of the admission's `field` (admitted, shed) per second. */
function admissionRate(field) {
  const points = [];
  for (let i = 1; i < samples.length; i += 1) {
    const [before, after] = [samples[i - 1], samples[i]];
    const seconds = (after.time_ms - before.time_ms) / 1000;
    if (seconds > 0) points.push([after.time_ms, Math.max(0, after.admission[field] - before.admission[field]) / seconds]);
  }
  return points;
}

/** The admission control's chart, and a warning while produces are being shed. */
function admissionView() {
  const admitted = admissionRate("admitted");
  const shed = admissionRate("shed");
  const shedNow = shed.at(-1)?.[1] ?? 0;
  return h("div", { id: "admission" },
    shedNow > 0
      ? h("p", { class: "problem", role: "status" },
        `Overloaded: ${Math.round(shedNow).toLocaleString("en")} produces/s answered 503 SERVER_OVERLOADED (clients retry after Retry-After).`)
      : h("p", { class: "note" }, "No produce shed: every produce was admitted."),
    chart([{ name: "admitted", points: admitted }, { name: "shed (503)", points: shed }],
      { span_ms: SPAN_MS, unit: "produces/s", summary: "Produce requests admitted and shed per second (admission control)", idle: "No produce" }));
}

const latest = (series, topic) => series.find((s) => s.name === topic)?.points.at(-1)?.[1] ?? 0;

function view() {
  const produced = rates("records_in");
  const fetched = rates("records_out");
  const producedBytes = rates("bytes_in");
  const fetchedBytes = rates("bytes_out");
  const last = samples.at(-1);
  const topics = last ? [...last.topics.keys()] : [];
  if (!topics.length) {
    return h("div", {}, admissionView(), empty("No traffic since this node started. Produce a record and watch it here:",
      `curl -X POST ${origin()}/v1/topics/orders/records -H 'Content-Type: application/json' -d '{"records": [{"value": 1}]}'`));
  }
  const round = (n) => (n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString("en"));
  return h("div", {},
    chart(produced, { span_ms: SPAN_MS, unit: "records/s", summary: "Records produced per second, per topic", idle: "No traffic" }),
    chart(fetched, { span_ms: SPAN_MS, unit: "records/s", summary: "Records fetched per second, per topic", idle: "No traffic" }),
    table("Rates now (over the last poll) and totals since the node started", [
      ["Topic", (t) => t],
      ["Produced records/s", (t) => round(latest(produced, t))],
      ["Produced bytes/s", (t) => bytes(Math.round(latest(producedBytes, t)))],
      ["Fetched records/s", (t) => round(latest(fetched, t))],
      ["Fetched bytes/s", (t) => bytes(Math.round(latest(fetchedBytes, t)))],
      ["Records in (total)", (t) => last.topics.get(t).records_in.toLocaleString("en")],
      ["Records out (total)", (t) => last.topics.get(t).records_out.toLocaleString("en")],
    ], topics),
    admissionView());
}

export async function page(_params, _query, signal, me) {
  if (!me.cluster_authorized_operations.includes("describe")) throw notAllowed(me, "describe the cluster, whose traffic this page charts");
  remember(await get("/v1/traffic", signal));
  const box = h("div", { id: "throughput" }, view());
  const timer = setInterval(async () => {
    try {
      remember(await get("/v1/traffic", signal));
      box.replaceChildren(view());
    } catch {
      // the next poll tries again; leaving the page stops it
    }
  }, POLL_MS);
  signal.addEventListener("abort", () => clearInterval(timer));
  return h("section", {}, heading("Throughput"),
    h("p", {}, `This node's counters, read every ${POLL_MS / 1000} s while the page is open (no Prometheus needed). Rates need two readings.`),
    box);
}
