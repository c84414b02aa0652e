"""The transaction calls the fast routes take (a producer's begin, commit and abort, of a
transactional id coordinated here), each body checked as its route checks it, and their
answers, made as the routes make them; anything else (an operator's abort, a describe, a
bad body, an id coordinated elsewhere) is left to the Application, which says why.

A transaction of ten produces is twelve requests: on the Application's path its begin and
commit cost more gateway time than the coordinator's work (docs/PERFORMANCE.md,
"Transactions"), and a connection whose begin went there sent its next produce there too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.api.fast_answer import FastAnswer, Headers
from gateway.api.groups import valid_id
from gateway.api.transactions import (
    ABORT_ROUTE,
    COMMIT_ROUTE,
    MAX_TRANSACTIONAL_ID,
    TRANSACTION_ROUTE,
    TRANSACTIONS_PREFIX,
    at_coordinator,
    begin_timeout,
    end_epoch,
    transaction_doc,
)
from gateway.formats import codecs
from gateway.http.problem import Problem
from gateway.state import Gateway

_MAX_BODY = 1024  # a larger body is the Application's, which bounds and reads it
_ROUTES = {"begin": TRANSACTION_ROUTE, "commit": COMMIT_ROUTE, "abort": ABORT_ROUTE}


@dataclass(slots=True)
class FastTransaction:
    """A producer's begin, commit or abort the fast routes took, its body checked."""

    transactional_id: str
    action: str  # "begin", "commit" or "abort"
    value: int  # a begin's timeout_ms; a commit's or abort's producer epoch
    target: str
    cors: Headers = ()
    principal: str | None = None  # with --auth, who sends it

    @property
    def route(self) -> str:
        return _ROUTES[self.action]


class TransactionIntake:
    """Takes the transaction calls the fast routes serve, and answers them."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def take(self, target: str, headers: Mapping[str, str], body: bytes) -> FastTransaction | None:
        """A POST to `target`, if it is a begin, commit or producer's abort of a transactional
        id coordinated here that its route would serve."""
        path, _, query = target.partition("?")
        if query or "%" in path:
            return None
        parts = path[len(TRANSACTIONS_PREFIX) :].split("/")
        if len(parts) == 1:
            action = "begin"
        elif len(parts) == 2 and parts[1] in ("commit", "abort"):
            action = parts[1]
        else:
            return None
        name = parts[0]
        if not valid_id(name, MAX_TRANSACTIONAL_ID):
            return None
        doc = _body(headers, body)
        if doc is None or not self.gateway.transactions.coordinates(name):
            return None
        try:
            if action == "begin":
                value = begin_timeout(doc)
            else:
                epoch = end_epoch(doc, epoch_required=action == "commit")
                if epoch is None:  # an operator's abort: alter on the cluster, the route's
                    return None
                value = epoch
        except Problem:
            return None
        return FastTransaction(name, action, value, target)

    async def answer(self, request: FastTransaction) -> FastAnswer:
        """The begin, commit or abort, as the route runs it."""
        name, principal = request.transactional_id, request.principal
        with at_coordinator(name, forwardable=False):
            coordinator = await self.gateway.transactions_ready()
            if request.action == "begin":
                meta = await coordinator.begin(name, request.value, principal)
            elif request.action == "commit":
                meta = await coordinator.commit(name, request.value, principal)
            else:
                meta = await coordinator.abort(name, request.value, principal)
        status = 201 if request.action == "begin" else 200
        return FastAnswer(status, codecs.JSON, orjson.dumps(transaction_doc(meta)))


def _body(headers: Mapping[str, str], body: bytes) -> dict[str, Any] | None:
    """The body as its route reads it (none: an empty object), if plain: a small JSON object
    sent as application/json."""
    if not body:
        return {}
    if len(body) > _MAX_BODY or headers.get("Content-Type") != codecs.JSON:
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None
