"""The bridge a user writes today instead of a push subscription, the baseline of
`loadtests.subscriptions_bench`: a Python consumer that long-polls a /v1 group, POSTs each
record to the endpoint with aiohttp (one at a time, in order, with a `webhook-id` as a
subscription would send), and commits after each batch. It stops once `records` records were
acknowledged and prints `{"records", "seconds", "requests"}`.

    python -m loadtests.push_bridge GATEWAY_URL TOPIC ENDPOINT RECORDS
"""

from __future__ import annotations

import sys
import time
import uuid

import aiohttp
import orjson
import uvloop

BATCH = 500  # records per long-poll
POLL_MS = 1000


async def bridge(url: str, topic: str, endpoint: str, wanted: int) -> dict[str, float]:
    group = f"bridge-{uuid.uuid4().hex[:8]}"
    connector = aiohttp.TCPConnector(limit=8)
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.post(
            f"{url}/v1/groups/{group}/members",
            json={"topics": [topic], "auto_offset_reset": "earliest", "auto_commit": False},
        ) as joined:
            doc = await joined.json()
        member = f"{url}/v1/groups/{group}/members/{doc['member_id']}"
        cursor = doc["cursor"]
        done = posts = 0
        started = time.perf_counter()
        while done < wanted:
            params = {"max_records": str(BATCH), "timeout_ms": str(POLL_MS), "cursor": cursor}
            async with http.get(f"{member}/records", params=params) as answer:
                answer.raise_for_status()
                doc = await answer.json(loads=orjson.loads)
            cursor = doc["cursor"]
            for record in doc["records"]:
                message_id = f"{record['topic']}/{record['partition']}/{record['offset']}"
                async with http.post(
                    endpoint,
                    data=orjson.dumps(record["value"]),
                    headers={"Content-Type": "application/json", "webhook-id": message_id},
                ) as delivered:
                    await delivered.read()
                    delivered.raise_for_status()
                posts += 1
            if doc["records"]:
                async with http.post(f"{member}/commit") as committed:
                    committed.raise_for_status()
                done += len(doc["records"])
        seconds = time.perf_counter() - started
        async with http.delete(member):
            pass
    return {"records": done, "seconds": seconds, "requests": posts}


def main() -> None:
    url, topic, endpoint, wanted = sys.argv[1:5]
    print(orjson.dumps(uvloop.run(bridge(url, topic, endpoint, int(wanted)))).decode())


if __name__ == "__main__":
    main()
