// Messages: browse a partition from an offset or a time, oldest or newest first; produce a
// record from a form; follow the topic live over Server-Sent Events. Values in the schema
// registry's wire format are shown decoded (the node decodes them: `decode_values=schema`).

import { ApiError, api, follow, get, parseJSON, path, toJSON } from "./api.js";
import { empty, field, form, h, heading, link, origin, plural, problem, table } from "./ui.js";

const LIMITS = [20, 50, 100, 500];
const COMPACT_CHARS = 300;
const TAIL_ROWS = 100; // the live tail keeps this many records on screen
const TAIL_BATCH = 50; // records per stream, a stream a second at most: what a person can read
const TAIL_DRAW_MS = 1000;
const TAIL_READ_BYTES = 65536; // what each partition reads at a time for the tail

function records(path_, query) {
  return get(`${path_}?${new URLSearchParams(query)}`);
}

/** A record's value as text: JSON pretty-printed (on one line, cut, when `compact`), base64
 * said so. */
function valueText(record, compact) {
  if (record.value === null) return "null (tombstone)";
  if (record.value_encoding === "base64") return `base64: ${record.value}`;
  if (!compact) return toJSON(record.value, 2);
  const text = toJSON(record.value);
  return text.length > COMPACT_CHARS ? `${text.slice(0, COMPACT_CHARS)}…` : text;
}

/** The value's cell: its text, and how the schema registry read it (decoded with which
 * schema, or why not) when the page asked for decoded values. */
function valueCell(record, live) {
  const note = record.value_schema_id !== undefined
    ? h("small", { class: "schema-note" }, `decoded with schema id ${record.value_schema_id}`)
    : record.value_schema_error
      ? h("small", { class: "schema-note" }, `not decoded: ${record.value_schema_error}`)
      : null;
  if (live) return h("code", {}, valueText(record, true), note ? [" ", note] : null);
  return [h("pre", { class: "value" }, valueText(record, false)), note];
}

function headersOf(record) {
  const entries = Object.entries(record.headers || {});
  if (!entries.length) return "—";
  return h("ul", { class: "headers" }, entries.map(([k, v]) => h("li", {}, h("code", {}, k), ": ", v ?? "null")));
}

/** The columns of a records table; the live tail's (`live`) shows values on one line. */
const recordColumns = (live) => [
  ...(live ? [["Partition", (r) => r.partition]] : []),
  ["Offset", (r) => r.offset],
  ["Time", (r) => h("time", { datetime: new Date(r.timestamp).toISOString() }, new Date(r.timestamp).toISOString().replace("T", " ").replace("Z", ""))],
  ["Key", (r) => (r.key === null ? "—" : h("code", {}, r.key_encoding ? `base64: ${r.key}` : r.key))],
  ["Headers", headersOf],
  ["Value", (r) => valueCell(r, live)],
];

function produceForm(topic, partitions) {
  return form(
    "Produce a record",
    [
      field("Key", h("input", { id: "produce-key", name: "key", autocomplete: "off" }), "Empty: no key"),
      field("Value", h("textarea", { id: "produce-value", name: "value", rows: 4, required: true }), "JSON (an object, a number, \"text\" …)"),
      field("Headers", h("textarea", { id: "produce-headers", name: "headers", rows: 2 }), "One name: value per line"),
      field("Partition", h("select", { id: "produce-partition", name: "partition" },
        h("option", { value: "" }, "by key (or spread)"),
        Array.from({ length: partitions }, (_, p) => h("option", { value: p }, `partition ${p}`)))),
    ],
    "Produce",
    (data) => {
      let value;
      try {
        value = parseJSON(data.value);
      } catch (error) {
        throw new ApiError(400, { title: "The value is not JSON", detail: `${error.message}. Quote text: "like this".` });
      }
      const record = { value };
      if (data.key) record.key = data.key;
      if (data.partition !== "") record.partition = Number(data.partition);
      const headers = {};
      for (const line of data.headers.split("\n").filter((l) => l.trim())) {
        const colon = line.indexOf(":");
        if (colon < 1) throw new ApiError(400, { title: "Bad header line", detail: `"${line}" is not name: value` });
        headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
      }
      if (Object.keys(headers).length) record.headers = headers;
      return api("POST", path("/v1/topics", topic, "records"), { records: [record] });
    },
    (answer) => {
      const [written] = answer.results;
      return h("p", { class: "ok" }, `Written to partition ${written.partition} at offset ${written.base_offset}. `,
        link(`${path("/topics", topic)}/messages?partition=${written.partition}&from=offset&offset=${written.base_offset}`, "See it"));
    },
  );
}

function browseForm(topic, partitions, q) {
  const select = (id, name, options, chosen) =>
    h("select", { id, name }, options.map(([value, label]) => h("option", { value, selected: String(value) === String(chosen) }, label)));
  // The offset and the time are asked for only when "From" uses them (a hidden field is
  // disabled too, so it is left out of the URL).
  const offsetField = field("Offset", h("input", { id: "browse-offset", name: "offset", type: "number", min: 0, value: q.offset }));
  const timeField = field("Time (UTC)", h("input", { id: "browse-time", name: "time", type: "datetime-local", step: 1, value: q.time }));
  const shownFor = () => {
    const from = el.elements.from.value;
    for (const [box, wanted] of [[offsetField, "offset"], [timeField, "time"]]) {
      box.hidden = from !== wanted;
      box.querySelector("input").disabled = from !== wanted;
    }
  };
  const el = h(
    "form",
    { class: "action inline" },
    h("fieldset", {}, h("legend", {}, "Browse"),
      field("Partition", select("browse-partition", "partition", Array.from({ length: partitions }, (_, p) => [p, p]), q.partition)),
      field("From", select("browse-from", "from", [["beginning", "the beginning"], ["end", "the end"], ["offset", "an offset"], ["time", "a time"]], q.from)),
      offsetField,
      timeField,
      field("Order", select("browse-order", "order", [["oldest", "oldest first"], ["newest", "newest first"]], q.order)),
      field("Records", select("browse-limit", "limit", LIMITS.map((n) => [n, n]), q.limit)),
      field("Values", select("browse-values", "values", [["decoded", "decoded (schema registry)"], ["stored", "as stored"]], q.values)),
      h("button", { type: "submit" }, "Show")),
  );
  el.elements.from.addEventListener("change", shownFor);
  shownFor();
  el.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new URLSearchParams(new FormData(el));
    location.hash = `#${path("/topics", topic)}/messages?${data}`;
  });
  return el;
}

function options(query) {
  const limit = Number(query.get("limit")) || 50;
  return {
    partition: Number(query.get("partition")) || 0,
    from: query.get("from") || "end",
    offset: query.get("offset") ?? "",
    time: query.get("time") ?? "",
    order: query.get("order") === "oldest" ? "oldest" : "newest",
    limit: LIMITS.includes(limit) ? limit : 50,
    values: query.get("values") === "stored" ? "stored" : "decoded",
  };
}

/** The records asked for: [records in display order, start, anchor, log start, end]. */
async function load(topic, q, signal) {
  const base = path("/v1/topics", topic, "partitions", String(q.partition));
  const [first, last] = await Promise.all([
    get(`${base}/offsets?timestamp=earliest`, signal),
    get(`${base}/offsets?timestamp=latest`, signal),
  ]);
  let anchor;
  if (q.from === "beginning") anchor = first.offset;
  else if (q.from === "end") anchor = last.offset;
  else if (q.from === "offset") anchor = Math.min(Math.max(Number(q.offset) || 0, first.offset), last.offset);
  else {
    const ms = Date.parse(`${q.time}Z`);
    if (Number.isNaN(ms)) throw new ApiError(400, { title: "No time given", detail: "Choose a time to browse from." });
    anchor = (await get(`${base}/offsets?timestamp=${ms}`, signal)).offset;
  }
  // Oldest first reads from the anchor on; newest first, the records before it (an offset
  // anchor includes its own record).
  const until = q.order === "newest" ? (q.from === "offset" ? Math.min(anchor + 1, last.offset) : anchor) : null;
  const start = q.order === "newest" ? Math.max(first.offset, until - q.limit) : Math.max(anchor, first.offset);
  const end = q.order === "newest" ? until : last.offset;
  let rows = [];
  if (start < end) {
    const decode = q.values === "decoded" ? { decode_values: "schema" } : {};
    const answer = await records(`${base}/records`, { offset: start, max_records: q.limit, timeout_ms: 0, ...decode });
    rows = answer.records.filter((r) => r.offset < end);
  }
  if (q.order === "newest") rows.reverse();
  return { rows, start, end, first: first.offset, last: last.offset };
}

export async function browse([topic], query, signal) {
  const description = await get(path("/v1/topics", topic), signal);
  const q = options(query);
  const here = `${path("/topics", topic)}/messages`;
  let body;
  try {
    const { rows, start, end, first, last } = await load(topic, q, signal);
    const page = (from, offset) =>
      link(`${here}?${new URLSearchParams({ ...q, from, offset })}`, from === "offset" ? `from offset ${offset}` : from);
    const older = q.order === "newest" ? (start > first ? page("offset", start - 1) : null) : null;
    const newer = q.order === "oldest" && rows.length && rows.at(-1).offset + 1 < last ? page("offset", rows.at(-1).offset + 1) : null;
    body = [
      h("p", { class: "range" }, `Partition ${q.partition}: offsets ${first} to ${last} (log start and high watermark). `,
        older ? h("span", {}, "Older: ", older) : null, newer ? h("span", {}, " Next: ", newer) : null),
      rows.length
        ? table(`${plural(rows.length, "record")}, ${q.order === "newest" ? "newest" : "oldest"} first, offsets ${start} to ${Math.max(start, end - 1)}`,
            recordColumns(false), rows, { stacked: true })
        : empty(last === first ? "This partition is empty. Produce a record with the form below, or with curl:" : "No records there.",
            `curl -X POST ${origin()}/v1/topics/${topic}/records -H 'Content-Type: application/json' -d '{"records": [{"key": "k", "value": {"hello": "world"}}]}'`),
    ];
  } catch (error) {
    if (!(error instanceof ApiError) || error.status === 401) throw error;
    body = [problem(error)];
  }
  return h(
    "section",
    {},
    heading(`Records of ${topic}`, h("p", { class: "actions" },
      link(path("/topics", topic), "Topic"), " · ", link(`${path("/topics", topic)}/tail`, "Live tail"))),
    browseForm(topic, description.partitions.length, q),
    ...body,
    produceForm(topic, description.partitions.length),
  );
}

export async function tail([topic], query, signal) {
  const description = await get(path("/v1/topics", topic), signal);
  const state = h("output", { id: "tail-state", "aria-live": "polite" }, "connecting");
  const count = h("output", { id: "tail-count" }, "0");
  const rows = h("tbody", {});
  const columns = recordColumns(true);
  const shown = h("div", { class: "scroll" }, h("table", { id: "tail" },
    h("caption", {}, "Live records, newest first"),
    h("thead", {}, h("tr", {}, columns.map(([name]) => h("th", { scope: "col" }, name)))), rows));
  const failure = h("div", {});
  const skippedOut = h("output", { id: "tail-skipped" }, "0");
  let seen = 0;
  let skipped = 0;
  const next = new Map(); // partition -> the offset after the last record shown
  // Records are drawn once a second, at most a screenful each time: however fast the topic,
  // drawing costs the browser a bounded effort.
  let pending = [];
  const draw = setInterval(() => {
    count.textContent = String(seen);
    skippedOut.textContent = String(skipped);
    if (!pending.length) return;
    const fresh = pending.reverse().map((record) => h("tr", {}, columns.map(([, cell]) => h("td", {}, cell(record)))));
    pending = [];
    rows.prepend(...fresh);
    while (rows.childElementCount > TAIL_ROWS) rows.lastElementChild.remove();
  }, TAIL_DRAW_MS);
  signal.addEventListener("abort", () => clearInterval(draw));
  const replay = query.get("from") === "earliest";
  const base = `${path("/v1/topics", topic, "events")}?max_events=${TAIL_BATCH}&max_bytes=${TAIL_READ_BYTES}&decode_values=schema`;
  // Each stream ends after TAIL_BATCH records and the next opens a second after the last did:
  // a topic faster than that is sampled (the page says how many records it skipped), so a
  // console left open costs the node a bounded effort. A replay goes on from where the last
  // stream stopped, at that pace, skipping nothing.
  const urlFor = (lastId) =>
    lastId === null ? `${base}&offset=${replay ? "earliest" : "latest"}`
      : replay ? `${base}&cursor=${encodeURIComponent(lastId)}` : `${base}&offset=latest`;
  follow(urlFor, {
    signal,
    onState: (text) => (state.textContent = text),
    onEvent: (type, data) => {
      if (type === "problem") {
        const doc = parseJSON(data);
        failure.replaceChildren(problem(new ApiError(doc.status, doc)));
        return;
      }
      if (type !== "record") return;
      const record = parseJSON(data);
      const expected = next.get(record.partition);
      if (expected !== undefined && record.offset > expected) skipped += record.offset - expected;
      next.set(record.partition, record.offset + 1);
      pending.push(record);
      if (pending.length > TAIL_ROWS) pending.splice(0, pending.length - TAIL_ROWS);
      seen += 1;
    },
  }).catch((error) => {
    state.textContent = "stopped";
    failure.replaceChildren(problem(error));
  });
  const from = replay ? "earliest" : "latest";
  return h(
    "section",
    {},
    heading(`Live tail of ${topic}`, h("p", { class: "actions" },
      link(path("/topics", topic), "Topic"), " · ", link(`${path("/topics", topic)}/messages`, "Browse"), " · ",
      from === "latest" ? link(`${path("/topics", topic)}/tail?from=earliest`, "Replay from the beginning") : link(`${path("/topics", topic)}/tail`, "Only new records"))),
    h("p", {}, `Following ${plural(description.partitions.length, "partition")} from the ${from === "latest" ? "end" : "beginning"}: `, state, ". Records received: ", count,
      ", skipped to keep up: ", skippedOut, `. At most ${TAIL_BATCH} records a second are sent to this page; the last ${TAIL_ROWS} stay on screen; leave the page to stop.`),
    failure,
    shown,
    produceForm(topic, description.partitions.length),
  );
}
