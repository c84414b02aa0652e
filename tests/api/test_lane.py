"""The lane in process: which produces it takes (tests/e2e/test_lane.py compares its answers
with the Application's on a real server)."""

from __future__ import annotations

import orjson
from multidict import CIMultiDict

from engine.batch import RecordInput, encode_batch
from gateway.lane import LANE
from tests.api.support import JSON, RECORD_BATCH, Start, create_topic, fetch_all

LIMIT = 256 * 1024  # --max-request-bytes


async def test_the_lane_serves_bulk_produces_up_to_the_request_limit(start: Start) -> None:
    """A 1000-record produce (over 100 KB) is the lane's as a one-record one is: through the
    Application a held HTTP/2 body would be copied into a reader and out again. A body over
    --max-request-bytes is left to the Application, whose answer is 413."""
    client = await start(max_request_bytes=LIMIT)
    await create_topic(client)
    assert client.app is not None
    lane = client.app[LANE]
    json_body = orjson.dumps({"records": [{"value": "y" * 100} for _ in range(1000)]})
    binary = bytes(encode_batch([RecordInput(None, b"%0100d" % i) for i in range(1000)]))
    connection = object()
    for media, body in ((JSON, json_body), (RECORD_BATCH, binary)):
        assert len(body) > 100_000
        headers = CIMultiDict({"Content-Type": media})
        taken = lane.take("POST", "/v1/topics/t/records?acks=1", headers, body, connection)
        assert taken is not None
        answer = await lane.serve(taken, connection)
        assert answer.status == 200, answer.body
    assert len(await fetch_all(client)) == 2000
    too_large = json_body + b" " * (LIMIT - len(json_body) + 1)
    headers = CIMultiDict({"Content-Type": JSON})
    assert lane.take("POST", "/v1/topics/t/records", headers, too_large, connection) is None
