"""The sans-IO replication state: ISR and high watermark rules, KIP-101/279 truncation."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET, EpochEntry, LeaderEpochCache
from replication.replica_state import (
    UNKNOWN_OFFSET,
    AskAgain,
    LeaderState,
    Truncate,
    truncation_request,
    truncation_step,
)

T0 = 1_700_000_000_000
LAG_MAX = 10_000


def leader(
    isr: tuple[int, ...] = (1, 2, 3), epoch_start: int = 10, hw: int = 10, now: int = T0
) -> LeaderState:
    return LeaderState(1, 5, (1, 2, 3), isr, epoch_start, hw, now)


# -- follower progress -------------------------------------------------------------------------


def test_isr_members_start_caught_up_others_do_not() -> None:
    state = leader(isr=(1, 2))
    assert state.followers[2].last_caught_up_ms == T0
    assert state.followers[3].last_caught_up_ms == 0
    assert state.followers[2].log_end_offset == UNKNOWN_OFFSET
    assert 1 not in state.followers


def test_construction_checks_the_isr_and_high_watermark() -> None:
    with pytest.raises(ValueError):
        LeaderState(1, 0, (1, 2), (2,), 0, 0, T0)  # leader outside the ISR
    with pytest.raises(ValueError):
        LeaderState(1, 0, (1, 2), (1, 4), 0, 0, T0)  # ISR member not a replica
    with pytest.raises(ValueError):
        LeaderState(1, 0, (1, 2), (1, 2), 5, 6, T0)  # HW past the leader's log end


def test_fetch_at_log_end_is_caught_up_now() -> None:
    state = leader()
    state.on_follower_fetch(2, 10, 10, T0 + 500)
    p = state.followers[2]
    assert (p.log_end_offset, p.last_caught_up_ms, p.last_fetch_ms, p.last_fetch_leader_end) == (
        10,
        T0 + 500,
        T0 + 500,
        10,
    )


def test_fetch_reaching_previous_leader_end_was_caught_up_at_previous_fetch() -> None:
    state = leader()
    state.on_follower_fetch(2, 10, 20, T0 + 100)  # behind: leader at 20
    state.on_follower_fetch(2, 20, 30, T0 + 200)  # reached 20: caught up as of T0 + 100
    assert state.followers[2].last_caught_up_ms == T0 + 100
    state.on_follower_fetch(2, 25, 40, T0 + 300)  # short of 30: no credit
    assert state.followers[2].last_caught_up_ms == T0 + 100
    assert state.followers[2].log_end_offset == 25


def test_caught_up_time_never_goes_back() -> None:
    state = leader()
    state.on_follower_fetch(2, 10, 10, T0 + 900)
    state.on_follower_fetch(2, 10, 15, T0 + 950)  # reaches the previous end: max(900, 900)
    assert state.followers[2].last_caught_up_ms == T0 + 900


def test_fetch_errors() -> None:
    state = leader()
    with pytest.raises(ValueError):
        state.on_follower_fetch(7, 0, 10, T0)  # not a replica
    with pytest.raises(ValueError):
        state.on_follower_fetch(1, 0, 10, T0)  # the leader itself
    with pytest.raises(ValueError):
        state.on_follower_fetch(2, 11, 10, T0)  # past the leader's log end


def test_kafka_4485_follower_one_batch_behind_a_busy_leader_stays_in_sync() -> None:
    """Each fetch brings 2 to where the leader was, which has one more batch by the next fetch;
    3 falls further behind at every fetch and is shrunk once lag_max_ms has passed."""
    state = leader()
    leader_end = slow = 10
    for i in range(1, 101):
        now = T0 + i * 1_000
        fetch_offset = leader_end
        leader_end += 100
        slow += 10
        state.on_follower_fetch(2, fetch_offset, leader_end, now)
        state.on_follower_fetch(3, slow, leader_end, now)
        assert state.followers[2].log_end_offset < leader_end
        expected = None if now - T0 <= LAG_MAX else (1, 2)
        assert state.shrink_proposal(now, leader_end, LAG_MAX) == expected


# -- ISR shrink and expansion ------------------------------------------------------------------


def test_shrink_only_after_lag_max_ms() -> None:
    state = leader()
    state.on_follower_fetch(2, 10, 10, T0)
    state.on_follower_fetch(3, 10, 10, T0)
    assert state.shrink_proposal(T0 + LAG_MAX, 50, LAG_MAX) is None  # exactly lag_max: kept
    assert state.shrink_proposal(T0 + LAG_MAX + 1, 50, LAG_MAX) == (1,)


def test_shrink_keeps_a_follower_at_the_log_end_however_old() -> None:
    state = leader()
    state.on_follower_fetch(2, 50, 50, T0)
    state.on_follower_fetch(3, 10, 50, T0)
    assert state.shrink_proposal(T0 + 10 * LAG_MAX, 50, LAG_MAX) == (1, 2)


def test_new_leader_does_not_shrink_at_once() -> None:
    state = leader(now=T0)
    assert state.shrink_proposal(T0 + LAG_MAX, 10, LAG_MAX) is None
    assert state.shrink_proposal(T0 + LAG_MAX + 1, 10, LAG_MAX) == (1,)  # never fetched


def test_shrink_never_removes_the_leader_and_waits_for_a_pending_change() -> None:
    state = leader(isr=(1,))
    assert state.shrink_proposal(T0 + 10 * LAG_MAX, 10, LAG_MAX) is None
    state = leader()
    state.begin_isr_change((1, 2))
    assert state.shrink_proposal(T0 + 10 * LAG_MAX, 50, LAG_MAX) is None


def test_expand_needs_the_high_watermark_and_the_epoch_start() -> None:
    state = leader(isr=(1, 2), epoch_start=20, hw=10)
    state.on_follower_fetch(2, 15, 30, T0)
    assert state.high_watermark(30) == 15
    state.on_follower_fetch(3, 14, 30, T0)
    assert state.expand_proposal(3, 30) is None  # below the HW
    state.on_follower_fetch(3, 16, 30, T0)
    assert state.expand_proposal(3, 30) is None  # at the HW but below the epoch start
    state.on_follower_fetch(3, 20, 30, T0)
    assert state.expand_proposal(3, 30) == (1, 2, 3)


def test_expand_compares_with_the_high_watermark_the_fetch_states_give() -> None:
    state = leader(isr=(1, 2), epoch_start=10, hw=10)
    state.on_follower_fetch(2, 30, 30, T0)  # the HW may now move to 30, not yet asked to
    state.on_follower_fetch(3, 20, 30, T0)
    assert state.expand_proposal(3, 30) is None


def test_expand_none_for_members_unknown_progress_and_while_pending() -> None:
    state = leader(isr=(1, 2))
    assert state.expand_proposal(2, 10) is None  # already in the ISR
    assert state.expand_proposal(3, 10) is None  # never fetched
    state.on_follower_fetch(3, 10, 10, T0)
    state.begin_isr_change((1,))
    assert state.expand_proposal(3, 10) is None
    with pytest.raises(ValueError):
        state.expand_proposal(9, 10)


def isr_and_pending(state: LeaderState) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    return state.isr, state.pending


def test_isr_change_commit_and_failure() -> None:
    state = leader()
    assert isr_and_pending(state) == ((1, 2, 3), None)
    state.begin_isr_change((1, 2))
    assert isr_and_pending(state) == ((1, 2, 3), (1, 2))
    with pytest.raises(ValueError):
        state.begin_isr_change((1,))  # one change at a time
    with pytest.raises(ValueError):
        state.isr_change_committed((1,))  # not the pending one
    state.isr_change_committed((1, 2))
    assert isr_and_pending(state) == ((1, 2), None)
    state.begin_isr_change((1, 2, 3))
    state.isr_change_failed()
    assert isr_and_pending(state) == ((1, 2), None)
    with pytest.raises(ValueError):
        state.isr_change_failed()


def test_an_isr_the_controller_stored_in_the_epoch_is_the_isr_and_its_member_rejoins() -> None:
    """A move's start drops a member restarted since (KIP-903) without a new epoch: the leader
    takes the stored ISR, so the member's next fetch at the log end proposes it again, and no
    change of the leader's carries its old place."""
    state = leader()
    state.on_follower_fetch(3, 10, 10, T0)
    assert state.expand_proposal(3, 10) is None  # a member
    state.isr_stored((1, 2))
    assert isr_and_pending(state) == ((1, 2), None)
    assert state.expand_proposal(3, 10) == (1, 2, 3)
    assert state.shrink_proposal(T0 + LAG_MAX + 1, 11, LAG_MAX) == (1,)  # 3 is no member
    state.begin_isr_change((1, 2, 3))
    state.isr_stored((1,))  # stored meanwhile: the pending write fails on its version
    assert isr_and_pending(state) == ((1,), (1, 2, 3))
    state.isr_change_failed()
    assert isr_and_pending(state) == ((1,), None)
    for bad in ((2, 3), (1, 9)):
        with pytest.raises(ValueError):
            state.isr_stored(bad)  # without the leader, or a node that is no replica


@pytest.mark.parametrize("bad", [(1, 2, 3), (2, 3), (1, 2, 9)])
def test_begin_isr_change_rejects(bad: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        leader().begin_isr_change(bad)  # no change, no leader, not a replica


def test_min_isr_on_the_committed_isr() -> None:
    state = leader(isr=(1, 2))
    state.on_follower_fetch(3, 10, 10, T0)
    state.begin_isr_change((1, 2, 3))
    assert state.maximal_isr == (1, 2, 3)
    assert state.min_isr_satisfied(2)
    assert not state.min_isr_satisfied(3)
    state.isr_change_committed((1, 2, 3))
    assert state.min_isr_satisfied(3)


# -- high watermark ----------------------------------------------------------------------------


def test_high_watermark_is_the_least_isr_log_end() -> None:
    state = leader(hw=10)
    state.on_follower_fetch(2, 14, 20, T0)
    state.on_follower_fetch(3, 17, 20, T0)
    assert state.high_watermark(20) == 14
    state.on_follower_fetch(2, 20, 25, T0)
    assert state.high_watermark(25) == 17


def test_unknown_log_end_holds_the_high_watermark() -> None:
    state = leader(hw=10)
    state.on_follower_fetch(2, 20, 20, T0)
    assert state.high_watermark(20) == 10  # 3 has not fetched in this epoch
    state.on_follower_fetch(3, 20, 20, T0)
    assert state.high_watermark(20) == 20


def test_high_watermark_never_goes_back() -> None:
    state = leader(hw=10)
    state.on_follower_fetch(2, 5, 20, T0)  # an ISR follower still below the old HW
    state.on_follower_fetch(3, 20, 20, T0)
    assert state.high_watermark(20) == 10


def test_high_watermark_never_passes_the_leader_log_end() -> None:
    alone = leader(isr=(1,), hw=10)
    assert alone.high_watermark(12) == 12
    state = leader(hw=10)
    state.on_follower_fetch(2, 30, 30, T0)
    state.on_follower_fetch(3, 30, 30, T0)
    assert state.high_watermark(30) == 30


def test_high_watermark_over_the_pre_shrink_isr_while_a_shrink_is_pending() -> None:
    state = leader(hw=10)
    state.on_follower_fetch(2, 30, 30, T0)
    state.on_follower_fetch(3, 12, 30, T0)
    state.begin_isr_change((1, 2))
    assert state.maximal_isr == (1, 2, 3)
    assert state.high_watermark(30) == 12  # 3 may still be in the ISR
    state.isr_change_committed((1, 2))
    assert state.high_watermark(30) == 30


def test_high_watermark_held_by_a_pending_expansion() -> None:
    state = leader(isr=(1, 2), hw=10)
    state.on_follower_fetch(2, 20, 20, T0)
    state.on_follower_fetch(3, 20, 20, T0)
    assert state.high_watermark(20) == 20
    proposal = state.expand_proposal(3, 20)
    assert proposal == (1, 2, 3)
    state.begin_isr_change(proposal)
    state.on_follower_fetch(2, 30, 30, T0)
    assert state.high_watermark(30) == 20  # 3 may already be in the ISR: it holds the HW
    state.isr_change_failed()
    assert state.high_watermark(30) == 30


def test_largest_lag_in_records_and_time() -> None:
    state = leader(isr=(1, 2), now=T0)
    assert state.largest_lag(10, T0 + 5) == (0, 5)  # nobody fetched yet: time only
    state.on_follower_fetch(2, 40, 40, T0 + 100)
    state.on_follower_fetch(3, 25, 40, T0 + 100)
    assert state.largest_lag(40, T0 + 100) == (15, 100)  # 3 never caught up since T0
    state.on_follower_fetch(3, 40, 40, T0 + 200)
    assert state.largest_lag(55, T0 + 300) == (15, 200)  # 2 last caught up at T0 + 100
    assert state.largest_lag(40, T0 + 300) == (0, 0)


def test_no_followers_no_lag() -> None:
    state = LeaderState(1, 0, (1,), (1,), 0, 0, T0)
    assert state.largest_lag(10, T0 + 1) == (0, 0)


# -- truncation (KIP-101 / KIP-279) ------------------------------------------------------------

_cache_names = itertools.count()


def entries_of(log: Sequence[int]) -> list[EpochEntry]:
    """The epoch cache of a log given as the epoch of each offset."""
    return [EpochEntry(e, o) for o, e in enumerate(log) if o == 0 or log[o - 1] != e]


def epoch_cache(directory: Path, entries: Sequence[tuple[int, int]]) -> LeaderEpochCache:
    cache = LeaderEpochCache(directory / f"leader-epoch-checkpoint-{next(_cache_names)}")
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def truncate(
    directory: Path,
    follower: Sequence[tuple[int, int]],
    follower_end: int,
    leader: Sequence[tuple[int, int]],
    leader_end: int,
) -> tuple[int, int]:
    """Run the protocol against the engine's own `end_offset_for`: (offset, rounds)."""
    cache = epoch_cache(directory, leader)
    asked = truncation_request(follower)
    rounds = 0
    while True:
        rounds += 1
        assert rounds <= len(follower) + 1, "the protocol did not terminate"
        answer = cache.end_offset_for(asked, leader_end)
        step = truncation_step(follower, follower_end, asked, *answer)
        if isinstance(step, Truncate):
            assert 0 <= step.offset <= follower_end
            return step.offset, rounds
        assert step.epoch < asked
        asked = step.epoch


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def test_truncation_request() -> None:
    assert truncation_request([]) == UNDEFINED_EPOCH
    assert truncation_request([EpochEntry(0, 0), EpochEntry(3, 7)]) == 3


def test_step_same_epoch_truncates_to_the_lesser_end() -> None:
    local = [(0, 0), (2, 5)]
    assert truncation_step(local, 9, 2, 2, 7) == Truncate(7)
    assert truncation_step(local, 9, 2, 2, 12) == Truncate(9)


def test_step_older_epoch_the_follower_has_ends_where_it_ends_locally() -> None:
    local = [(0, 0), (2, 5), (4, 8)]
    assert truncation_step(local, 12, 4, 2, 10) == Truncate(8)  # local epoch 2 ends at 8
    assert truncation_step(local, 12, 4, 2, 6) == Truncate(6)


def test_step_older_epoch_the_follower_lacks_asks_again() -> None:
    local = [(0, 0), (1, 3), (4, 8)]
    assert truncation_step(local, 12, 4, 2, 10) == AskAgain(1)
    assert truncation_step([(3, 4), (4, 8)], 12, 4, 2, 10) == Truncate(4)  # none older left


def test_step_undefined_answer_drops_every_local_epoch() -> None:
    undefined = (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert truncation_step([(2, 4), (5, 9)], 12, 5, *undefined) == Truncate(4)
    assert truncation_step([(2, 4), (5, 9)], 12, 2, *undefined) == Truncate(4)
    assert truncation_step([], 0, UNDEFINED_EPOCH, *undefined) == Truncate(0)
    assert truncation_step([], 7, UNDEFINED_EPOCH, *undefined) == Truncate(0)  # proves nothing


def test_step_rejects_an_answer_newer_than_asked() -> None:
    with pytest.raises(ValueError):
        truncation_step([(0, 0), (2, 5)], 9, 2, 3, 9)


def test_kip_101_scenario_1_keeps_the_record_hw_truncation_would_lose(tmp_path: Path) -> None:
    """A wrote m1, m2 in epoch 0 (its HW 2); B copied both but its HW is still 1; B restarts."""
    a_log, b_log, b_hw = [0, 0], [0, 0], 1
    offset, rounds = truncate(tmp_path, entries_of(b_log), len(b_log), entries_of(a_log), 2)
    assert (offset, rounds) == (2, 1)  # B asks epoch 0, A answers (0, 2): m2 survives
    assert offset > b_hw  # truncating to the HW would have dropped the committed m2


def test_kip_101_scenario_2_diverged_logs_converge(tmp_path: Path) -> None:
    """A has m1, m2 (epoch 0); B has m1, leads epoch 1 after a crash and writes m3 at 1."""
    a_log = [0, 0]
    b_log = [0, 1]
    b_cache = epoch_cache(tmp_path, entries_of(b_log))
    assert b_cache.end_offset_for(0, len(b_log)) == (0, 1)
    offset, rounds = truncate(tmp_path, entries_of(a_log), len(a_log), entries_of(b_log), 2)
    assert (offset, rounds) == (1, 1)
    a_log = a_log[:offset] + b_log[offset:]  # A drops m2 and fetches m3
    assert a_log == b_log


@pytest.mark.parametrize(
    ("follower", "leader", "rounds"),
    [
        # Two rounds: the leader's answer 2 is not on the follower; it asks about 1, then 0.
        ([0] * 5 + [1] * 3 + [3] * 2, [0] * 6 + [2] * 3 + [4] * 3, 2),
        # Three rounds across interleaved epochs 0..6.
        ([0] * 3 + [1] * 2 + [3] * 2 + [5] * 2, [0] * 4 + [2] * 2 + [4] * 2 + [6] * 2, 3),
        # A later round answers the asked epoch, which ends locally before the log end.
        ([0] * 5 + [1] + [3] * 4, [0] * 5 + [1] * 2 + [2] * 2 + [4] * 3, 2),
    ],
)
def test_kip_279_fast_leader_changes_need_several_rounds(
    tmp_path: Path, follower: list[int], leader: list[int], rounds: int
) -> None:
    offset, used = truncate(
        tmp_path, entries_of(follower), len(follower), entries_of(leader), len(leader)
    )
    assert used == rounds
    assert offset == common_prefix(follower, leader)
    assert follower[:offset] == leader[:offset]


def test_empty_latest_epoch_of_a_new_leader(tmp_path: Path) -> None:
    """A leader assigns its epoch at election, before it writes: the epoch has no records yet."""
    follower = [0, 0, 0, 1, 1]
    leader = [0, 0, 0, 0]
    offset, _ = truncate(tmp_path, entries_of(follower), 5, [*entries_of(leader), (2, 4)], 4)
    assert offset == 3


History = tuple[list[int], list[int], list[tuple[int, int]], list[tuple[int, int]]]


@st.composite
def histories(draw: st.DrawFn) -> History:
    """Three replicas' logs (the epoch of each offset) and caches after random leader changes:
    (follower log, leader log, follower cache, leader cache), the leader leading the last epoch."""
    # Each epoch's leader appends some records (its cache holds the epoch from election on);
    # other replicas copy its log from where they agree with it, as far as they get.
    logs: list[list[int]] = [[], [], []]
    empty: list[tuple[int, int] | None] = [None, None, None]
    leader = 0
    shared = draw(st.integers(0, 3))  # epochs every replica copies in full: a common prefix
    for epoch in range(shared + draw(st.integers(1, 10))):
        leader = draw(st.integers(0, 2))
        appended = draw(st.integers(0, 4))
        empty[leader] = None if appended else (epoch, len(logs[leader]))
        logs[leader] += [epoch] * appended
        for r in range(3):
            if r == leader:
                continue
            if epoch < shared:
                logs[r], empty[r] = list(logs[leader]), None
                continue
            if draw(st.integers(0, 2)):  # most epochs, a replica copies nothing
                continue
            agreed = common_prefix(logs[r], logs[leader])
            copied = logs[leader][: draw(st.integers(agreed, len(logs[leader])))]
            if copied != logs[r]:
                logs[r], empty[r] = copied, None
    follower = draw(st.sampled_from([r for r in range(3) if r != leader]))

    def cache(r: int) -> list[tuple[int, int]]:
        extra = empty[r]
        return [*entries_of(logs[r]), *([extra] if extra else [])]

    return logs[follower], logs[leader], cache(follower), cache(leader)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("epoch-caches")


@settings(max_examples=500, deadline=None)
@given(histories())
def test_truncation_converges_to_the_longest_common_prefix(
    cache_dir: Path, history: History
) -> None:
    follower, leader, follower_cache, leader_cache = history
    offset, _ = truncate(cache_dir, follower_cache, len(follower), leader_cache, len(leader))
    assert follower[:offset] == leader[:offset]  # a prefix of the leader's log
    assert offset == common_prefix(follower, leader)  # and the longest
