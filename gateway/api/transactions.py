"""Transaction routes (KIP-98 over HTTP): begin under a transactional id, send a consumer
group's offsets, commit or abort, describe and list; and the produce routes' way into a
transaction (`transactional_id` and `producer_epoch` in the query).

Every input is checked here; the transaction coordinator (groups.transactions.coordinator)
does the rest. A call reaching a node that does not coordinate the id is forwarded there; one
whose coordinator cannot be found now answers 503 COORDINATOR_NOT_AVAILABLE with Retry-After
(`at_coordinator`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import orjson
from aiohttp import web

from gateway.api.groups import (
    MAX_GROUP_ID,
    check_fields,
    id_param,
    int_field,
    valid_group_id,
    valid_id,
)
from gateway.auth.acl import CLUSTER
from gateway.auth.middleware import may, principal_of, require
from gateway.http.params import json_object, json_response, query_int
from gateway.http.problem import bad_request
from gateway.produce.transaction import PartitionsAdder
from gateway.state import Gateway, gateway_of
from groups.errors import GroupError
from groups.transactions.coordinator import TransactionCoordinator
from groups.transactions.group_offsets import NO_GENERATION
from groups.transactions.model import OffsetEntry, TransactionMetadata, TransactionState
from replication.errors import LeaderNotAvailable, NodeUnreachable, NotController, NotLeader
from replication.forward_client import RemoteError
from replication.node_contract import FORWARDED_BY

MAX_TRANSACTIONAL_ID = 249  # Kafka's limit on a transactional id's length
MAX_EPOCH = 2**15 - 1
MAX_OFFSETS = 10_000  # offsets in one request
DEFAULT_TIMEOUT_MS = 60_000  # Kafka's transaction.timeout.ms default
TRANSACTIONS_PREFIX = "/v1/transactions/"
TRANSACTION_ROUTE = TRANSACTIONS_PREFIX + "{transactional_id}"
COMMIT_ROUTE = TRANSACTION_ROUTE + "/commit"
ABORT_ROUTE = TRANSACTION_ROUTE + "/abort"
_STATES = {s.value: s for s in TransactionState}


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/transactions", list_transactions)
    app.router.add_post(TRANSACTION_ROUTE, begin)
    app.router.add_get(TRANSACTION_ROUTE, describe)
    app.router.add_post(TRANSACTION_ROUTE + "/offsets", add_offsets)
    app.router.add_post(COMMIT_ROUTE, commit)
    app.router.add_post(ABORT_ROUTE, abort)


def transactional_id_param(request: web.Request) -> str:
    return id_param(
        request,
        "transactional_id",
        MAX_TRANSACTIONAL_ID,
        "a transactional id",
        "INVALID_TRANSACTIONAL_ID",
    )


async def _coordinator(request: web.Request) -> TransactionCoordinator:
    return await gateway_of(request).transactions_ready()


@contextlib.contextmanager
def _at_coordinator(request: web.Request, transactional_id: str) -> Iterator[None]:
    """A call only the id's coordinator serves, on the Application's path: `at_coordinator`,
    forwarding a NotLeader unless the call was forwarded here already."""
    with at_coordinator(transactional_id, FORWARDED_BY not in request.headers):
        yield


@contextlib.contextmanager
def at_coordinator(transactional_id: str, forwardable: bool) -> Iterator[None]:
    """A call only the id's coordinator serves. NotLeader (NotController while
    `__transaction_state` does not exist here) goes on to the forwarding middleware, which
    sends the call to the node it names, when `forwardable`; otherwise (a forwarded call: the
    node that sent it saw this one as the coordinator or the controller and this node's view
    differs, the state topic just made or the coordinator moving; or the fast routes' call,
    taken because this node coordinated the id), and for a coordinator without a leader or
    still loading its state partition (LeaderNotAvailable), it answers 503
    COORDINATOR_NOT_AVAILABLE with Retry-After, as Kafka's coordinators answer while they move
    or load; the client asks again."""
    try:
        yield
    except LeaderNotAvailable as exc:
        raise _coordinator_not_available(transactional_id, exc) from exc
    except (NotLeader, NotController) as exc:
        if forwardable:
            raise
        raise _coordinator_not_available(transactional_id, exc) from exc


def _coordinator_not_available(transactional_id: str, exc: Exception) -> GroupError:
    return GroupError(
        "COORDINATOR_NOT_AVAILABLE",
        f"the coordinator of transactional id {transactional_id!r} cannot serve the call now "
        f"({exc}); retry shortly",
    )


def transaction_doc(meta: TransactionMetadata) -> dict[str, Any]:
    """A transaction as the API shows it."""
    doc = meta.as_dict()
    doc["partitions"] = [{"topic": t, "partition": p} for t, p in sorted(meta.partitions)]
    doc["pending_offsets"] = [
        {
            "group_id": group,
            **(
                {"member_id": pending.member_id, "generation_id": pending.generation_id}
                if pending.member_id
                else {}
            ),
            "offsets": [
                {"topic": t, "partition": p, "offset": o, "metadata": m}
                for t, p, o, m in pending.offsets
            ],
        }
        for group, pending in sorted(meta.pending_offsets.items())
    ]
    if meta.state is TransactionState.ONGOING:
        doc["expires_ms"] = meta.started_ms + meta.timeout_ms
    return doc


async def begin(request: web.Request) -> web.Response:
    """Begin a transaction: a new producer epoch, fencing every earlier holder of the id."""
    gateway = gateway_of(request)
    name = transactional_id_param(request)
    doc = await json_object(request, gateway.settings) if request.body_exists else {}
    timeout_ms = begin_timeout(doc)
    with _at_coordinator(request, name):
        coordinator = await _coordinator(request)
        meta = await coordinator.begin(name, timeout_ms, principal_of(request))
    return json_response(transaction_doc(meta), 201)


def begin_timeout(doc: dict[str, Any]) -> int:
    """A begin's body: its transaction.timeout.ms (Kafka's default when not given)."""
    check_fields(doc, {"timeout_ms"})
    if "timeout_ms" not in doc:
        return DEFAULT_TIMEOUT_MS
    return int_field(doc, "timeout_ms", 1, 2**31 - 1)


async def describe(request: web.Request) -> web.Response:
    name = transactional_id_param(request)
    with _at_coordinator(request, name):
        meta = (await _coordinator(request)).describe(name)
    return json_response(transaction_doc(meta))


async def add_offsets(request: web.Request) -> web.Response:
    """A consumer group's offsets, committed with the transaction (sendOffsetsToTransaction).
    Without member_id and generation_id (both absent), the offsets of a group that has no
    members (a push subscription's), unchecked, as Kafka's older
    sendOffsetsToTransaction(offsets, groupId)."""
    gateway = gateway_of(request)
    name = transactional_id_param(request)
    doc = await json_object(request, gateway.settings)
    check_fields(doc, {"producer_epoch", "group_id", "member_id", "generation_id", "offsets"})
    epoch = int_field(doc, "producer_epoch", 0, MAX_EPOCH)
    group = doc.get("group_id")
    if not valid_group_id(group):
        raise bad_request(
            f"group_id must be 1 to {MAX_GROUP_ID} printable characters without '/'",
            "INVALID_PARAMETER",
        )
    assert isinstance(group, str)
    member_id, generation = _member(doc)
    offsets = _offsets(doc.get("offsets"))
    require(request, "group", group, "read")
    for topic in {t for t, _, _, _ in offsets}:
        require(request, "topic", topic, "read")
    with _at_coordinator(request, name):
        meta = await (await _coordinator(request)).add_offsets(
            name, epoch, group, member_id, generation, offsets, principal_of(request)
        )
    return json_response(transaction_doc(meta))


def _member(doc: dict[str, Any]) -> tuple[str, int]:
    """The member sending offsets and its generation; ("", NO_GENERATION) when the body names
    neither (no generation check)."""
    named = [f for f in ("member_id", "generation_id") if f in doc]
    if not named:
        return "", NO_GENERATION
    if len(named) == 1:
        raise bad_request(
            "member_id and generation_id go together: both (a member's offsets, checked "
            "against the group's generation) or neither (a group without members)",
            "INVALID_PARAMETER",
        )
    member_id = doc["member_id"]
    if not valid_group_id(member_id):
        raise bad_request(
            f"member_id must be 1 to {MAX_GROUP_ID} printable characters without '/'",
            "INVALID_PARAMETER",
        )
    return str(member_id), int_field(doc, "generation_id", 0, 2**31 - 1)


def _offsets(raw: object) -> list[OffsetEntry]:
    if not isinstance(raw, list) or not raw or len(raw) > MAX_OFFSETS:
        raise bad_request(
            f"offsets must be a list of 1 to {MAX_OFFSETS} objects", "INVALID_PARAMETER"
        )
    out: list[OffsetEntry] = []
    seen: set[tuple[str, int]] = set()
    for i, entry in enumerate(raw):
        where = f"offsets[{i}]."
        if not isinstance(entry, dict):
            raise bad_request(f"offsets[{i}] must be an object", "INVALID_PARAMETER")
        check_fields(entry, {"topic", "partition", "offset", "metadata"})
        topic = entry.get("topic")
        if not isinstance(topic, str) or not topic:
            raise bad_request(f"{where}topic must be a topic name", "INVALID_PARAMETER")
        partition = int_field(entry, "partition", 0, 2**31 - 1, where)
        offset = int_field(entry, "offset", 0, 2**63 - 1, where)
        metadata = entry.get("metadata", "")
        if not isinstance(metadata, str) or len(metadata) > 4096:
            raise bad_request(
                f"{where}metadata must be a string of at most 4096 characters",
                "INVALID_PARAMETER",
            )
        if (topic, partition) in seen:
            raise bad_request(f"{topic}-{partition} appears twice in offsets", "INVALID_PARAMETER")
        seen.add((topic, partition))
        out.append((topic, partition, offset, metadata))
    return out


async def commit(request: web.Request) -> web.Response:
    """Commit: every record produced in the transaction and its offsets, or none of them."""
    name, epoch = await _end_request(request, epoch_required=True)
    assert epoch is not None
    with _at_coordinator(request, name):
        coordinator = await _coordinator(request)
        meta = await coordinator.commit(name, epoch, principal_of(request))
    return json_response(transaction_doc(meta))


async def abort(request: web.Request) -> web.Response:
    """Abort: the producer's (with its epoch), or an operator's (without: alter on the
    cluster, as kafka-transactions.sh abort) of a hanging transaction."""
    name, epoch = await _end_request(request, epoch_required=False)
    if epoch is None:
        require(request, "cluster", CLUSTER, "alter")
    with _at_coordinator(request, name):
        coordinator = await _coordinator(request)
        if epoch is None:
            meta = await coordinator.abort_by_operator(name)
        else:
            meta = await coordinator.abort(name, epoch, principal_of(request))
    return json_response(transaction_doc(meta))


async def _end_request(request: web.Request, *, epoch_required: bool) -> tuple[str, int | None]:
    gateway = gateway_of(request)
    name = transactional_id_param(request)
    doc = await json_object(request, gateway.settings) if request.body_exists else {}
    return name, end_epoch(doc, epoch_required=epoch_required)


def end_epoch(doc: dict[str, Any], *, epoch_required: bool) -> int | None:
    """A commit's or abort's body: the producer epoch ending the transaction (None: an
    operator's abort, which names none)."""
    check_fields(doc, {"producer_epoch"})
    if "producer_epoch" not in doc and not epoch_required:
        return None
    return int_field(doc, "producer_epoch", 0, MAX_EPOCH)


async def list_transactions(request: web.Request) -> web.Response:
    """The transactions of the cluster (each node's coordinated ones), optionally in some
    states, that the principal may describe (kafka-transactions.sh list)."""
    raw = request.query.get("state", "")
    states = None
    if raw:
        unknown = [s for s in raw.split(",") if s not in _STATES]
        if unknown:
            raise bad_request(
                f"unknown state {unknown[0]!r}; one of {', '.join(_STATES)}", "INVALID_PARAMETER"
            )
        states = {_STATES[s] for s in raw.split(",")}
    coordinator = await _coordinator(request)
    docs = [transaction_doc(m) for m in coordinator.list_transactions(states)]
    gateway = gateway_of(request)
    if FORWARDED_BY not in request.headers:
        docs += await _other_nodes(gateway, request.path_qs)
    docs.sort(key=lambda d: str(d["transactional_id"]))
    allowed = [
        d for d in docs if may(request, "transactional_id", d["transactional_id"], "describe")
    ]
    return json_response({"transactions": allowed})


async def _other_nodes(gateway: Gateway, path_qs: str) -> list[dict[str, Any]]:
    """Every other live node's own list (asked as forwarded, so it answers only its own)."""
    view = gateway.broker.store.view
    me = gateway.settings.node_id
    urls = [n.url for i, n in view.nodes.items() if i != me and i in view.live]
    headers = {FORWARDED_BY: str(me)}

    async def one(url: str) -> list[dict[str, Any]]:
        answer = await gateway.forwarder.forward(url, "GET", path_qs, headers, b"")
        if answer.status != 200:
            raise RemoteError(answer.status, orjson.loads(answer.body) if answer.body else {})
        return list(orjson.loads(answer.body)["transactions"])

    found = await asyncio.gather(*(one(u) for u in urls), return_exceptions=True)
    out: list[dict[str, Any]] = []
    for result in found:
        if isinstance(result, NodeUnreachable | RemoteError):
            continue  # a node going away: its coordinators move, the next list shows them
        if isinstance(result, BaseException):
            raise result
        out.extend(result)
    return out


def produce_transaction(request: web.Request, query: Mapping[str, str]) -> PartitionsAdder | None:
    """A produce's transaction, if its query names one (`transactional_id` with
    `producer_epoch`): what adds the produce's partitions to it at its coordinator."""
    name = query.get("transactional_id")
    if name is None:
        if "producer_epoch" in query:
            query_int(query, "producer_epoch", None, 0, MAX_EPOCH)  # a bad one says its bounds
            raise bad_request("producer_epoch goes with transactional_id", "INVALID_PARAMETER")
        return None
    if not valid_id(name, MAX_TRANSACTIONAL_ID):
        raise bad_request(
            f"transactional_id must be 1 to {MAX_TRANSACTIONAL_ID} printable characters "
            "without '/'",
            "INVALID_TRANSACTIONAL_ID",
        )
    epoch = query_int(query, "producer_epoch", None, 0, MAX_EPOCH)
    if "Idempotency-Key" in request.headers:
        raise bad_request(
            "a transactional produce takes no Idempotency-Key: its producer epoch fences "
            "retries and zombies",
            "INVALID_PARAMETER",
        )
    require(request, "transactional_id", name, "write")
    gateway = gateway_of(request)
    return PartitionsAdder(
        gateway.transactions,
        gateway.transactions_ready,
        name,
        epoch,
        request.match_info["topic"],
        principal_of(request),
    )
