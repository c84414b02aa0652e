"""Liveness after a schedule: once every fault is healed, each kind of operation must succeed
within a bound — a produce through every node, a fetch of every partition, a group member's
join, fetch and commit, a new schema registered through every node. A cluster that refused
everything after a fault would otherwise pass the safety checks with nothing to judge."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from tests.cluster.harness import Cluster
from tests.cluster.registryload import PREFIX, schema_text
from tests.cluster.sideload import json_request

LIVENESS_S = 30.0  # bound for each operation, counted from the end of healing
ATTEMPT_S = 5.0
RETRY_PAUSE_S = 0.1


class NotLive(AssertionError):
    """An operation kept failing for LIVENESS_S after the faults were healed."""


async def _until_ok(
    session: aiohttp.ClientSession,
    what: str,
    method: str,
    url: str,
    ok: int,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
) -> Any:
    """Repeats the call until it answers `ok` (its JSON), or raises NotLive at the bound."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LIVENESS_S
    last = "no attempt"
    while loop.time() < deadline:
        status, _, raw, _, error = await json_request(session, method, url, body, params, ATTEMPT_S)
        if status == ok:
            return json.loads(raw) if raw else None
        last = error or f"{status} {raw[:200].decode(errors='replace')}"
        await asyncio.sleep(RETRY_PAUSE_S)  # pause between retries, not a synchronisation
    raise NotLive(f"{what} still failing {LIVENESS_S:.0f} s after healing: {last}")


async def probe(
    cluster: Cluster, session: aiohttp.ClientSession, topic: str, partitions: int
) -> list[str]:
    """Runs every kind of operation once; returns what each did (raises NotLive if one could
    not succeed within the bound)."""
    done = []
    for node in range(cluster.size):
        answer = await _until_ok(
            session,
            f"produce acks=all through node {node}",
            "POST",
            f"{cluster.url(node)}/v1/topics/{topic}/records",
            200,
            {
                "records": [
                    {"key": f"live-{node}-{p}", "value": p, "partition": p}
                    for p in range(partitions)
                ]
            },
            {"acks": "all"},
        )
        done.append(f"produce via node {node}: {len(answer['results'])} batches")
    for p in range(partitions):
        node = p % cluster.size
        answer = await _until_ok(
            session,
            f"fetch p{p} through node {node}",
            "GET",
            f"{cluster.url(node)}/v1/topics/{topic}/partitions/{p}/records",
            200,
            params={"offset": "0", "timeout_ms": "0"},
        )
        if not answer["records"]:
            raise NotLive(f"fetch p{p} from offset 0 returned nothing after records were acked")
    done.append(f"fetch of {partitions} partitions")
    group = f"live-{topic}"
    base = f"{cluster.url(0)}/v1/groups/{group}/members"
    joined = await _until_ok(
        session,
        "group join",
        "POST",
        base,
        201,
        {"topics": [topic], "auto_offset_reset": "earliest", "auto_commit": False},
    )
    member = joined["member_id"]
    await _until_ok(
        session,
        "group member fetch",
        "GET",
        f"{base}/{member}/records",
        200,
        params={"timeout_ms": "500"},
    )
    await _until_ok(session, "group commit", "POST", f"{base}/{member}/commit", 200)
    await _until_ok(session, "group leave", "DELETE", f"{base}/{member}", 204)
    done.append("group join, fetch, commit, leave")
    subject = f"live-{topic}-value"
    for node in range(cluster.size):
        await _until_ok(
            session,
            f"schema register through node {node}",
            "POST",
            f"{cluster.url(node)}{PREFIX}/subjects/{subject}/versions",
            200,
            {"schema": schema_text(f"live_{topic.replace('-', '_')}", node)},
        )
    done.append(f"a new schema registered through each of {cluster.size} nodes")
    return done
