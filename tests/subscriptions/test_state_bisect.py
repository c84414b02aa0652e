"""Bisecting a failing batch (retry.bisect_on_error, Lambda's BisectBatchOnFunctionError) in the
delivery state machine: a poison record isolated and dead-lettered alone under every ordering,
the halves' order, keys and budget, what never splits, and the number of requests bounded.
Runs go through the same checker as the end-to-end tests (tracing.check), with the state's
accounting checked after every step."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from groups.subscriptions.spec import Batching, Ordering, RetryPolicy
from groups.subscriptions.state import (
    Answer,
    DeadLetter,
    DeliveryRecord,
    PartitionDispatch,
    Pause,
    Send,
    Stop,
    backoff_s,
)
from tests.subscriptions.tracing import Traced, check

POLICY = RetryPolicy(
    timeout_ms=100,
    max_attempts=3,
    min_backoff_ms=10,
    max_backoff_ms=40,
    retry_after_max_ms=50,
    bisect_on_error=True,
)
# Two batches of 8: the halves of the first share their keys, as do those of the second.
KEYS = "abcdabcdefghefgh"


def machine(
    ordering: Ordering = "partition",
    max_in_flight: int = 4,
    policy: RetryPolicy = POLICY,
    keys: str = KEYS,
) -> PartitionDispatch:
    state = PartitionDispatch(0, Batching(max_records=8), policy, True, ordering, max_in_flight)
    records = [DeliveryRecord(o, 0, k.encode(), b"v", []) for o, k in enumerate(keys)]
    state.read(records, len(records), now=0.0)
    return state


def offsets(send: Send | None) -> list[int]:
    assert send is not None
    return [r.offset for r in send.records]


def sent(state: PartitionDispatch, now: float) -> Send:
    send = state.next_send(now)
    assert send is not None
    return send


def refusing(*poison: int, status: int = 400) -> Callable[[tuple[int, ...]], Answer]:
    """An endpoint that answers `status` to any request holding a poison record, else 204."""
    return lambda sent: Answer(status) if set(sent) & set(poison) else Answer(204)


@dataclass
class Run:
    traces: list[Traced] = field(default_factory=list)
    dead: dict[int, DeadLetter] = field(default_factory=dict)  # offset -> its dead letter
    acked: list[int] = field(default_factory=list)  # every acknowledgement, repeats included


def drive(
    state: PartitionDispatch, answer: Callable[[tuple[int, ...]], Answer], seed: int = 0
) -> Run:
    """Run `state` to the end as the driver does, answering the requests in flight and ending
    the dead-letter produces in a seeded order, committing after each; the accounting
    checked after every step."""
    rng = random.Random(seed)
    seq = itertools.count()
    total = state.position
    now = 0.0
    flying: list[tuple[Send, Traced]] = []
    producing: list[DeadLetter] = []
    run = Run()
    done: set[int] = set()
    while state.batches or state.buffered:
        while (send := state.next_send(now)) is not None:
            trace = Traced(
                next(seq), now, 0, tuple(offsets(send)),
                tuple(r.key.decode() if r.key else None for r in send.records),
                len(flying) + 1, {}, b"",
            )  # fmt: skip
            flying.append((send, trace))
            assert state.sending_count == len(flying) <= state.max_outstanding
        if not flying and not producing:
            wake = state.wake_at()
            assert wake is not None and wake > now, "stuck"
            now = wake
            continue
        turn = rng.randrange(len(flying) + len(producing))
        if turn >= len(flying):
            dead = producing.pop(turn - len(flying))
            state.dead_lettered(dead.batch)
            run.dead |= {r.offset: dead for r in dead.records}
            done |= {r.offset for r in dead.records}
        else:
            send, trace = flying.pop(turn)
            got = answer(trace.offsets)
            trace.status, trace.answered = got.status or 0, next(seq)
            trace.failed = tuple(sorted(got.failed))
            run.traces.append(trace)
            step = state.answered(send, got, now, rng.random())
            run.acked += trace.acked
            done |= set(trace.acked)
            if isinstance(step, DeadLetter):
                producing.append(step)
            else:
                assert step is None
        assert state.committable == min(set(range(total)) - done, default=total)
        assert state.outstanding_records == sum(len(b.records) for b in state.batches)
        assert state.sending_count == sum(b.sending for b in state.batches) == len(flying)
        assert state.in_flight == sum(len(s.records) for s, _ in flying)
        assert state.busy_keys == Counter(k for b in state.batches for k in b.keys)
        assert state.outstanding_records + state.unsettled_records <= state.open_limit
        state.committed(state.committable)
        now += 0.001
    return run


def produced(keys: str = KEYS) -> dict[tuple[int, int], str | None]:
    return {(0, o): k for o, k in enumerate(keys)}


@pytest.mark.parametrize("ordering", ["partition", "key", "none"])
@pytest.mark.parametrize("poison", [0, 1, 5, 7])
@pytest.mark.parametrize("status", [400, 413, 500])
@pytest.mark.parametrize("seed", range(3))
def test_a_poison_record_is_isolated_and_dead_lettered_alone(
    ordering: Ordering, poison: int, status: int, seed: int
) -> None:
    state = machine(ordering)
    run = drive(state, refusing(poison, status=status), seed)
    check(run.traces, produced(), ordering, 4, dead_lettered=frozenset({(0, poison)}))
    assert list(run.dead) == [poison] and run.dead[poison].last.status == status
    alone = 1 if status < 500 else POLICY.max_attempts  # a refusal is not retried
    assert run.dead[poison].attempts == 3 + alone  # sent in 8, 4, 2, then alone
    assert sorted(run.acked) == [o for o in range(16) if o != poison]  # each exactly once
    # The poisoned batch: itself, two halves, two quarters, two eighths; the other batch once.
    assert len(run.traces) == 1 + 2 + 2 + 1 + alone + 1
    assert state.delivered == 15 and state.dead_lettered_count == 1
    assert state.retried == 8 + 4 + 2 + alone - 1  # each split's records, then its retries
    assert state.committable == 16 and not state.batches and not state.busy_keys


@pytest.mark.parametrize("ordering", ["partition", "key", "none"])
def test_poison_records_in_both_batches_keep_requests_within_max_in_flight(
    ordering: Ordering,
) -> None:
    state = machine(ordering, max_in_flight=2)
    run = drive(state, refusing(2, 3, 12), seed=7)
    dead = frozenset({(0, 2), (0, 3), (0, 12)})
    check(run.traces, produced(), ordering, 2, dead_lettered=dead)
    assert sorted(run.dead) == [2, 3, 12]
    assert sorted(run.acked) == sorted(set(range(16)) - {2, 3, 12})


def test_without_bisect_on_error_the_whole_batch_is_dead_lettered() -> None:
    state = machine(policy=replace(POLICY, bisect_on_error=False))
    run = drive(state, refusing(5))
    assert sorted(run.dead) == list(range(8)) and len(run.traces) == 2


@pytest.mark.parametrize(
    "answer",
    [
        Answer(503),
        Answer(503, retry_after_s=0.02),
        Answer(429, retry_after_s=0.02),
        Answer(None, "no answer within 100 ms"),
        Answer(None, "ConnectionRefusedError"),
        Answer(408),
        Answer(301),
        Answer(401),
        Answer(403),
        Answer(404),
    ],
    ids=lambda a: a.describe(),
)
def test_throttles_timeouts_and_redirects_do_not_split(answer: Answer) -> None:
    """Not the records' fault: the batch is retried whole (or, a redirect or a 4xx about the
    endpoint rather than the content, refused whole)."""
    state = machine()
    run = drive(state, lambda sent: answer if 5 in sent else Answer(204))
    assert all(len(t.offsets) == 8 for t in run.traces)
    assert sorted(run.dead) == list(range(8))
    refused = answer.status is not None and answer.status not in (408, 429, 503)
    tries = 1 if refused else POLICY.max_attempts
    assert len(run.traces) == tries + 1 and run.dead[0].attempts == tries


def test_gone_pauses_without_splitting() -> None:
    state = machine()
    assert isinstance(state.answered(sent(state, 0.0), Answer(410), 0.0, 0.0), Pause)
    assert [len(b.records) for b in state.batches] == [8]
    state.resume()
    assert offsets(state.next_send(0.0)) == list(range(8))


def test_a_partial_batch_response_retries_the_records_named_without_splitting() -> None:
    state = machine()
    state.answered(sent(state, 0.0), Answer(200, failed=frozenset({2, 5})), 0.0, 0.0)
    assert offsets(state.next_send(1.0)) == [2, 5]


def test_a_5xx_split_waits_the_backoff_and_a_4xx_split_goes_at_once() -> None:
    state = machine()
    assert state.answered(sent(state, 0.0), Answer(500), 1.0, 0.0) is None
    after = 1.0 + backoff_s(POLICY, 1, 0.0)
    assert state.committable == 0 and state.wake_at() == after
    assert state.next_send(after - 0.001) is None
    first = sent(state, after)
    assert offsets(first) == [0, 1, 2, 3] and first.attempt == 2
    assert state.next_send(after) is None  # the second half waits for the first (partition)
    assert state.wake_at() is None  # nothing to do until an answer
    state.answered(first, Answer(422), 2.0, 0.0)
    quarter = sent(state, 2.0)  # refused: the halves go at once
    assert offsets(quarter) == [0, 1]
    state.answered(quarter, Answer(204), 2.0, 0.0)
    assert state.committable == 2
    assert offsets(state.next_send(2.0)) == [2, 3] and state.next_send(2.0) is None


def test_under_none_both_halves_go_at_once() -> None:
    state = machine("none")
    first, second = sent(state, 0.0), sent(state, 0.0)
    assert offsets(first) == list(range(8)) and offsets(second) == list(range(8, 16))
    state.answered(first, Answer(400), 0.0, 0.0)
    assert offsets(state.next_send(0.0)) == [0, 1, 2, 3]
    assert offsets(state.next_send(0.0)) == [4, 5, 6, 7]
    assert state.requests_in_flight == 3 and state.in_flight == 16


def test_under_key_halves_holding_a_key_go_in_order_and_keep_it_busy() -> None:
    state = machine("key", keys=KEYS + "a")  # offset 16: a, behind the a's in the first batch
    first, second = sent(state, 0.0), sent(state, 0.0)
    assert offsets(first) == list(range(8)) and offsets(second) == list(range(8, 16))
    state.answered(first, Answer(400), 0.0, 0.0)
    assert state.busy_keys == {b"a": 2, b"b": 2, b"c": 2, b"d": 2} | dict.fromkeys(
        (b"e", b"f", b"g", b"h"), 1
    )
    low = sent(state, 0.0)
    assert offsets(low) == [0, 1, 2, 3]
    assert state.next_send(0.0) is None  # 4..7 hold a..d too; 16 waits for every a
    state.answered(low, Answer(204), 0.0, 0.0)
    assert state.busy_keys[b"a"] == 1 and offsets(state.next_send(0.0)) == [4, 5, 6, 7]
    assert state.next_send(0.0) is None  # still not 16


def test_under_key_halves_of_other_keys_go_at_once() -> None:
    state = machine("key", keys="aaaabbbb")
    state.answered(sent(state, 0.0), Answer(400), 0.0, 0.0)
    assert state.busy_keys == {b"a": 1, b"b": 1}
    assert offsets(state.next_send(0.0)) == [0, 1, 2, 3]
    assert offsets(state.next_send(0.0)) == [4, 5, 6, 7]


def test_a_poison_record_answering_5xx_gets_its_budget_alone() -> None:
    """A split is not spent: isolated in three splits, the record then makes max_attempts
    attempts alone; its dead letter counts every request that carried it."""
    state = machine(keys=KEYS[:8])
    run = drive(state, refusing(5, status=500))
    assert list(run.dead) == [5] and run.dead[5].attempts == 3 + POLICY.max_attempts
    alone = [t for t in run.traces if t.offsets == (5,)]
    assert len(alone) == POLICY.max_attempts
    assert len(run.traces) == 1 + 2 + 2 + 1 + POLICY.max_attempts  # [4] alone acknowledged


def test_attempts_failed_before_a_split_stay_spent() -> None:
    """A timeout (not the records' fault, so no split) is spent by every half: the poison
    record alone has what is left of the batch's budget."""
    state = machine(keys=KEYS[:8])
    tries = itertools.count(1)

    def answer(sent: tuple[int, ...]) -> Answer:
        if next(tries) == 1:
            return Answer(None, "no answer within 100 ms")
        return refusing(5, status=500)(sent)

    run = drive(state, answer)
    assert [len(t.offsets) for t in run.traces[:2]] == [8, 8]
    assert len([t for t in run.traces if t.offsets == (5,)]) == POLICY.max_attempts - 1
    assert list(run.dead) == [5] and run.dead[5].attempts == 1 + 3 + POLICY.max_attempts - 1


def test_a_batch_splits_on_its_last_attempt() -> None:
    """Two timeouts, then a 500 on the last attempt: split all the same, each half with the
    one attempt left; so is every smaller batch holding the poison record."""
    state = machine(keys=KEYS[:8])
    tries = itertools.count(1)

    def answer(sent: tuple[int, ...]) -> Answer:
        if next(tries) < POLICY.max_attempts:
            return Answer(None, "no answer within 100 ms")
        return refusing(5, status=500)(sent)

    run = drive(state, answer)
    assert list(run.dead) == [5] and run.dead[5].attempts == 3 + 1 + 1 + 1
    assert sorted(run.acked) == [0, 1, 2, 3, 4, 6, 7]


@pytest.mark.parametrize("status", [400, 500])
def test_requests_stay_bounded_when_every_record_fails(status: int) -> None:
    """An endpoint failing everything: each record ends alone, after at most 2N - 1 requests
    for a refusal and (2N - 1) x max_attempts for a 5xx."""
    state = machine(keys=KEYS[:8])
    run = drive(state, refusing(*range(8), status=status))
    assert sorted(run.dead) == list(range(8))
    assert all(len(d.records) == 1 for d in run.dead.values())
    if status == 400:
        assert len(run.traces) == 2 * 8 - 1
    else:
        assert len(run.traces) == 7 + 8 * POLICY.max_attempts <= (2 * 8 - 1) * 3


def test_without_a_dead_letter_topic_the_partition_stops_on_the_poison_record() -> None:
    state = PartitionDispatch(0, Batching(max_records=8), POLICY, False)
    records = [DeliveryRecord(o, 0, None, b"v", []) for o in range(8)]
    state.read(records, 8, now=0.0)
    poison = refusing(5)
    step = None
    while step is None:
        send = sent(state, 0.0)
        step = state.answered(send, poison(tuple(offsets(send))), 0.0, 0.0)
    assert isinstance(step, Stop) and step.offset == 5 and state.committable == 5
    assert "offset 5 was refused" in step.reason and state.next_send(1.0) is None
