"""What a reply subscription's endpoint answers (exactly-once functions, Knative's reply events
made atomic): the records its 2xx answer carries, as the JSON produce body the reply topic is
written with, and the transaction calls that write them with the position.

A 2xx answer's body is
- empty (any status, any type): no records;
- `application/json` `{"records": [...]}`: records in the produce API's JSON format, passed on
  as they are (the produce checks them);
- `application/cloudevents-batch+json` (an array of events) or `application/cloudevents+json`
  (one event): each event one record, as the CloudEvents Kafka protocol binding's structured
  mode writes it: the event as the value, its `partitionkey` extension as the key, and the
  header `content-type: application/cloudevents+json; charset=UTF-8`.
Anything else, a body that cannot be read so, or one over MAX_REPLY_BYTES, is ReplyRefused."""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from groups.subscriptions.client import Response

MAX_REPLY_BYTES = 1024 * 1024  # of an endpoint's 2xx answer
JSON = "application/json"
CE_BATCH = "application/cloudevents-batch+json"
CE_EVENT = "application/cloudevents+json"
CE_RECORD_TYPE = "application/cloudevents+json; charset=UTF-8"  # Kafka binding, structured
CE_REQUIRED = ("specversion", "id", "source", "type")


class ReplyRefused(Exception):
    """The endpoint's answer cannot be produced as replies (its body, or the records the reply
    topic refused): the attempt failed, as a 5xx would have."""


class Transactions(Protocol):
    """A transaction's calls, made by the gateway (groups know nothing of its API). Each raises
    ReplicationError (RemoteError with the problem's code) when refused or not answered; the
    produce raises ReplyRefused when the reply topic refuses the records themselves."""

    async def begin(self, transactional_id: str, timeout_ms: int) -> int:
        """Begin a transaction (aborting the id's open one, fencing its holder): its epoch."""

    async def produce(self, transactional_id: str, epoch: int, topic: str, body: bytes) -> None:
        """Produce a JSON produce body to `topic` in the transaction."""

    async def send_offsets(
        self, transactional_id: str, epoch: int, group: str, topic: str, partition: int, offset: int
    ) -> None:
        """Commit `offset` for a group without members if the transaction commits."""

    async def commit(self, transactional_id: str, epoch: int) -> None:
        """Commit: answered once decided."""

    async def abort(self, transactional_id: str, epoch: int) -> None:
        """Abort."""


def produce_body(response: Response) -> bytes | None:
    """The JSON produce body of the records a 2xx answer carries; None when it carries none."""
    body = response.body
    if not body.strip():
        return None
    if len(body) > MAX_REPLY_BYTES:
        raise ReplyRefused(f"a reply over {MAX_REPLY_BYTES} bytes")
    media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media not in (JSON, CE_BATCH, CE_EVENT):
        raise ReplyRefused(
            f'a reply is {JSON} {{"records": [...]}}, {CE_BATCH} or {CE_EVENT}, '
            f"not {media or 'a body without a Content-Type'}"
        )
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ReplyRefused(f"the reply is not JSON: {exc}") from None
    if media == JSON:
        if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
            raise ReplyRefused(f'a {JSON} reply is {{"records": [...]}}')
        return body if doc["records"] else None
    events = doc if media == CE_BATCH else [doc]
    if not isinstance(events, list):
        raise ReplyRefused(f"a {CE_BATCH} reply is an array of events")
    if not events:
        return None
    return orjson.dumps({"records": [_event_record(i, e) for i, e in enumerate(events)]})


def _event_record(index: int, event: object) -> dict[str, Any]:
    """One event as a record of the Kafka binding's structured mode."""
    if not isinstance(event, dict) or not all(isinstance(event.get(a), str) for a in CE_REQUIRED):
        raise ReplyRefused(
            f"event {index} of the reply is not a CloudEvent (an object with string "
            f"{', '.join(CE_REQUIRED)})"
        )
    record: dict[str, Any] = {"value": event, "headers": {"content-type": CE_RECORD_TYPE}}
    key = event.get("partitionkey")
    if isinstance(key, str):
        record["key"] = key
    return record
