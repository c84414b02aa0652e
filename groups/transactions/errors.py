"""The transaction coordinator's refusals: group errors with stable codes (the gateway maps a
code to its HTTP status, as for every group error)."""

from __future__ import annotations

from typing import Any, ClassVar

from groups.errors import GroupError


class TransactionError(GroupError):
    """A refused transaction operation; each subclass has its own code."""

    CODE: ClassVar[str] = "TRANSACTION_ERROR"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(self.CODE, detail, **extra)


class ProducerFenced(TransactionError):
    """The call's producer epoch is not the id's current one: a newer producer of the same
    transactional id began a transaction since (this one is a zombie)."""

    CODE = "PRODUCER_FENCED"


class InvalidTxnState(TransactionError):
    """The operation does not fit the transaction's state (commit after abort, abort after
    commit, add to a transaction already ending)."""

    CODE = "INVALID_TXN_STATE"


class UnknownTransactionalId(TransactionError):
    CODE = "UNKNOWN_TRANSACTIONAL_ID"


class ConcurrentTransactions(TransactionError):
    """The id's previous transaction is still completing (its markers being written): retry
    shortly."""

    CODE = "CONCURRENT_TRANSACTIONS"


class TransactionTimedOut(TransactionError):
    """The transaction ran past its timeout and the coordinator aborted it."""

    CODE = "TRANSACTION_TIMED_OUT"


class InvalidTransactionTimeout(TransactionError):
    CODE = "INVALID_TRANSACTION_TIMEOUT"


class NotTransactionOwner(TransactionError):
    """The transaction was begun by another principal."""

    CODE = "NOT_TRANSACTION_OWNER"
