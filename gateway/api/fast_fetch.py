"""The fetches the fast routes take (a partition's, a group member's), each checked as its
route checks it, and their answers, read as the routes read them; anything else is left to
the Application, which says why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.api.fast_answer import FastAnswer, Headers
from gateway.api.fast_targets import GROUPS_PREFIX, parse_route, plain_query
from gateway.api.fetch import (
    FetchAnswer,
    fetch_position,
    read_from_sibling,
    read_partition,
    start_offset,
)
from gateway.api.groups import member_fetch_query, member_records, valid_group_id
from gateway.auth.quotas import PrincipalUsage
from gateway.formats import codecs
from gateway.http.problem import Problem
from gateway.state import Gateway
from replication.fetch_limits import FetchLimits
from replication.metadata import TopicSpec

_FETCH_PARAMS = frozenset({"offset", "max_records", "max_bytes", "min_bytes", "timeout_ms"})
_MEMBER_FETCH_PARAMS = frozenset({"cursor", "max_records", "max_bytes", "min_bytes", "timeout_ms"})
# Accept headers a fetch takes as they are (anything else is negotiated by the Application).
_FETCH_ACCEPT = {
    None: codecs.JSON,
    "*/*": codecs.JSON,
    codecs.JSON: codecs.JSON,
    codecs.NDJSON: codecs.NDJSON,
    codecs.RECORD_BATCH: codecs.RECORD_BATCH,
}


@dataclass(slots=True)
class FastFetch:
    """A partition fetch the fast routes took, its parameters checked."""

    topic: str
    partition: int
    offset: int | str  # an offset, "earliest" or "latest"
    limits: FetchLimits
    accept: str
    target: str
    ready: FetchAnswer | None = None  # read already, from a sibling worker's files
    cors: Headers = ()
    usage: PrincipalUsage | None = None  # the quotas the answer's bytes are charged to


@dataclass(slots=True)
class FastMemberFetch:
    """A group member's fetch the fast routes took: a member of a group coordinated here."""

    group: str
    member: str
    limits: FetchLimits
    cursor: int  # -1: none given
    target: str
    topics: tuple[str, ...] = ()  # the member's, each read
    cors: Headers = ()
    usage: PrincipalUsage | None = None


class FetchIntake:
    """Takes the fetches the fast routes serve, and answers them."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def fetch(self, target: str, headers: Mapping[str, str]) -> FastFetch | None:
        accept = _FETCH_ACCEPT.get(headers.get("Accept"))
        routed = self._route(target, _FETCH_PARAMS)
        if accept is None or routed is None:
            return None
        topic, partition, params = routed
        gateway = self.gateway
        if partition is None:
            return None
        local = gateway.replicas.local(topic.name, partition)
        led_here = local is not None and local.is_leader
        settings = gateway.settings
        if led_here and gateway.notifier.parked >= settings.max_parked_fetches:
            return None
        try:
            offset, limits = fetch_position(params, settings)
        except Problem:
            return None
        ready = None
        if not led_here:
            ready = read_from_sibling(gateway, topic.name, partition, offset, limits, accept)
            if ready is None:  # led elsewhere, and not readable here: the Application forwards
                return None
        return FastFetch(topic.name, partition, offset, limits, accept, target, ready)

    def member_fetch(self, target: str, headers: Mapping[str, str]) -> FastMemberFetch | None:
        path, _, query = target.partition("?")
        parts = path[len(GROUPS_PREFIX) :].split("/")
        if len(parts) != 4 or parts[1] != "members" or parts[3] != "records" or "%" in path:
            return None
        name, member = parts[0], parts[2]
        if _FETCH_ACCEPT.get(headers.get("Accept")) != codecs.JSON or not valid_group_id(name):
            return None
        gateway = self.gateway
        group = gateway.groups.groups.get(name)
        joined = None if group is None else group.members.get(member)
        if joined is None:  # coordinated elsewhere, or unknown: not plain
            return None
        settings = gateway.settings
        params = plain_query(query, _MEMBER_FETCH_PARAMS)
        if params is None or gateway.notifier.parked >= settings.max_parked_fetches:
            return None
        try:
            limits, cursor = member_fetch_query(params, settings)
        except Problem:
            return None
        return FastMemberFetch(name, member, limits, cursor, target, tuple(joined.topics))

    def _route(
        self, target: str, allowed: frozenset[str]
    ) -> tuple[TopicSpec, int | None, dict[str, str]] | None:
        """The topic (known here), the partition (if the path names one, and it exists) and
        the query (each parameter allowed, once, unescaped) of a records route."""
        parsed = parse_route(target, allowed)
        if parsed is None:
            return None
        name, partition, params = parsed
        topic = self.gateway.broker.store.view.topics.get(name)
        if topic is None or (partition is not None and partition >= topic.partitions):
            return None
        return topic, partition, params

    async def answer_fetch(self, request: FastFetch) -> FastAnswer:
        """Read the partition as the route does (a long-poll waits here as there)."""
        fetched = request.ready
        if fetched is not None:
            return FastAnswer(
                200, fetched.content_type, fetched.body, tuple(fetched.headers.items())
            )
        gateway = self.gateway
        leader = gateway.replicas.leading(request.topic, request.partition)
        if leader is None:
            leader = await gateway.replicas.leader(request.topic, request.partition)
        offset = start_offset(request.offset, leader)
        fetched = await read_partition(
            gateway, request.topic, request.partition, offset, request.limits, request.accept
        )
        return FastAnswer(200, fetched.content_type, fetched.body, tuple(fetched.headers.items()))

    async def answer_member_fetch(self, request: FastMemberFetch) -> FastAnswer:
        """The member's long-poll, as the group route runs it."""
        body = await member_records(
            self.gateway, request.group, request.member, request.limits, request.cursor
        )
        return FastAnswer(200, codecs.JSON, body)
