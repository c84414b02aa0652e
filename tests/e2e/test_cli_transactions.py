"""`sluice transactions` against a real server: list (by state), describe (the partitions
written and the offsets sent), an operator's abort, and what each says of bad input."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from tests.e2e.conftest import Server
from tests.e2e.test_cli_share_groups import ok, refused


def begin(server: Server, name: str) -> dict[str, Any]:
    answer = httpx.post(f"{server.url}/v1/transactions/{name}", json={"timeout_ms": 600_000})
    assert answer.status_code == 201, answer.text
    doc: dict[str, Any] = answer.json()
    return doc


def test_list_describe_abort(server: Server) -> None:
    ok(server, "topics", "create", "orders", "--partitions", "2")
    open_one = begin(server, "runner")
    produced = httpx.post(
        f"{server.url}/v1/topics/orders/records",
        params={"transactional_id": "runner", "producer_epoch": "0"},
        json={"records": [{"value": 1, "partition": 1}]},
    )
    assert produced.status_code == 200, produced.text
    member = httpx.post(
        f"{server.url}/v1/groups/audit/members",
        json={"topics": ["orders"], "auto_offset_reset": "earliest"},
    ).json()
    sent = httpx.post(
        f"{server.url}/v1/transactions/runner/offsets",
        json={
            "producer_epoch": 0,
            "group_id": "audit",
            "member_id": member["member_id"],
            "generation_id": member["generation"],
            "offsets": [{"topic": "orders", "partition": 0, "offset": 7}],
        },
    )
    assert sent.status_code == 200, sent.text
    done = begin(server, "billing")
    committed = httpx.post(
        f"{server.url}/v1/transactions/billing/commit", json={"producer_epoch": 0}
    )
    assert committed.json()["state"] == "CompleteCommit"

    listed = orjson.loads(ok(server, "transactions", "list"))
    assert [(t["transactional_id"], t["state"]) for t in listed] == [
        ("billing", "CompleteCommit"),
        ("runner", "Ongoing"),
    ]
    table = ok(server, "transactions", "list", "--state", "Ongoing", "--output", "table")
    assert [line.split() for line in table.splitlines()] == [
        ["TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE"],
        ["runner", str(open_one["producer_id"]), "0", "Ongoing"],
    ]
    both = ok(server, "transactions", "list", "--state", "CompleteCommit,Ongoing")
    assert len(orjson.loads(both)) == 2

    described = orjson.loads(ok(server, "transactions", "describe", "runner"))
    assert described == httpx.get(f"{server.url}/v1/transactions/runner").json()
    lines = ok(server, "transactions", "describe", "runner", "--output", "table").splitlines()
    assert lines[0].startswith(
        f"transaction runner (Ongoing): producer id {open_one['producer_id']}, epoch 0, "
        "timeout 600000 ms; began "
    )
    assert ", expires " in lines[0]
    assert [line.split() for line in lines[1:]] == [
        [],
        ["TOPIC", "PARTITION"],
        ["orders", "1"],
        [],
        ["GROUP", "TOPIC", "PARTITION", "OFFSET"],
        ["audit", "orders", "0", "7"],
    ]

    assert ok(server, "transactions", "abort", "runner", "--output", "table") == (
        "aborted transaction runner\n"
    )
    after = orjson.loads(ok(server, "transactions", "describe", "runner"))
    assert (after["state"], after["abort_cause"]) == ("CompleteAbort", "operator")
    summary = ok(server, "transactions", "describe", "runner", "--output", "table")
    assert summary.startswith("transaction runner (CompleteAbort)")
    assert summary.rstrip().endswith("; aborted (operator)")
    again = orjson.loads(ok(server, "transactions", "abort", "runner"))
    assert again["state"] == "CompleteAbort"
    assert done["state"] == "Ongoing"
    assert "409 INVALID_TXN_STATE" in refused(server, "transactions", "abort", "billing")


def test_bad_input_is_one_clear_line(server: Server) -> None:
    assert "404 UNKNOWN_TRANSACTIONAL_ID" in refused(server, "transactions", "describe", "nobody")
    assert "404 UNKNOWN_TRANSACTIONAL_ID" in refused(server, "transactions", "abort", "nobody")
    assert "400 INVALID_PARAMETER: unknown state 'Open'" in refused(
        server, "transactions", "list", "--state", "Open"
    )
    assert orjson.loads(ok(server, "transactions", "list")) == []
    assert "the following arguments are required: transactional_id" in refused(
        server, "transactions", "describe"
    )
