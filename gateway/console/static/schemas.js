// Schemas: the registry's subjects and their versions, and one version's schema (JSON
// pretty-printed, Protobuf as written), its id, type, references and compatibility level.
// Read from the registry's API under /schema-registry (Confluent's paths).

import { get, parseJSON, path, toJSON } from "./api.js";
import { empty, facts, h, heading, link, origin, plural, table } from "./ui.js";

const REGISTRY = "/schema-registry";
const MAX_SUBJECTS = 200; // subjects whose versions the list asks for (one call each)

export async function list(_params, _query, signal) {
  const subjects = await get(`${REGISTRY}/subjects`, signal);
  const shown = subjects.slice(0, MAX_SUBJECTS);
  const versions = await Promise.all(shown.map((s) => get(path(`${REGISTRY}/subjects`, s, "versions"), signal)));
  const rows = shown.map((subject, i) => ({ subject, versions: versions[i] }));
  return h(
    "section",
    {},
    heading("Schemas"),
    rows.length
      ? [
          table(
            subjects.length > shown.length
              ? `${plural(subjects.length, "subject")}, the first ${shown.length} shown`
              : plural(subjects.length, "subject"),
            [
              ["Subject", (r) => link(path("/schemas", r.subject), r.subject)],
              ["Versions", (r) => h("span", { class: "versions" },
                r.versions.map((v, i) => [i ? ", " : "", link(`${path("/schemas", r.subject)}?version=${v}`, String(v))]))],
            ],
            rows,
          ),
        ]
      : empty(
          "No schemas registered yet. Register one (confluent-kafka's serializers do it on their first record):",
          `curl -X POST ${origin()}${REGISTRY}/subjects/orders-value/versions -H 'Content-Type: application/vnd.schemaregistry.v1+json' -d '{"schema": "{\\"type\\": \\"string\\"}"}'`,
        ),
  );
}

/** A schema's text for reading: JSON (Avro, JSON Schema) indented, Protobuf as written. */
function pretty(schema) {
  if (schema.schemaType === "PROTOBUF") return schema.schema;
  try {
    return toJSON(parseJSON(schema.schema), 2);
  } catch {
    return schema.schema;
  }
}

export async function detail([subject], query, signal) {
  const base = path(`${REGISTRY}/subjects`, subject);
  const wanted = query.get("version") || "latest";
  const [versions, schema, config] = await Promise.all([
    get(`${base}/versions`, signal),
    get(`${base}/versions/${encodeURIComponent(wanted)}`, signal),
    get(`${path(`${REGISTRY}/config`, subject)}?defaultToGlobal=true`, signal),
  ]);
  const here = path("/schemas", subject);
  const references = schema.references ?? [];
  return h(
    "section",
    {},
    heading(`Subject ${subject}`, h("p", { class: "actions" }, link("/schemas", "All subjects"))),
    h("nav", { "aria-label": "Versions" }, h("p", { id: "schema-versions" }, "Versions: ",
      versions.map((v, i) => [i ? " · " : "", v === schema.version
        ? h("strong", { "aria-current": "page" }, String(v))
        : link(`${here}?version=${v}`, String(v))]))),
    facts([
      ["Version", h("span", { id: "schema-version" }, String(schema.version))],
      ["Schema id", h("span", { id: "schema-id" }, String(schema.id))],
      ["Type", schema.schemaType ?? "AVRO"],
      ["Compatibility", config.compatibilityLevel ?? "—"],
      ["References", references.length
        ? h("ul", { class: "headers" }, references.map((r) =>
            h("li", {}, h("code", {}, r.name), ": ", link(`${path("/schemas", r.subject)}?version=${r.version}`, `${r.subject} version ${r.version}`))))
        : "none"],
    ]),
    h("h2", {}, "Schema"),
    h("pre", { class: "schema", id: "schema-text" }, pretty(schema)),
  );
}
