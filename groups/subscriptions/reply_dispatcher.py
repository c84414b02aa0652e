"""A reply subscription's partition (exactly-once functions: Knative's reply events, made
atomic). The partition is delivered as in log mode with ordering `partition` (dispatcher.py:
its reads, requests, retries, backoff, dead letters and flow control), one batch at a time;
the records of the endpoint's 2xx answer (replies.py) and the position past the batch are
then committed in one transaction, and only then does the next batch go out.

Each transaction is under the partition's own transactional id, `<group>.<partition>`: it
begins (aborting whatever that id left open and fencing its holder: a dispatcher restarted
after a crash, or one on the partition's new leader, fences the old one's zombie), reads the
group's committed position and goes on only if it is where this dispatcher last left it,
produces the replies to the reply topic, sends the position as the group's offset (a group
without members: no generation), and commits. Since any later commit must begin after this
one's begin, and so fences it, two transactions never both commit from one position: a
position committed is never delivered again, and a crash anywhere before the commit leaves
neither replies nor position (the next dispatcher's begin aborts the open transaction, and it
delivers the batch again). A commit whose answer was lost is found by the next begin's check:
the position moved, and delivery starts again from it. A dispatcher stopped mid-transaction
(its subscription deleted or changed, its partition's leadership gone) aborts that transaction
as it stops, rather than leave it holding the last stable offset of the partitions it wrote
(and every read_committed reader of them) until its timeout; one whose abort cannot reach the
coordinator (a node whose API has closed before its subscriptions stop, when another node
coordinates the id) leaves it to the next begin or the timeout.

The transaction calls are the gateway's (Services.transactions: in process where this node
coordinates the id, through its own public API otherwise); groups know nothing of either. A
failing call (a coordinator moving, a node down) is retried from the begin, with backoff,
without asking the endpoint again; records the reply topic refuses fail the attempt as a 5xx
would (retried, then dead-lettered). Dead letters are produced as in log mode (at least once),
then the position past them is committed in a transaction of its own, as is a position that
only records filtered out moved."""

from __future__ import annotations

import asyncio
import logging

from engine.errors import EngineError
from groups.subscriptions import replies
from groups.subscriptions.dispatcher import RETRY_FIRST_S, RETRY_MAX_S, PartitionDispatcher
from groups.subscriptions.state import Answer, Batch, DeadLetter, PartitionDispatch, Pause, Send
from replication.errors import ReplicationError

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_MS = 30_000  # spans the produce, the offsets and the commit, not the POST
FILTERED_COMMIT_S = 1.0  # a position moved only by records filtered out: committed this often
STOP_ABORT_S = 10.0  # a stopping dispatcher's wait for its begin's answer and its abort


class PositionMoved(ReplicationError):
    """The group's committed position is not where this dispatcher left it: another
    dispatcher of the partition moved it (a leadership change), or this one's commit went
    through unanswered. Delivery starts again from the committed position."""


class ReplyDispatcher(PartitionDispatcher):
    """Delivers one partition of a reply subscription, each batch in one transaction with its
    replies and the position past it."""

    _transacting: asyncio.Lock  # one transaction at a time under the id, per run
    # The begin of the transaction under way (its epoch), until that transaction has ended.
    _open: asyncio.Future[int] | None = None

    @property
    def transactional_id(self) -> str:
        return f"{self.sub.group}.{self.partition}"

    @property
    def commit_interval_s(self) -> float:
        return FILTERED_COMMIT_S

    async def _dispatch(self) -> None:
        self.state = None  # only transactions move the position: start from the committed one
        self._transacting = asyncio.Lock()
        await super()._dispatch()

    def _send_now(self, state: PartitionDispatch, send: Send, ticket: int, now: float) -> bool:
        return False  # each attempt runs as a task, which awaits its transaction

    async def _post(self, send: Send) -> Answer:
        """POST the batch; on a 2xx, commit its replies and the position past it before the
        attempt ends (and the next batch may go)."""
        response, error = await self._exchange(send, replies.MAX_REPLY_BYTES)
        answer = self._answer(send, response, error)
        if response is None or answer.status is None or not 200 <= answer.status < 300:
            return answer
        assert self.state is not None
        try:
            body = replies.produce_body(response)
            async with self._transacting:
                await self._transact(body, self.state.committable_after(send.batch))
        except replies.ReplyRefused as exc:
            return Answer(None, f"HTTP {answer.status}, but the reply was refused: {exc}")
        return answer

    def _settle(
        self, state: PartitionDispatch, send: Send, ticket: int, started: float, answer: Answer
    ) -> DeadLetter | Pause | None:
        step = super()._settle(state, send, ticket, started, answer)
        if self.committed is not None:
            state.committed(self.committed)  # what the transactions moved past leaves the window
        return step

    async def _past_dead_letters(self, state: PartitionDispatch, batch: Batch) -> None:
        async with self._transacting:
            await self._transact(None, state.committable_after(batch))

    async def _commit(self, state: PartitionDispatch) -> None:
        """Records filtered out moved the position: a transaction without replies moves it."""
        async with self._transacting:
            position = state.committable
            if self.committed is None or position > self.committed:
                await self._transact(None, position)
        if self.committed is not None:
            state.committed(self.committed)

    async def _flush(self) -> None:
        """Nothing: a stopped dispatcher's position is where its last transaction left it."""

    async def stop(self) -> None:
        """Stop, then abort the transaction left open by the attempt it cancelled, if any
        (one whose begin was on its way too, once it is answered): at once, rather than at
        the next begin of its id or at its timeout."""
        await super().stop()
        begun, self._open = self._open, None
        if begun is None:
            return
        tid = self.transactional_id
        try:
            async with asyncio.timeout(STOP_ABORT_S):
                try:
                    epoch = await begun
                except (ReplicationError, EngineError, OSError):
                    return  # refused or not answered: it began nothing this one knows of
                await self.services.transactions.abort(tid, epoch)
        except (ReplicationError, EngineError, OSError, TimeoutError) as exc:
            log.info(
                "subscription %r: stopped; its transaction %s is left to the next begin or its "
                "timeout: %r",
                self.sub.name, tid, exc,
            )  # fmt: skip

    async def _transact(self, body: bytes | None, position: int) -> None:
        """Commit the replies in `body` (a JSON produce body) and `position` in one
        transaction, trying again from the begin until it commits (held by `_transacting`)."""
        delay = RETRY_FIRST_S
        while True:
            try:
                await self._transaction(body, position)
                break
            except (replies.ReplyRefused, PositionMoved):
                raise
            except (ReplicationError, EngineError, OSError) as exc:
                self.last_error = f"transaction failed: {type(exc).__name__}: {exc}"
                log.info(
                    "subscription %r partition %d: %s; retrying in %.1f s",
                    self.sub.name, self.partition, self.last_error, delay,
                )  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_S, delay * 2)
        self.committed = position

    async def _transaction(self, body: bytes | None, position: int) -> None:
        sub, txn, tid = self.sub, self.services.transactions, self.transactional_id
        assert sub.reply is not None
        # Shielded: an attempt cancelled by `stop` leaves its begin to finish, for `stop` to
        # abort what it began.
        begun = self._open = asyncio.ensure_future(txn.begin(tid, TRANSACTION_TIMEOUT_MS))
        epoch = await asyncio.shield(begun)
        try:
            committed = await self.services.positions.committed(sub, self.partition)
            if committed != self.committed:
                raise PositionMoved(
                    f"the committed position of partition {self.partition} is {committed}, "
                    f"not {self.committed}: delivering from it"
                )
            if body is not None:
                await txn.produce(tid, epoch, sub.reply.topic, body)
            await txn.send_offsets(tid, epoch, sub.group, sub.topic, self.partition, position)
            await txn.commit(tid, epoch)
        except (replies.ReplyRefused, ReplicationError, EngineError, OSError):
            try:  # at once, rather than at the next begin or the timeout: readers wait on it
                await txn.abort(tid, epoch)
            except (ReplicationError, EngineError, OSError) as exc:
                log.debug("subscription %r: abort of %s: %r", sub.name, tid, exc)
            if self._open is begun:
                self._open = None
            raise
        if self._open is begun:
            self._open = None
