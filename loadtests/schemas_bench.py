"""The schema registry's costs, all from one gateway in one run (ratios, not absolutes).

h2load over HTTP/1.1 against one gateway process, cells alternating over the rounds (the median
is the figure):

- `GET /schema-registry/schemas/ids/{id}` (served from the node's own view) against
  `GET /healthz`, 64 connections;
- produce of a batch of 1,000 records, 16 connections, acks=1, to a topic without validation
  and to one with `value.schema.validation`: binary batches of Avro values in Confluent's wire
  format (the check is the schema id's), and JSON bodies checked against a JSON Schema;
- REST Proxy v2 produce of 100 records, 16 connections: the avro format with `value_schema_id`
  (each value encoded by the proxy) against the binary format carrying the same wire-format
  bytes as base64.

    python -m loadtests.schemas_bench [--quick] [--rounds N] [--seconds S] [--out DIR]
"""

from __future__ import annotations

import base64
import io
import time
from pathlib import Path
from typing import Any

import orjson
from fastavro import parse_schema, schemaless_writer

from engine import batch as fmt
from loadtests import generators, ratio_cli, report
from loadtests.common import http_json, start_gateway
from loadtests.rows import judged, rates

RECORDS = 1000
REST_RECORDS = 100
REGISTRY = "/schema-registry"
USER = {
    "type": "record",
    "name": "User",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "score", "type": "double"},
    ],
}
USER_JSON = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "score": {"type": "number"},
    },
    "required": ["id", "name"],
}
CELLS = [  # (what, connections)
    ("healthz", 64),
    ("schema-by-id", 64),
    ("avro-batch", 16),
    ("avro-batch-validated", 16),
    ("json-batch", 16),
    ("json-batch-validated", 16),
    ("rest-binary", 16),
    ("rest-avro", 16),
]
REST_TYPES = {
    "rest-binary": "application/vnd.kafka.binary.v2+json",
    "rest-avro": "application/vnd.kafka.avro.v2+json",
}


def _register(url: str, subject: str, schema: object, schema_type: str) -> int:
    doc = {"schema": orjson.dumps(schema).decode(), "schemaType": schema_type}
    answer = http_json("POST", f"{url}{REGISTRY}/subjects/{subject}/versions", doc)
    schema_id: int = answer["id"]
    return schema_id


def _user(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"user-{i}", "score": i / 7}


def _avro_values(schema_id: int, count: int) -> list[bytes]:
    """Avro values in the wire format (as confluent-kafka's AvroSerializer writes them)."""
    parsed = parse_schema(USER)
    values = []
    for i in range(count):
        out = io.BytesIO()
        out.write(b"\x00" + schema_id.to_bytes(4, "big"))
        schemaless_writer(out, parsed, _user(i))
        values.append(out.getvalue())
    return values


def _avro_batch(schema_id: int) -> bytes:
    """1,000 Avro values in one binary batch (as a Kafka producer would send them)."""
    values = _avro_values(schema_id, RECORDS)
    return bytes(fmt.encode_batch([fmt.RecordInput(None, v) for v in values]))


def _rest_bodies(schema_id: int) -> dict[str, bytes]:
    """v2 produce bodies of 100 users: avro (JSON values, the schema by id) and binary (the
    same values already in the wire format, base64)."""
    binary = [base64.b64encode(v).decode() for v in _avro_values(schema_id, REST_RECORDS)]
    return {
        "rest-avro": orjson.dumps(
            {
                "value_schema_id": schema_id,
                "records": [{"value": _user(i)} for i in range(REST_RECORDS)],
            }
        ),
        "rest-binary": orjson.dumps({"records": [{"value": v} for v in binary]}),
    }


def _json_body() -> bytes:
    records = [{"value": {"id": i, "name": f"user-{i}", "score": i / 7}} for i in range(RECORDS)]
    return orjson.dumps({"records": records})


def _topic(url: str, name: str, validated: bool) -> str:
    configs = {"value.schema.validation": True} if validated else {}
    http_json("POST", url + "/v1/topics", {"name": name, "partitions": 1, "configs": configs})
    return name


def run(rounds: int, seconds: float, scratch: Path) -> dict[str, Any]:
    """Every cell `rounds` times, alternating; the median round of each and the targets."""
    process, url = start_gateway(scratch / "data")
    results: dict[tuple[str, int], list[dict[str, Any]]] = {c: [] for c in CELLS}
    try:
        topics = {
            "avro-batch": _topic(url, "plain-avro", False),
            "avro-batch-validated": _topic(url, "users", True),
            "json-batch": _topic(url, "plain-json", False),
            "json-batch-validated": _topic(url, "accounts", True),
            "rest-binary": _topic(url, "rest-binary", False),
            "rest-avro": _topic(url, "rest-avro", False),
        }
        avro_id = _register(url, "users-value", USER, "AVRO")
        _register(url, "accounts-value", USER_JSON, "JSON")
        rest_id = _register(url, "rest-avro-value", USER, "AVRO")
        bodies = {"avro": scratch / "avro.bin", "json": scratch / "json.json"}
        bodies["avro"].write_bytes(_avro_batch(avro_id))
        bodies["json"].write_bytes(_json_body())
        for what, rest_body in _rest_bodies(rest_id).items():
            bodies[what] = scratch / f"{what}.json"
            bodies[what].write_bytes(rest_body)
        for _ in range(rounds):
            for cell in CELLS:
                what, connections = cell
                body: Path | None = None
                headers: dict[str, str] = {}
                if what == "healthz":
                    target = url + "/healthz"
                elif what == "schema-by-id":
                    target = f"{url}{REGISTRY}/schemas/ids/{avro_id}"
                elif what in REST_TYPES:
                    body = bodies[what]
                    headers = {"Content-Type": REST_TYPES[what]}
                    target = f"{url}/topics/{topics[what]}/partitions/0?acks=1"
                else:
                    kind = what.split("-")[0]
                    body = bodies[kind]
                    headers = {
                        "Content-Type": "application/vnd.sluice.record-batch"
                        if kind == "avro"
                        else "application/json"
                    }
                    target = f"{url}/v1/topics/{topics[what]}/partitions/0/records?acks=1"
                run_ = generators.h2load(
                    [target],
                    seconds=seconds,
                    server_pid=process.pid,
                    body=body,
                    headers=headers,
                    clients=connections,
                    http1=True,
                )
                per_request = RECORDS if body is not None else 1
                if what in REST_TYPES:
                    per_request = REST_RECORDS
                results[cell].append(
                    {"what": what, "connections": connections, **rates(run_, per_request, 0)}
                )
    finally:
        process.terminate()
        process.wait(30)
    rows = []
    for runs in results.values():
        runs.sort(key=lambda r: r["requests_per_s"])
        rows.append(
            {
                **runs[(len(runs) - 1) // 2],
                "rounds_requests_per_s": [r["requests_per_s"] for r in runs],
            }
        )
    return {"cells": rows, "targets": targets(rows)}


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The registry's figures, each with its target and whether this run met it."""
    rate = {r["what"]: r["requests_per_s"] for r in rows}
    figures = [
        ("GET /schemas/ids/{id} / GET /healthz", rate["schema-by-id"] / rate["healthz"], 0.8),
        (
            "produce 1,000 Avro records (wire format), validated / not",
            rate["avro-batch-validated"] / rate["avro-batch"],
            0.8,
        ),
        (
            "produce 1,000 JSON records, JSON Schema validated / not",
            rate["json-batch-validated"] / rate["json-batch"],
            0.5,
        ),
        (
            "REST Proxy v2 produce of 100 records, avro (value_schema_id) / binary",
            rate["rest-avro"] / rate["rest-binary"],
            0.5,
        ),
    ]
    return judged(figures)


def markdown(doc: dict[str, Any]) -> str:
    out = [
        "## Schema registry",
        "",
        "| cell | connections | requests/s (median) | rounds | records/s | server CPU s |",
        "|---|---|---|---|---|---|",
    ]
    for r in doc["cells"]:
        out.append(
            f"| {r['what']} | {r['connections']} | {r['requests_per_s']:,.0f} | "
            f"{', '.join(f'{x:,.0f}' for x in r['rounds_requests_per_s'])} | "
            f"{r['records_per_s']:,} | {r['server_cpu_s']} |"
        )
    out += ["", "| figure | this run | target | met |", "|---|---|---|---|"]
    for t in doc["targets"]:
        out.append(f"| {t['figure']} | {t['value']:,} | {t['target']:,} | {t['met']} |")
    return "\n".join(out) + "\n"


def main() -> None:
    started = time.monotonic()
    out, doc = ratio_cli.run_rounds(__doc__ or "", "loadtests.schemas_bench", 3, 5.0, run)
    doc["meta"]["wall_s"] = round(time.monotonic() - started, 1)
    ratio_cli.write(out, "schemas", doc, markdown(doc))
    report.plot_ratios(doc["targets"], "Schema registry", out / "schemas.png")


if __name__ == "__main__":
    main()
