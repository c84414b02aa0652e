"""A produce's way into a transaction (`gateway.produce.front.InTransaction`): the routes', the
fast routes' and reply subscriptions' alike."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from engine.producer_state import ProducerIdentity
from groups.transactions.coordinator import TransactionCoordinator


class PartitionsAdder:
    """What adds a produce's partitions of `topic` to transaction `name` at its coordinator
    (KIP-890's server side: before any is written) and says who writes them. Partitions in it
    already are answered without the coordinator's coroutines (`TransactionCoordinator.added`);
    `ready` gives the coordinator once its state topic is there, for the others."""

    __slots__ = ("epoch", "name", "principal", "producer", "ready", "topic", "transactions")

    def __init__(
        self,
        transactions: TransactionCoordinator,
        ready: Callable[[], Awaitable[TransactionCoordinator]],
        name: str,
        epoch: int,
        topic: str,
        principal: str | None,
    ) -> None:
        self.transactions = transactions
        self.ready = ready
        self.name = name
        self.epoch = epoch
        self.topic = topic
        self.principal = principal
        self.producer = transactions.producer_of(name, epoch)

    async def __call__(self, partitions: list[int]) -> ProducerIdentity:
        wanted = [(self.topic, p) for p in partitions]
        name, epoch, principal = self.name, self.epoch, self.principal
        meta = self.transactions.added(name, epoch, wanted, principal)
        if meta is None:
            coordinator = await self.ready()
            meta = await coordinator.add_partitions(name, epoch, wanted, principal)
        return ProducerIdentity(meta.producer_id, meta.producer_epoch)
