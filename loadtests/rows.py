"""What every throughput figure shares: the record bodies, the row a run becomes, medians."""

from __future__ import annotations

from typing import Any

import orjson

from engine.batch import RecordInput, encode_batch
from loadtests import generators

VALUE = b'"' + b"x" * 98 + b'"'  # a 100-byte JSON string: the payload of every record
MEDIA = {
    "json": "application/json",
    "ndjson": "application/x-ndjson",
    "binary": "application/vnd.sluice.record-batch",
}


def body_for(fmt: str, batch: int) -> bytes:
    """A produce body of `batch` records with the same 100-byte value, in one format."""
    if fmt == "json":
        return orjson.dumps({"records": [{"value": orjson.Fragment(VALUE)}] * batch})
    if fmt == "ndjson":
        return (VALUE + b"\n") * batch
    return bytes(encode_batch([RecordInput(None, VALUE)] * batch))


def rates(run: generators.Run, records_per_request: int, body_bytes: int) -> dict[str, Any]:
    """The figures every throughput row carries."""
    records_per_s = run.requests_per_s * records_per_request
    row: dict[str, Any] = {
        "records_per_s": round(records_per_s),
        "payload_mb_per_s": round(records_per_s * len(VALUE) / 1e6, 2),
        "requests_per_s": round(run.requests_per_s, 1),
        "request_mb_per_s": round(run.requests_per_s * body_bytes / 1e6, 2),
        "requests": run.requests,
        "seconds": round(run.seconds, 3),
        "failures": run.failures,
        "generator_cpu_s": run.generator_cpu_s,
        "server_cpu_s": run.server_cpu_s,
        **run.extra,
    }
    if run.failures:
        row["error"] = f"{run.failures} requests failed"
    return row


def median_cell(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round by records/s, with every round's figure; an error if none ran."""
    good = sorted((c for c in cells if "error" not in c), key=lambda c: c["records_per_s"])
    if not good:
        return cells[0]
    return {
        **good[(len(good) - 1) // 2],
        "rounds_records_per_s": [c["records_per_s"] for c in good],
    }


def judged(figures: list[tuple[str, float, float]]) -> list[dict[str, Any]]:
    """(figure, this run's value, target) as a report's rows: rounded, and whether it is met,
    judged on the value as the report shows it (a 0.8996 shown as 0.9 meets 0.9)."""
    return [
        {"figure": name, "value": shown, "target": target, "met": shown >= target}
        for name, value, target in figures
        for shown in (round(value, 3),)
    ]
