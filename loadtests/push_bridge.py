"""The bridge a user writes instead of a push subscription, the baseline of
`loadtests.subscriptions_bench`: a Python consumer that long-polls a /v1 group, POSTs the
batch's records to the endpoint with aiohttp, IN_FLIGHT at a time (each with a `webhook-id`
as a subscription would send), and commits once every POST of the batch succeeded, so nothing
is lost. It stops once `records` records were acknowledged and prints
`{"records", "seconds", "cpu_s", "requests", "in_flight"}`: `cpu_s` is the process's CPU
over the same `seconds`, so that its start (Python and aiohttp imported: about 0.3 s) is not
counted against its records.

    python -m loadtests.push_bridge GATEWAY_URL TOPIC ENDPOINT RECORDS [IN_FLIGHT]
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from typing import Any

import aiohttp
import orjson
import uvloop

BATCH = 500  # records per long-poll
POLL_MS = 1000
IN_FLIGHT = 16  # POSTs at once: what a user's gather under a semaphore allows


async def bridge(
    url: str, topic: str, endpoint: str, wanted: int, in_flight: int = IN_FLIGHT
) -> dict[str, float]:
    group = f"bridge-{uuid.uuid4().hex[:8]}"
    connector = aiohttp.TCPConnector(limit=in_flight + 1)
    slots = asyncio.Semaphore(in_flight)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def deliver(record: dict[str, Any]) -> None:
            message_id = f"{record['topic']}/{record['partition']}/{record['offset']}"
            async with (
                slots,
                http.post(
                    endpoint,
                    data=orjson.dumps(record["value"]),
                    headers={"Content-Type": "application/json", "webhook-id": message_id},
                ) as delivered,
            ):
                await delivered.read()
                delivered.raise_for_status()

        async with http.post(
            f"{url}/v1/groups/{group}/members",
            json={"topics": [topic], "auto_offset_reset": "earliest", "auto_commit": False},
        ) as joined:
            doc = await joined.json()
        member = f"{url}/v1/groups/{group}/members/{doc['member_id']}"
        cursor = doc["cursor"]
        done = posts = 0
        started, cpu = time.perf_counter(), time.process_time()
        while done < wanted:
            params = {"max_records": str(BATCH), "timeout_ms": str(POLL_MS), "cursor": cursor}
            async with http.get(f"{member}/records", params=params) as answer:
                answer.raise_for_status()
                doc = await answer.json(loads=orjson.loads)
            cursor = doc["cursor"]
            records = doc["records"]
            if records:
                await asyncio.gather(*(deliver(record) for record in records))
                posts += len(records)
                async with http.post(f"{member}/commit") as committed:
                    committed.raise_for_status()
                done += len(records)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        async with http.delete(member):
            pass
    return {
        "records": done,
        "seconds": seconds,
        "cpu_s": cpu,
        "requests": posts,
        "in_flight": in_flight,
    }


def main() -> None:
    url, topic, endpoint, wanted = sys.argv[1:5]
    in_flight = int(sys.argv[5]) if len(sys.argv) > 5 else IN_FLIGHT
    print(orjson.dumps(uvloop.run(bridge(url, topic, endpoint, int(wanted), in_flight))).decode())


if __name__ == "__main__":
    main()
