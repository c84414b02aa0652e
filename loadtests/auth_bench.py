"""Issue 12's cost of authentication and ACLs, in one run: the same cells against a gateway
without auth and one with `--auth`, an API key and a literal ACL (the client is not a super
user, so every request is authenticated and authorised), alternating over the rounds.

Cells (wrk, HTTP/1.1, 8 connections): binary produce of 1000 records per request, JSON fetch
of 1000 records per request, one-record JSON produce. The figure is with / without.

    python -m loadtests.auth_bench [--quick] [--rounds N] [--seconds S] [--out DIR]
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from loadtests import generators, ratio_cli, report
from loadtests.common import start_gateway
from loadtests.rows import body_for, rates

MEDIA = {"binary": "application/vnd.sluice.record-batch", "json": "application/json"}
FETCH_RECORDS = 20_000
CELLS = ("produce binary 1000", "fetch json 1000", "produce json 1")
CLI = (
    "import sys; from gateway.cli.main import main; main(sys.argv[1:])"  # `sluice`, from this tree
)


class Node:
    """A gateway and the Authorization header its clients send (None without auth)."""

    def __init__(self, scratch: Path, auth: bool) -> None:
        data = scratch / ("auth" if auth else "open")
        self.headers: dict[str, str] = {}
        extra: list[str] = []
        if auth:
            admin = _create_key(data, "admin")
            self.client_key = _create_key(data, "bench")
            extra = ["--auth", "--super-user", "admin"]
        self.process, self.url = start_gateway(data, *extra)
        if auth:
            admin_headers = {"Authorization": f"Bearer {admin}"}
            self.call("POST", "/v1/topics", {"name": "bench", "partitions": 2}, admin_headers)
            for operation in ("read", "write"):
                self.call(
                    "POST",
                    "/v1/acls",
                    {
                        "principal": "bench",
                        "resource_type": "topic",
                        "resource_name": "bench",
                        "pattern_type": "literal",
                        "operation": operation,
                        "permission": "allow",
                    },
                    admin_headers,
                )
            self.headers = {"Authorization": f"Bearer {self.client_key}"}
        else:
            self.call("POST", "/v1/topics", {"name": "bench", "partitions": 2}, {})
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
        [
            sys.executable,
            "-c",
            CLI,
            "auth",
            "create-key",
            "--data-dir",
            str(data),
            "--principal",
            principal,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def run_cell(node: Node, cell: str, scratch: Path, seconds: float) -> dict[str, Any]:
    if cell == "fetch json 1000":
        paths = [
            f"/v1/topics/bench/partitions/1/records?offset={o}&max_records=1000"
            for o in range(0, FETCH_RECORDS - 1000, 1000)
        ]
        run = generators.wrk(
            node.url, paths, seconds=seconds, server_pid=node.process.pid, headers=node.headers
        )
        return rates(run, 1000, 0)
    fmt, batch = ("binary", 1000) if cell == "produce binary 1000" else ("json", 1)
    body = scratch / f"body-{fmt}-{batch}"
    body.write_bytes(body_for(fmt, batch))
    run = generators.wrk(
        node.url,
        ["/v1/topics/bench/partitions/0/records?acks=1"],
        seconds=seconds,
        server_pid=node.process.pid,
        method="POST",
        body=body,
        headers={**node.headers, "Content-Type": MEDIA[fmt]},
    )
    return rates(run, batch, body.stat().st_size)


def run(rounds: int, seconds: float, scratch: Path) -> dict[str, Any]:
    """Every cell on both nodes, `rounds` times, alternating which goes first."""
    nodes = {"open": Node(scratch, auth=False), "auth": Node(scratch, auth=True)}
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        for round_ in range(rounds):
            order = ("open", "auth") if round_ % 2 == 0 else ("auth", "open")
            for cell in CELLS:
                for name in order:
                    row = run_cell(nodes[name], cell, scratch, seconds)
                    results.setdefault((cell, name), []).append(row)
    finally:
        for node in nodes.values():
            node.close()
    figures = []
    for cell in CELLS:
        median = {}
        for name in ("open", "auth"):
            rows = sorted(results[(cell, name)], key=lambda r: r["records_per_s"])
            median[name] = {
                **rows[(len(rows) - 1) // 2],
                "rounds_records_per_s": [r["records_per_s"] for r in rows],
            }
        ratio = median["auth"]["records_per_s"] / median["open"]["records_per_s"]
        figures.append(
            {"cell": cell, **median, "ratio": round(ratio, 3), "target": 0.95, "met": ratio >= 0.95}
        )
    return {"figures": figures}


def markdown(doc: dict[str, Any]) -> str:
    out = [
        "## Authentication and ACLs (issue 12)",
        "",
        "| cell | without auth (records/s) | with auth + ACL | with / without | target | "
        "server CPU s without / with |",
        "|---|---|---|---|---|---|",
    ]
    for f in doc["figures"]:
        out.append(
            f"| {f['cell']} | {f['open']['records_per_s']:,} | {f['auth']['records_per_s']:,} | "
            f"{f['ratio']} | >= {f['target']} | {f['open']['server_cpu_s']} / "
            f"{f['auth']['server_cpu_s']} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    out, doc = ratio_cli.run_rounds(__doc__ or "", "loadtests.auth_bench", 4, 3.0, run)
    ratio_cli.write(out, "auth-bench", doc, markdown(doc))
    targets = [
        {"figure": f"{f['cell']}: with / without auth", "value": f["ratio"], "target": 0.95}
        for f in doc["figures"]
    ]
    report.plot_ratios(targets, "Authentication and ACLs (issue 12)", out / "auth-bench.png")


if __name__ == "__main__":
    main()
