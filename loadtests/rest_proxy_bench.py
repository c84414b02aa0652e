"""REST Proxy v2 against /v1 on one gateway in one run (ratios, not
absolutes).

- produce of 100-record JSON batches (keyed, acks=1, 64 HTTP/1.1 connections, h2load) through
  `POST /v1/topics/{t}/records` and through v2's `POST /topics/{t}` (json format);
- one-record v2 produce requests/s (the anchor: Confluent's REST Proxy, ~8-10 k req/s a node);
- consumer reads: one client reading a pre-filled topic to its end as a /v1 group member and
  as a v2 consumer instance (same max_bytes), records/s.

Cells alternate over the rounds and the median round is the figure; the goal is v2 >= 0.8 of
/v1, as the median of each round's ratio (v1 and v2 cells run back to back) and as the gateway's
CPU per record (/v1's over v2's: steadier than rates on a shared machine). With `--before DIR`
(a checkout of an earlier commit, its C extensions built in place), that tree's gateway runs
the same cells in the same rounds, so before and after compare within one run.

    python -m loadtests.rest_proxy_bench [--quick] [--rounds N] [--seconds S] [--out DIR]
                                         [--before DIR]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from loadtests import generators, ratio_cli
from loadtests.common import cpu_seconds, http_json, start_gateway
from loadtests.rows import rates

BATCH = 100
CONNECTIONS = 64
READ_RECORDS = 100_000  # records a consumer-read cell reads
READ_BYTES = 262_144  # max_bytes of every consumer read, both APIs
V2_JSON = "application/vnd.kafka.json.v2+json"


def _records(count: int) -> list[dict[str, Any]]:
    return [{"key": f"user-{i % 97}", "value": {"event": "click", "n": i}} for i in range(count)]


def produce_cell(
    url: str, pid: int, scratch: Path, api: str, count: int, seconds: float
) -> dict[str, Any]:
    """h2load POSTs of `count`-record batches through `api` (v1 or v2) to a fresh topic."""
    topic = f"rp-{api}-{count}-{time.monotonic_ns()}"
    http_json("POST", url + "/v1/topics", {"name": topic, "partitions": 4})
    body = scratch / f"{api}-{count}.json"
    body.write_bytes(orjson.dumps({"records": _records(count)}))
    if api == "v1":
        target, media = f"{url}/v1/topics/{topic}/records?acks=1", "application/json"
    else:
        target, media = f"{url}/topics/{topic}?acks=1", V2_JSON
    run = generators.h2load(
        [target], seconds=seconds, server_pid=pid, body=body, headers={"Content-Type": media},
        clients=CONNECTIONS, http1=True,
    )  # fmt: skip
    http_json("DELETE", f"{url}/v1/topics/{topic}")
    row = {"what": f"produce {count}", "api": api, **rates(run, count, body.stat().st_size)}
    row["server_us_per_record"] = round(run.server_cpu_s / max(1, run.requests * count) * 1e6, 3)
    return row


def fill(url: str, topic: str) -> None:
    http_json("POST", url + "/v1/topics", {"name": topic, "partitions": 4})
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(0, READ_RECORDS, 1000):
            answer = client.post(
                f"/v1/topics/{topic}/records", content=orjson.dumps({"records": _records(1000)}),
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            answer.raise_for_status()


def read_cell(url: str, pid: int, topic: str, api: str) -> dict[str, Any]:
    """One client reads the whole topic from a new group; records/s and the gateway's CPU."""
    group = f"rp-{api}-{time.monotonic_ns()}"
    read = 0
    with httpx.Client(base_url=url, timeout=60) as client:
        if api == "v1":
            joined = client.post(
                f"/v1/groups/{group}/members",
                json={"topics": [topic], "auto_offset_reset": "earliest"},
            ).json()
            path = f"/v1/groups/{group}/members/{joined['member_id']}/records"
            params = {"max_bytes": str(READ_BYTES), "max_records": "100000", "timeout_ms": "0"}
            headers: dict[str, str] = {}
        else:
            config = {"name": "reader", "format": "json", "auto.offset.reset": "earliest"}
            v2 = {"Content-Type": "application/vnd.kafka.v2+json"}
            client.post(f"/consumers/{group}", content=orjson.dumps(config), headers=v2)
            base = f"/consumers/{group}/instances/reader"
            client.post(
                f"{base}/subscription", content=orjson.dumps({"topics": [topic]}), headers=v2
            )
            path, headers = f"{base}/records", {"Accept": V2_JSON}
            params = {"max_bytes": str(READ_BYTES), "timeout": "0"}
        started = time.perf_counter()
        cpu_before = cpu_seconds(pid)
        requests = 0
        while read < READ_RECORDS:
            answer = client.get(path, params=params, headers=headers)
            answer.raise_for_status()
            doc = answer.json()
            read += len(doc["records"] if api == "v1" else doc)
            requests += 1
        elapsed = time.perf_counter() - started
        server_cpu_s = cpu_seconds(pid) - cpu_before
    return {
        "what": "consumer read",
        "api": api,
        "records_per_s": round(read / elapsed),
        "requests_per_s": round(requests / elapsed, 1),
        "requests": requests,
        "seconds": round(elapsed, 3),
        "server_cpu_s": round(server_cpu_s, 3),
        "server_us_per_record": round(server_cpu_s / max(1, read) * 1e6, 3),
    }


def run(rounds: int, seconds: float, scratch: Path, before: Path | None) -> dict[str, Any]:
    trees = {"after": None, **({"before": before} if before else {})}
    gateways = {}
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    try:
        for tree, path in trees.items():
            gateways[tree] = start_gateway(scratch / f"data-{tree}", tree=path)
            fill(gateways[tree][1], "rp-read")
        for _ in range(rounds):
            for tree, (process, url) in gateways.items():
                for api in ("v1", "v2"):
                    row = produce_cell(url, process.pid, scratch, api, BATCH, seconds)
                    cells.setdefault((tree, row["what"], api), []).append(row)
                    row = read_cell(url, process.pid, "rp-read", api)
                    cells.setdefault((tree, row["what"], api), []).append(row)
                row = produce_cell(url, process.pid, scratch, "v2", 1, seconds)
                cells.setdefault((tree, row["what"], "v2"), []).append(row)
    finally:
        for process, _ in gateways.values():
            process.terminate()
            process.wait(30)
    rows = []
    for (tree, _, _), runs in cells.items():
        ordered = sorted(runs, key=lambda r: r["records_per_s"])
        median = ordered[(len(ordered) - 1) // 2]
        rows.append(
            {
                "tree": tree,
                **median,
                "rounds_records_per_s": [r["records_per_s"] for r in runs],
                "median_us_per_record": statistics.median(r["server_us_per_record"] for r in runs),
            }
        )
    ratios: dict[str, dict[str, dict[str, Any]]] = {}
    for tree in trees:
        for what in (f"produce {BATCH}", "consumer read"):
            v1, v2 = cells[(tree, what, "v1")], cells[(tree, what, "v2")]
            per_round = [
                b["records_per_s"] / a["records_per_s"] for a, b in zip(v1, v2, strict=True)
            ]
            cpu_v1, cpu_v2 = (
                statistics.median(r["server_us_per_record"] for r in runs) for runs in (v1, v2)
            )
            cpu = cpu_v1 / cpu_v2 if cpu_v2 else None  # None: too short to tick the CPU clock
            ratios.setdefault(tree, {})[what] = {
                "rate": round(statistics.median(per_round), 2),
                "cpu": None if cpu is None else round(cpu, 2),
                "rounds": [round(r, 2) for r in per_round],
            }
    return {"cells": rows, "v2_over_v1": ratios}


def markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    lines = [
        f"# REST Proxy v2 against /v1 ({meta['date']})",
        "",
        f"`{meta['command']}`, {meta['rounds']} rounds, {meta['seconds_per_cell']} s a cell",
        "",
        "| tree | cell | api | records/s | requests/s | rounds (records/s) | server µs/record |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in doc["cells"]:
        lines.append(
            f"| {row['tree']} | {row['what']} | {row['api']} | {row['records_per_s']} | "
            f"{row['requests_per_s']} | {row['rounds_records_per_s']} | "
            f"{row['median_us_per_record']} |"
        )
    lines += ["", "| tree | cell | v2/v1 rate (median of rounds) | rounds | v2/v1 by CPU |"]
    lines.append("|---|---|---|---|---|")
    for tree, ratios in doc["v2_over_v1"].items():
        for what, ratio in ratios.items():
            lines.append(
                f"| {tree} | {what} | {ratio['rate']} | {ratio['rounds']} | {ratio['cpu']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    out, doc = ratio_cli.run_rounds_beside(__doc__ or "", "loadtests.rest_proxy_bench", 3, 5.0, run)
    ratio_cli.write(out, "rest-proxy", doc, markdown(doc))


if __name__ == "__main__":
    main()
