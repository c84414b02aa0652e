"""`sluice transactions` against a real server: list (by state), describe (the partitions
written and the offsets sent), an operator's abort, and what each says of bad input."""

from __future__ import annotations

import httpx
import orjson

from tests.e2e.conftest import Server, write_in_transaction
from tests.e2e.test_cli_share_groups import ok, refused


def test_list_describe_abort(server: Server) -> None:
    ok(server, "topics", "create", "orders", "--partitions", "2")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        begun = http.post("/v1/transactions/runner", json={"timeout_ms": 600_000}).json()
        write_in_transaction(http, "runner", 1, "audit", (0, 7))
        assert http.post("/v1/transactions/billing", json={}).status_code == 201
        committed = http.post("/v1/transactions/billing/commit", json={"producer_epoch": 0})
        assert committed.json()["state"] == "CompleteCommit"

    listed = orjson.loads(ok(server, "transactions", "list"))
    assert [(t["transactional_id"], t["state"]) for t in listed] == [
        ("billing", "CompleteCommit"),
        ("runner", "Ongoing"),
    ]
    table = ok(server, "transactions", "list", "--state", "Ongoing", "--output", "table")
    assert [line.split() for line in table.splitlines()] == [
        ["TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE"],
        ["runner", str(begun["producer_id"]), "0", "Ongoing"],
    ]
    both = ok(server, "transactions", "list", "--state", "CompleteCommit,Ongoing")
    assert len(orjson.loads(both)) == 2

    described = orjson.loads(ok(server, "transactions", "describe", "runner"))
    assert described == httpx.get(f"{server.url}/v1/transactions/runner").json()
    lines = ok(server, "transactions", "describe", "runner", "--output", "table").splitlines()
    assert lines[0].startswith(
        f"transaction runner (Ongoing): producer id {begun['producer_id']}, epoch 0, "
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
