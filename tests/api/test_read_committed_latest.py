"""A read_committed reader that starts at `latest` starts at the last stable offset, as Kafka's
ListOffsets answers it at READ_COMMITTED: the records of a transaction open when it starts are
read once that transaction commits, not passed over. Partition fetches, the offsets lookup,
group members (auto_offset_reset and seeks), event streams and REST Proxy v2 consumer
instances alike; a read_uncommitted reader starts at the high watermark."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.api.support import Client, fetch, produce
from tests.api.test_events import data, read_events, stream
from tests.api.test_rest_proxy_v2_consumers import BASE, call, create, read
from tests.api.test_transactions import begin, end, in_txn

OPEN_AT = 1  # the open transaction's first offset: the last stable offset
HIGH_WATERMARK = 3


@pytest.fixture
async def held(client: Client) -> int:
    """Topic `t`: "before", then "open" in a transaction left open, then "after" (plain):
    the last stable offset is 1, the high watermark 3. The transaction's epoch."""
    assert (await client.post("/v1/topics", json={"name": "t"})).status == 201
    # Timestamps of their own: produced within one millisecond, "open" and "after" would share
    # one, and a lookup by "after"'s would find "open" first.
    before_ms = int(time.time() * 1000) - 60_000
    await produce(client, [{"value": "before", "timestamp": before_ms}])
    epoch: int = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "open", "timestamp": before_ms + 1}], params=in_txn(epoch))
    await produce(client, [{"value": "after", "timestamp": before_ms + 2}])
    return epoch


async def latest(client: Client, **params: str) -> Any:
    resp = await client.get("/v1/topics/t/partitions/0/offsets", params=params)
    assert resp.status == 200, await resp.text()
    return (await resp.json())["offset"]


async def test_the_offsets_lookup_answers_the_last_stable_offset_at_read_committed(
    client: Client, held: int
) -> None:
    committed = {"isolation": "read_committed"}
    assert await latest(client) == HIGH_WATERMARK
    assert await latest(client, **committed) == OPEN_AT
    assert await latest(client, timestamp="latest", **committed) == OPEN_AT
    assert await latest(client, timestamp="0", **committed) == 0
    # A timestamp whose first record is at or past the last stable offset: none yet.
    after = (await fetch(client, offset=2))["records"][0]["timestamp"]
    assert await latest(client, timestamp=str(after)) == 2
    assert await latest(client, timestamp=str(after), **committed) == OPEN_AT


async def test_a_partition_fetch_at_latest_starts_at_the_last_stable_offset(
    client: Client, held: int
) -> None:
    committed = await fetch(client, offset="latest", isolation="read_committed")
    uncommitted = await fetch(client, offset="latest")
    assert (committed["records"], committed["next_offset"]) == ([], OPEN_AT)
    assert (uncommitted["records"], uncommitted["next_offset"]) == ([], HIGH_WATERMARK)
    await end(client, "commit", held)
    read = await fetch(client, offset=committed["next_offset"], isolation="read_committed")
    assert [r["value"] for r in read["records"]] == ["open", "after"]


async def member_values(client: Client, group: str, member: str) -> list[Any]:
    resp = await client.get(
        f"/v1/groups/{group}/members/{member}/records",
        params={"timeout_ms": "0", "isolation": "read_committed"},
    )
    assert resp.status == 200, await resp.text()
    return [r["value"] for r in (await resp.json())["records"]]


async def test_a_group_member_reset_to_latest_starts_at_the_last_stable_offset(
    client: Client, held: int
) -> None:
    resp = await client.post(
        "/v1/groups/g/members", json={"topics": ["t"], "auto_offset_reset": "latest"}
    )
    assert resp.status == 201, await resp.text()
    member = (await resp.json())["member_id"]
    assert await member_values(client, "g", member) == []
    await end(client, "commit", held)
    assert await member_values(client, "g", member) == ["open", "after"]


async def test_an_event_stream_from_latest_starts_at_the_last_stable_offset(
    client: Client, held: int
) -> None:
    resp = await stream(client, offset="latest", isolation="read_committed")
    await end(client, "commit", held)
    events = await read_events(resp, 2)
    assert [data(e)["value"] for e in events] == ["open", "after"]
    resp.close()


async def test_a_rest_proxy_instance_starts_and_seeks_to_the_last_stable_offset(
    client: Client, held: int
) -> None:
    config = {"auto.offset.reset": "latest", "isolation.level": "read_committed"}
    await create(client, "rc", format="json", **config)
    await create(client, "seeker", format="json", **config)
    partitions = {"partitions": [{"topic": "t", "partition": 0}]}
    for name in ("rc", "seeker"):
        assert (await call(client, "POST", f"{BASE}/{name}/assignments", partitions)).status == 204
    assert await read(client, "rc") == []
    sought = await call(client, "POST", f"{BASE}/seeker/positions/end", partitions)
    assert sought.status == 204, await sought.text()
    await end(client, "commit", held)
    for name in ("rc", "seeker"):
        assert [r["value"] for r in await read(client, name)] == ["open", "after"], name
