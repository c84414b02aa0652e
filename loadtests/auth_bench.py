"""What authentication, ACLs and quotas cost a request, in one run: the same cells against a
gateway without auth and one with `--auth`, an API key and literal ACLs for a principal that is
not a super user (every request authenticated and authorised), alternating over the rounds.
With `--before DIR` (a checkout of an earlier commit, its C extensions built in place), that
tree's two gateways run in the same rounds too, so before and after compare within one run.

Cells (h2load, one request in flight per connection): `GET /healthz` and the one-record JSON
produce (acks=1) over HTTP/1.1 from 64 connections, the same produce over h2c, a binary produce
of 1000 records and a JSON fetch of 1000 records over HTTP/1.1 from 8 connections. Figures:
with auth / without per cell, produce / healthz without auth, authenticated one-record
produces per second.

    python -m loadtests.auth_bench [--quick] [--rounds N] [--seconds S] [--out DIR] [--before DIR]
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from loadtests import generators, ratio_cli, report
from loadtests.common import start_gateway
from loadtests.rows import body_for, judged, rates

MEDIA = {"binary": "application/vnd.sluice.record-batch", "json": "application/json"}
FETCH_RECORDS = 20_000
CELLS = [  # (name, protocol, connections)
    ("healthz", "http/1.1", 64),
    ("produce json 1", "http/1.1", 64),
    ("produce json 1", "h2c", 64),
    ("produce binary 1000", "http/1.1", 8),
    ("fetch json 1000", "http/1.1", 8),
]
CLI = (
    "import sys; from gateway.cli.main import main; main(sys.argv[1:])"  # `sluice`, from this tree
)


class Node:
    """A gateway (of this tree, or of `tree`) and the Authorization header its clients send."""

    def __init__(self, scratch: Path, auth: bool, tree: Path | None) -> None:
        name = ("auth" if auth else "open") + ("-before" if tree else "")
        data = scratch / name
        self.headers: dict[str, str] = {}
        extra: list[str] = []
        if auth:
            admin = _create_key(data, "admin")
            client_key = _create_key(data, "bench")
            extra = ["--auth", "--super-user", "admin"]
        self.process, self.url = start_gateway(data, *extra, tree=tree)
        admin_headers = {"Authorization": f"Bearer {admin}"} if auth else {}
        self.call("POST", "/v1/topics", {"name": "bench", "partitions": 2}, admin_headers)
        if auth:
            for operation in ("read", "write"):
                acl = {
                    "principal": "bench",
                    "resource_type": "topic",
                    "resource_name": "bench",
                    "pattern_type": "literal",
                    "operation": operation,
                    "permission": "allow",
                }
                self.call("POST", "/v1/acls", acl, admin_headers)
            self.headers = {"Authorization": f"Bearer {client_key}"}
        body = body_for("ndjson", 1000)
        for _ in range(FETCH_RECORDS // 1000):  # partition 1 is read by the fetch cell
            self.call(
                "POST",
                "/v1/topics/bench/partitions/1/records?acks=1",
                body,
                {**self.headers, "Content-Type": "application/x-ndjson"},
            )

    def call(self, method: str, path: str, body: object, headers: dict[str, str]) -> None:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", **headers},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def _create_key(data: Path, principal: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CLI, "auth", "create-key", "--data-dir", str(data),
         "--principal", principal],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def run_cell(
    node: Node, cell: tuple[str, str, int], scratch: Path, seconds: float
) -> dict[str, Any]:
    """One h2load run of a cell against a node: its rates and the server's CPU per request."""
    name, protocol, connections = cell
    headers = dict(node.headers)
    body: Path | None = None
    records, size = 1, 0
    if name == "healthz":
        urls = [node.url + "/healthz"]
    elif name == "fetch json 1000":
        urls = [
            f"{node.url}/v1/topics/bench/partitions/1/records?offset={o}&max_records=1000"
            for o in range(0, FETCH_RECORDS - 1000, 1000)
        ]
        records = 1000
    else:
        fmt, records = ("binary", 1000) if name == "produce binary 1000" else ("json", 1)
        body = scratch / f"body-{fmt}-{records}"
        body.write_bytes(body_for(fmt, records))
        size = body.stat().st_size
        headers["Content-Type"] = MEDIA[fmt]
        urls = [node.url + "/v1/topics/bench/partitions/0/records?acks=1"]
    run = generators.h2load(
        urls,
        seconds=seconds,
        server_pid=node.process.pid,
        body=body,
        headers=headers,
        clients=connections,
        http1=protocol == "http/1.1",
    )
    row = rates(run, records, size)
    row["server_us_per_request"] = round(run.server_cpu_s / max(1, run.requests) * 1e6, 1)
    return row


def run(rounds: int, seconds: float, scratch: Path, before: Path | None) -> dict[str, Any]:
    """Every cell on every node, `rounds` times, the nodes in a different order each round."""
    trees = {"after": None, **({"before": before} if before else {})}
    nodes = _start_nodes(scratch, trees)
    results: dict[tuple[str, str, str, str, int], list[dict[str, Any]]] = {}
    try:
        for round_ in range(rounds):
            order = list(nodes)
            order = order[round_ % len(order) :] + order[: round_ % len(order)]
            for cell in CELLS:
                for key in order:
                    row = run_cell(nodes[key], cell, scratch, seconds)
                    results.setdefault((*key, *cell), []).append(row)
    finally:
        for node in nodes.values():
            node.close()
    medians = {}
    for measured, rows in results.items():
        rows.sort(key=lambda r: r["requests_per_s"])
        medians[measured] = {
            **rows[(len(rows) - 1) // 2],
            "rounds_requests_per_s": [r["requests_per_s"] for r in rows],
        }
    return {"cells": _cells(medians, trees), "targets": _targets(medians, trees)}


def _start_nodes(scratch: Path, trees: dict[str, Path | None]) -> dict[tuple[str, str], Node]:
    """Every tree's open and authenticated node, started at once (each waits mostly on its
    own processes' start-up); if any fails, the others are stopped."""
    keys = [(tree, auth) for tree in trees for auth in ("open", "auth")]
    with ThreadPoolExecutor(len(keys)) as pool:
        starting = {
            key: pool.submit(Node, scratch, key[1] == "auth", trees[key[0]]) for key in keys
        }
    nodes: dict[tuple[str, str], Node] = {}
    failed: BaseException | None = None
    for key, future in starting.items():
        error = future.exception()
        if error is None:
            nodes[key] = future.result()
        elif failed is None:
            failed = error
    if failed is not None:
        for node in nodes.values():
            node.close()
        raise failed
    return nodes


def _cells(medians: dict[Any, dict[str, Any]], trees: dict[str, Path | None]) -> list[Any]:
    out = []
    for tree in trees:
        for cell in CELLS:
            open_, auth = medians[(tree, "open", *cell)], medians[(tree, "auth", *cell)]
            out.append(
                {
                    "tree": tree,
                    "cell": f"{cell[0]}, {cell[1]}, {cell[2]} connections",
                    "open": open_,
                    "auth": auth,
                    "ratio": round(auth["requests_per_s"] / open_["requests_per_s"], 3),
                }
            )
    return out


def _targets(medians: dict[Any, dict[str, Any]], trees: dict[str, Path | None]) -> list[Any]:
    """The figures, per tree: the authenticated produce against the open one, the open
    produce against /healthz, and the authenticated produce's rate."""
    out = []
    for tree in trees:
        rate = {key[1:]: row["requests_per_s"] for key, row in medians.items() if key[0] == tree}
        produce = ("produce json 1", "http/1.1", 64)
        healthz = ("healthz", "http/1.1", 64)
        figures = [
            ("authenticated / open one-record produce, HTTP/1.1, 64 connections",
             rate[("auth", *produce)] / rate[("open", *produce)], 0.95),
            ("one-record produce / GET /healthz without auth, HTTP/1.1, 64 connections",
             rate[("open", *produce)] / rate[("open", *healthz)], 1.0),
            ("authenticated one-record produces/s, HTTP/1.1, 64 connections",
             rate[("auth", *produce)], 10_000),
        ]  # fmt: skip
        out += [{"tree": tree, **row} for row in judged(figures)]
    return out


def markdown(doc: dict[str, Any]) -> str:
    out = [
        "## Authentication, ACLs and quotas: cost per request",
        "",
        "| tree | cell | without auth req/s (rounds) | µs CPU | with auth req/s (rounds) | "
        "µs CPU | with / without |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in doc["cells"]:
        o, a = c["open"], c["auth"]
        out.append(
            f"| {c['tree']} | {c['cell']} | {o['requests_per_s']:,.0f} "
            f"({', '.join(f'{x:,.0f}' for x in o['rounds_requests_per_s'])}) | "
            f"{o['server_us_per_request']} | {a['requests_per_s']:,.0f} "
            f"({', '.join(f'{x:,.0f}' for x in a['rounds_requests_per_s'])}) | "
            f"{a['server_us_per_request']} | {c['ratio']} |"
        )
    out += ["", "| tree | figure | this run | target | met |", "|---|---|---|---|---|"]
    for t in doc["targets"]:
        out.append(
            f"| {t['tree']} | {t['figure']} | {t['value']:,} | {t['target']:,} | {t['met']} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    out, doc = ratio_cli.run_rounds_beside(__doc__ or "", "loadtests.auth_bench", 3, 4.0, run)
    ratio_cli.write(out, "auth-bench", doc, markdown(doc))
    targets = [t | {"figure": f"{t['tree']}: {t['figure']}"} for t in doc["targets"]]
    report.plot_ratios(targets, "Authentication per request", out / "auth-bench.png")


if __name__ == "__main__":
    main()
