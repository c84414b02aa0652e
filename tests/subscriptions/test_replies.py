"""What a reply subscription reads of its endpoint's 2xx answer: the produce API's JSON records
passed on as they are, CloudEvents (a batch or one event) as records of the Kafka binding's
structured mode, nothing for an empty body; anything else refused, saying why."""

from __future__ import annotations

import orjson
import pytest

from groups.subscriptions.client import Response
from groups.subscriptions.replies import MAX_REPLY_BYTES, ReplyRefused, produce_body

EVENT = {"specversion": "1.0", "id": "1", "source": "/fn", "type": "done", "data": {"n": 1}}


def answer(body: bytes, content_type: str | None = "application/json") -> Response:
    headers = {} if content_type is None else {"content-type": content_type}
    return Response(200, "OK", headers, body)


def test_json_records_are_passed_on_as_they_are() -> None:
    body = b'{"records": [{"key": "a", "value": {"x": 1}, "partition": 1}]}'
    assert produce_body(answer(body, "application/json; charset=utf-8")) == body


@pytest.mark.parametrize(
    "response",
    [
        answer(b""),
        answer(b"  \r\n", None),
        answer(b'{"records": []}'),
        answer(b"[]", "application/cloudevents-batch+json"),
    ],
)
def test_no_records(response: Response) -> None:
    assert produce_body(response) is None


def test_cloudevents_are_records_of_the_structured_mode() -> None:
    keyed = {**EVENT, "id": "2", "partitionkey": "k"}
    body = orjson.dumps([EVENT, keyed])
    produced = produce_body(answer(body, "application/cloudevents-batch+json"))
    assert produced is not None
    header = {"content-type": "application/cloudevents+json; charset=UTF-8"}
    assert orjson.loads(produced) == {
        "records": [
            {"value": EVENT, "headers": header},
            {"value": keyed, "headers": header, "key": "k"},
        ]
    }
    one = produce_body(answer(orjson.dumps(EVENT), "application/cloudevents+json"))
    assert one is not None and orjson.loads(one)["records"] == [{"value": EVENT, "headers": header}]


@pytest.mark.parametrize(
    ("response", "why"),
    [
        (answer(b"done", "text/plain"), "not text/plain"),
        (answer(b'{"records": []}', None), "without a Content-Type"),
        (answer(b"{", "application/json"), "not JSON"),
        (answer(b'[{"value": 1}]', "application/json"), '{"records": [...]}'),
        (answer(b'{"records": 1}', "application/json"), '{"records": [...]}'),
        (answer(b'{"id": 1}', "application/cloudevents-batch+json"), "an array of events"),
        (answer(b'[{"id": "1"}]', "application/cloudevents-batch+json"), "not a CloudEvent"),
        (answer(b"[1]", "application/cloudevents-batch+json"), "event 0"),
        (answer(b" " * MAX_REPLY_BYTES + b"{}", "application/json"), "over"),
    ],
)
def test_other_answers_are_refused_saying_why(response: Response, why: str) -> None:
    with pytest.raises(ReplyRefused, match=why.replace("[", r"\[").replace("{", r"\{")):
        produce_body(response)
