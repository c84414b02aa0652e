"""The web console's figures, in one run against one real gateway:

- first load: `/console#/cluster` in headless Chromium with its cache off, the bytes it was
  sent (the console's files, the API's answers) and the time to interactive (from navigation
  until the first page is rendered: `#main` gets `data-shown`), median of LOADS loads;
- the cost of a console on the live tail: the one-record JSON produce (HTTP/1.1, 64
  connections, h2load) with the browser on `#/topics/bench/tail` and with it on about:blank,
  alternating over the rounds; the figure is with / without (target at least 0.95), and the
  node's CPU per request in both. The browser runs on the node's machine, sharing its CPUs
  with the node and h2load: a harder case than a browser on its user's machine.

    python -m loadtests.console_bench [--quick] [--rounds N] [--seconds S] [--out DIR]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from loadtests import generators, ratio_cli
from loadtests.browser import start_chromium
from loadtests.common import http_json, start_gateway
from loadtests.rows import body_for, rates

LOADS = 5
CONNECTIONS = 64
# Injected before the page's own scripts: when the first page is on screen.
RENDERED = """
new MutationObserver((_, observer) => {
  const main = document.getElementById("main");
  if (main && main.dataset.shown !== undefined) {
    window.__sluiceRendered = performance.now();
    observer.disconnect();
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-shown"]});
"""
SIZES = """
const entries = [performance.getEntriesByType("navigation")[0],
                 ...performance.getEntriesByType("resource")];
return entries.map(e => [new URL(e.name).pathname, e.transferSize, e.encodedBodySize]);
"""


def wait_for(driver: Any, script: str, timeout: float = 30.0) -> Any:
    """Poll the page until `script` returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while not (value := driver.execute_script(script)):
        if time.monotonic() > deadline:
            raise TimeoutError(script)
        time.sleep(0.02)
    return value


def first_loads(driver: Any, url: str) -> dict[str, Any]:
    """LOADS cold loads of the cluster page: bytes and time to interactive."""
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RENDERED})
    loads = []
    for _ in range(LOADS):
        driver.get("about:blank")
        driver.get(f"{url}/console#/cluster")
        rendered = wait_for(driver, "return window.__sluiceRendered;")
        dom = driver.execute_script(
            "return performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd;"
        )
        sizes = driver.execute_script(SIZES)
        files = [s for s in sizes if not s[0].startswith("/v1/")]
        api = [s for s in sizes if s[0].startswith("/v1/")]
        loads.append(
            {
                "time_to_interactive_ms": round(rendered, 1),
                "dom_content_loaded_ms": round(dom, 1),
                "requests": len(sizes),
                "console_files": len(files),
                "console_bytes_transferred": sum(s[1] for s in files),
                "console_bytes_body": sum(s[2] for s in files),
                "api_calls": len(api),
                "api_bytes_transferred": sum(s[1] for s in api),
            }
        )
    loads.sort(key=lambda load: load["time_to_interactive_ms"])
    return {**loads[len(loads) // 2], "loads_ms": [x["time_to_interactive_ms"] for x in loads]}


def produce(url: str, pid: int, body: Path, seconds: float) -> dict[str, Any]:
    run = generators.h2load(
        [f"{url}/v1/topics/bench/records?acks=1"],
        seconds=seconds,
        server_pid=pid,
        body=body,
        headers={"Content-Type": "application/json"},
        clients=CONNECTIONS,
        http1=True,
    )
    return rates(run, 1, body.stat().st_size)


def run(rounds: int, seconds: float, scratch: Path) -> dict[str, Any]:
    process, url = start_gateway(scratch / "data")
    driver = start_chromium(scratch / "profile", logs=False)
    try:
        http_json("POST", f"{url}/v1/topics", {"name": "bench", "partitions": 2})
        loaded = first_loads(driver, url)
        body = scratch / "body.json"
        body.write_bytes(body_for("json", 1))
        rows: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
        for round_ in range(rounds):
            order = ("with", "without") if round_ % 2 else ("without", "with")
            for console in order:
                if console == "with":
                    driver.get(f"{url}/console#/topics/bench/tail")
                    wait_for(driver, "return document.getElementById('tail-state')"
                             "?.textContent === 'connected';")  # fmt: skip
                else:
                    driver.get("about:blank")
                row = produce(url, process.pid, body, seconds)
                if console == "with":
                    row["records_in_tail"] = int(
                        driver.execute_script(
                            "return document.getElementById('tail-count').textContent;"
                        )
                    )
                rows[console].append(row)
    finally:
        driver.quit()
        process.terminate()
        process.wait(30)
    medians = {
        console: sorted(found, key=lambda r: r["requests_per_s"])[(len(found) - 1) // 2]
        for console, found in rows.items()
    }
    ratios = [
        round(w["requests_per_s"] / o["requests_per_s"], 3)
        for w, o in zip(rows["with"], rows["without"], strict=True)
    ]
    cpu = {
        console: round(statistics.median(r["server_cpu_s"] / r["requests"] * 1e6 for r in found), 1)
        for console, found in rows.items()
    }
    return {
        "first_load": loaded,
        "tail": {
            "cell": f"produce json 1, http/1.1, {CONNECTIONS} connections, acks=1",
            "without_console": medians["without"],
            "with_console_on_tail": medians["with"],
            "ratio": round(
                medians["with"]["requests_per_s"] / medians["without"]["requests_per_s"], 3
            ),
            "ratio_per_round": ratios,
            "ratio_median_of_rounds": statistics.median(ratios),
            "server_us_per_request": cpu,
            "rounds_without": [r["requests_per_s"] for r in rows["without"]],
            "rounds_with": [r["requests_per_s"] for r in rows["with"]],
        },
    }


def markdown(doc: dict[str, Any]) -> str:
    first, tail, meta = doc["first_load"], doc["tail"], doc["meta"]
    machine = meta["machine"]
    where = (
        f"{machine['nproc']} vCPUs {machine['cpu_model']}, load average "
        f"{machine['load_average']} when it ended"
    )
    return "\n".join(
        [
            f"# Web console ({meta['date']}, {meta['rounds']} rounds of "
            f"{meta['seconds_per_cell']} s)",
            "",
            f"`{meta['command']}` on {where}",
            "",
            "## First load of /console#/cluster (cache off, median of "
            f"{LOADS}: {first['loads_ms']} ms)",
            "",
            "| time to interactive | DOMContentLoaded | requests | console files | "
            "console bytes (sent / body) | API calls | API bytes |",
            "|---|---|---|---|---|---|---|",
            f"| {first['time_to_interactive_ms']} ms | {first['dom_content_loaded_ms']} ms | "
            f"{first['requests']} | {first['console_files']} | "
            f"{first['console_bytes_transferred']} / {first['console_bytes_body']} | "
            f"{first['api_calls']} | {first['api_bytes_transferred']} |",
            "",
            f"## Produce throughput with a console on the live tail ({tail['cell']})",
            "",
            "| | requests/s (median) | every round |",
            "|---|---|---|",
            f"| without console | {tail['without_console']['requests_per_s']} | "
            f"{tail['rounds_without']} |",
            f"| console on the live tail | {tail['with_console_on_tail']['requests_per_s']} | "
            f"{tail['rounds_with']} |",
            "",
            f"Ratio with / without: **{tail['ratio']}** (per round: {tail['ratio_per_round']}; "
            f"target at least 0.95). Node CPU per request: "
            f"{tail['server_us_per_request']['without']} µs without, "
            f"{tail['server_us_per_request']['with']} µs with the console. "
            f"Records the tail received in its median round: "
            f"{tail['with_console_on_tail'].get('records_in_tail')}.",
            "",
        ]
    )


def main() -> None:
    out, doc = ratio_cli.run_rounds(__doc__ or "", "loadtests.console_bench", 6, 10.0, run)
    ratio_cli.write(out, "console-bench", doc, markdown(doc))


if __name__ == "__main__":
    main()
