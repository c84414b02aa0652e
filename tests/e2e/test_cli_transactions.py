"""`sluice transactions` against a real server: list (by state), describe (the partitions
written and the offsets sent), an operator's abort, and what each says of bad input."""

from __future__ import annotations

import httpx
import orjson

from tests.e2e.conftest import Server, write_in_transaction
from tests.e2e.test_cli import sluice
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


def committed_values(server: Server, topic: str, partition: int = 0) -> list[object]:
    """What a read_committed reader of the partition sees from its start."""
    answer = httpx.get(
        f"{server.url}/v1/topics/{topic}/partitions/{partition}/records",
        params={"offset": "0", "isolation": "read_committed", "timeout_ms": "0"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return [r["value"] for r in answer.json()["records"]]


def test_a_transaction_over_two_topics_and_a_groups_offsets(server: Server) -> None:
    """Begun, produced to two topics, a group's offsets added and committed, each step a
    command: nothing is read committed before the commit, all of it after."""
    ok(server, "topics", "create", "orders")
    ok(server, "topics", "create", "invoices")
    assert ok(server, "transactions", "begin", "runner", "--output", "table") == (
        "began transaction runner: producer epoch 0\n"
    )
    in_it = ("--transactional-id", "runner", "--producer-epoch", "0")
    ok(server, "produce", "orders", *in_it, stdin="one\ntwo\n")
    ok(server, "produce", "invoices", *in_it, stdin='{"total": 3}\n')
    assert committed_values(server, "orders") == []
    added = orjson.loads(
        ok(server, "transactions", "offsets", "runner", "--producer-epoch", "0",
           "--group", "billing", "orders:0:2")
    )  # fmt: skip
    assert added["pending_offsets"] == [
        {
            "group_id": "billing",
            "offsets": [{"topic": "orders", "partition": 0, "offset": 2, "metadata": ""}],
        }
    ]
    assert committed_values(server, "invoices") == []
    done = ok(
        server, "transactions", "commit", "runner", "--producer-epoch", "0", "--output", "table"
    )
    assert done == "committed transaction runner\n"
    assert committed_values(server, "orders") == ["one", "two"]
    assert committed_values(server, "invoices") == [{"total": 3}]
    group = httpx.get(f"{server.url}/v1/groups/billing", timeout=30).json()
    assert [(p["topic"], p["partition"], p["committed_offset"]) for p in group["partitions"]] == [
        ("orders", 0, 2)
    ]


def test_produce_with_a_transactional_id_commits_the_whole_input_or_none(
    server: Server,
) -> None:
    """Without an epoch, `produce --transactional-id` is one transaction around its input:
    committed at the end; aborted when a line fails after earlier ones were sent."""
    ok(server, "topics", "create", "orders")
    done = sluice(
        server, "produce", "orders", "--transactional-id", "loader", "--batch-size", "1",
        stdin="a\nb\nc\n",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "produced 3 records, committed in transaction loader" in done.stderr
    assert committed_values(server, "orders") == ["a", "b", "c"]

    failed = sluice(
        server, "produce", "orders", "--transactional-id", "loader", "--batch-size", "1",
        "--key-separator", ":", stdin="k:d\nk:e\nno separator\n",
    )  # fmt: skip
    assert failed.returncode != 0
    assert "line has no key separator" in failed.stderr
    assert "Traceback" not in failed.stderr
    after = orjson.loads(ok(server, "transactions", "describe", "loader"))
    assert (after["producer_epoch"], after["state"]) == (1, "CompleteAbort")
    assert committed_values(server, "orders") == ["a", "b", "c"]
    everything = httpx.get(
        f"{server.url}/v1/topics/orders/partitions/0/records", params={"offset": "0"}, timeout=30
    ).json()
    assert [r["value"] for r in everything["records"]] == ["a", "b", "c", "d", "e"]


def test_bad_transaction_steps_are_one_clear_line(server: Server) -> None:
    ok(server, "topics", "create", "orders")
    assert "--producer-epoch names a transaction: give --transactional-id too" in refused(
        server, "produce", "orders", "--producer-epoch", "0"
    )
    ok(server, "transactions", "begin", "runner")
    assert "'orders-0-2' is not TOPIC:PARTITION:OFFSET" in refused(
        server, "transactions", "offsets", "runner", "--producer-epoch", "0", "--group", "g",
        "orders-0-2",
    )  # fmt: skip
    assert "--member-id and --generation-id go together" in refused(
        server, "transactions", "offsets", "runner", "--producer-epoch", "0", "--group", "g",
        "--member-id", "m", "orders:0:1",
    )  # fmt: skip
    epoch = str(orjson.loads(ok(server, "transactions", "begin", "runner"))["producer_epoch"])
    assert "PRODUCER_FENCED" in refused(
        server, "transactions", "commit", "runner", "--producer-epoch", "0"
    )
    ok(server, "transactions", "commit", "runner", "--producer-epoch", epoch)
    assert "409 INVALID_TXN_STATE" in refused(
        server, "transactions", "abort", "runner", "--producer-epoch", epoch
    )
