// Building blocks of the pages: elements, tables, problems, empty states, confirmations,
// forms and a small SVG line chart. Text goes in as text nodes, never as HTML.

/** `h("a", {href: "#/topics"}, "Topics")`: an element; `on*` attributes become listeners. */
export function h(tag, attrs = {}, ...children) {
  const svg = ["svg", "polyline", "circle", "line", "text", "title"].includes(tag);
  const el = svg
    ? document.createElementNS("http://www.w3.org/2000/svg", tag)
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function link(route, text) {
  return h("a", { href: `#${route}` }, text);
}

/**
 * A table: `columns` are [heading, (row) => cell]; `caption` says what it lists. `stacked`:
 * in a narrow window each row shows as a block of labelled cells (the roles keep it a table
 * to assistive technology, which a CSS display change would not).
 */
export function table(caption, columns, rows, { stacked = false } = {}) {
  const role = (name) => (stacked ? name : undefined);
  return h(
    "div",
    { class: stacked ? "scroll stacked" : "scroll" },
    h(
      "table",
      { role: role("table") },
      h("caption", {}, caption),
      h("thead", { role: role("rowgroup") }, h("tr", { role: role("row") },
        columns.map(([name]) => h("th", { scope: "col", role: role("columnheader") }, name)))),
      h(
        "tbody",
        { role: role("rowgroup") },
        rows.map((row) => h("tr", { role: role("row") },
          columns.map(([name, cell]) => h("td", { role: role("cell"), "data-label": stacked ? name : undefined }, cell(row))))),
      ),
    ),
  );
}

/** A facts list: [[term, value], ...]. */
export function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]),
  );
}

/** An API error as the problem's title and detail (the code too), for a human. */
export function problem(error) {
  const doc = error.problem || {};
  return h(
    "div",
    { class: "problem", role: "alert" },
    h("strong", {}, doc.title || "Request failed"),
    doc.code ? h("code", {}, ` ${doc.code}`) : null,
    h("p", {}, doc.detail || error.message),
  );
}

/** What to do when there is nothing to show: a sentence and the curl line that would help. */
export function empty(text, curl) {
  return h(
    "div",
    { class: "empty" },
    h("p", {}, text),
    curl ? h("pre", {}, h("code", {}, curl)) : null,
  );
}

/** Show the current page again, with fresh data (after an action changed it). */
export const refresh = () => window.dispatchEvent(new HashChangeEvent("hashchange"));

/** The node's own URL, for the curl lines of empty states. */
export const origin = () => location.origin;

export function heading(text, ...extra) {
  return h("header", { class: "page-head" }, h("h1", { tabindex: "-1" }, text), ...extra);
}

/** A modal question; resolves true only on the confirming button. `typed`: a word to type. */
export function confirm(question, action, typed) {
  return new Promise((resolve) => {
    const input = typed
      ? h("input", { id: "confirm-typed", autocomplete: "off", required: true })
      : null;
    const yes = h("button", { type: "submit", class: "danger" }, action);
    const dialog = h(
      "dialog",
      { class: "confirm", "aria-labelledby": "confirm-question" },
      h(
        "form",
        { method: "dialog" },
        h("p", { id: "confirm-question" }, question),
        typed ? h("label", { for: "confirm-typed" }, `Type ${typed} to confirm`) : null,
        input,
        h(
          "div",
          { class: "buttons" },
          h("button", { type: "button", value: "cancel", onclick: () => dialog.close("cancel") }, "Cancel"),
          yes,
        ),
      ),
    );
    if (input) {
      yes.disabled = true;
      input.addEventListener("input", () => (yes.disabled = input.value !== typed));
    }
    yes.addEventListener("click", () => (dialog.returnValue = "yes"));
    dialog.addEventListener("close", () => {
      dialog.remove();
      resolve(dialog.returnValue === "yes");
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** A labelled control: `field("Partitions", h("input", {...}))` (the control needs an id). */
export function field(label, control, hint) {
  return h(
    "div",
    { class: "field" },
    h("label", { for: control.id }, label),
    control,
    hint ? h("small", {}, hint) : null,
  );
}

/**
 * A form that runs `submit(data)` (its named controls' values) and shows the answer or the
 * problem under it; `done(result)` may return what to show.
 */
export function form(legend, controls, button, submit, done) {
  const status = h("div", { class: "status", "aria-live": "polite" });
  const el = h(
    "form",
    { class: "action" },
    h("fieldset", {}, h("legend", {}, legend), controls, h("button", { type: "submit" }, button)),
    status,
  );
  el.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.replaceChildren();
    const data = Object.fromEntries(new FormData(el).entries());
    try {
      const result = await submit(data);
      const shown = done ? done(result) : null;
      if (shown) status.replaceChildren(shown);
    } catch (error) {
      status.replaceChildren(problem(error));
    }
  });
  return el;
}

export function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function duration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "forever";
  const units = [["d", 86400000], ["h", 3600000], ["min", 60000], ["s", 1000]];
  for (const [unit, size] of units) if (ms >= size && ms % size === 0) return `${ms / size} ${unit}`;
  return `${ms} ms`;
}

/** A count with its noun: "1 partition", "2 partitions" (`many` for an irregular plural). */
export const plural = (n, one, many = `${one}s`) => `${n} ${Number(n) === 1 ? one : many}`;

export const show = (value) => (value === null || value === undefined ? "—" : String(value));

const PALETTE = ["#1b6ac9", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490"];

/**
 * A line chart of `series` ([{name, points: [[time_ms, value], ...]}]) over the last
 * `span_ms`; described in text for screen readers by `summary`. Nothing but zeros (or no
 * reading yet) is said in words, `idle` ("No traffic") and since when, instead of a flat line.
 */
export function chart(series, { span_ms, unit, summary, idle = "Nothing" }) {
  const width = 640;
  const height = 180;
  const pad = 36;
  const now = Date.now();
  const minutes = Math.round(span_ms / 60000);
  const points = series.flatMap((s) => s.points);
  if (points.every(([, v]) => Number(v) === 0)) {
    const since = Math.min(now, ...points.map(([t]) => t));
    const when = !points.length ? "measured yet"
      : now - since >= span_ms - 60000 ? `in the last ${plural(minutes, "minute")}` : "since this page opened";
    return h("figure", { class: "chart idle" },
      h("p", {}, `${idle} ${when}.`),
      h("figcaption", {}, `${summary} (${unit}, last ${minutes} min)`));
  }
  const top = Math.max(1, ...series.flatMap((s) => s.points.map(([, v]) => v)));
  const x = (t) => pad + ((t - (now - span_ms)) / span_ms) * (width - pad - 8);
  const y = (v) => height - pad / 2 - (v / top) * (height - pad);
  return h(
    "figure",
    { class: "chart" },
    h(
      "svg",
      { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": summary },
      h("line", { x1: pad, y1: y(0), x2: width - 8, y2: y(0), stroke: "#999" }),
      h("text", { x: 2, y: y(top) + 4, "font-size": 11, fill: "currentColor" }, fmt(top)),
      h("text", { x: 2, y: y(0), "font-size": 11, fill: "currentColor" }, "0"),
      series.map((s, i) =>
        h(
          "polyline",
          {
            fill: "none",
            stroke: PALETTE[i % PALETTE.length],
            "stroke-width": 2,
            points: s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
          },
          h("title", {}, s.name),
        ),
      ),
      // A series of one reading so far: a dot, as a line needs two.
      series.map((s, i) =>
        s.points.length === 1
          ? h("circle", { cx: x(s.points[0][0]).toFixed(1), cy: y(s.points[0][1]).toFixed(1), r: 3, fill: PALETTE[i % PALETTE.length] })
          : null,
      ),
    ),
    h(
      "figcaption",
      {},
      `${summary} (${unit}, last ${minutes} min) `,
      series.map((s, i) =>
        h("span", { class: `key key-${i % PALETTE.length}` }, s.name),
      ),
    ),
  );
}

function fmt(v) {
  return v >= 1000 ? `${(v / 1000).toFixed(1)}k` : v.toFixed(v < 10 ? 1 : 0);
}
