"""The share-group requests the fast routes take (a member's acquire and acknowledge, of a
group coordinated here), each checked as its route checks it, and their answers, made as the
routes make them; anything else is left to the Application, which says why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.api.fast_answer import FastAnswer, Headers
from gateway.api.fast_targets import plain_query
from gateway.api.groups import valid_group_id
from gateway.api.share_groups import (
    acknowledged,
    acknowledgements_of,
    acquire_query,
    acquired,
    json_items,
    ndjson_items,
)
from gateway.auth.quotas import PrincipalUsage
from gateway.formats import codecs
from gateway.http.problem import Problem
from gateway.state import Gateway
from groups.share.coordinator import Ack

SHARE_PREFIX = "/v1/share-groups/"
ACQUIRE_ROUTE = "/v1/share-groups/{group}/members/{member}/acquire"
ACKNOWLEDGE_ROUTE = "/v1/share-groups/{group}/members/{member}/acknowledge"
_ACQUIRE_PARAMS = frozenset({"max_records", "max_bytes", "timeout_ms"})
# Accept headers an acquire takes as they are (anything else is negotiated by the Application).
_ACQUIRE_ACCEPT = {
    None: codecs.JSON,
    "*/*": codecs.JSON,
    codecs.JSON: codecs.JSON,
    codecs.NDJSON: codecs.NDJSON,
}


@dataclass(slots=True)
class FastShareAcquire:
    """A share-group member's acquire the fast routes took, its parameters checked."""

    group: str
    member: str
    max_records: int
    max_bytes: int
    timeout_ms: int
    accept: str
    target: str
    topics: tuple[str, ...] = ()  # the member's, each read
    cors: Headers = ()
    usage: PrincipalUsage | None = None


@dataclass(slots=True)
class FastShareAck:
    """A share-group member's acknowledgements the fast routes took, each checked."""

    group: str
    member: str
    acks: list[Ack]
    target: str
    cors: Headers = ()
    usage: PrincipalUsage | None = None


FastShare = FastShareAcquire | FastShareAck


class ShareIntake:
    """Takes the share-group requests the fast routes serve, and answers them."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    def take(self, target: str, headers: Mapping[str, str], body: bytes) -> FastShare | None:
        """A POST to `target`, if it is a member's acquire or acknowledge of a group
        coordinated here that its route would serve."""
        path, _, query = target.partition("?")
        parts = path[len(SHARE_PREFIX) :].split("/")
        if len(parts) != 4 or parts[1] != "members" or "%" in path:
            return None
        name, member, action = parts[0], parts[2], parts[3]
        if not valid_group_id(name):
            return None
        group = self.gateway.share_groups.groups.get(name)
        joined = None if group is None else group.members.get(member)
        if joined is None:  # coordinated elsewhere, or unknown: not plain
            return None
        if action == "acquire":
            return self._acquire(name, member, target, query, headers, body, joined.topics)
        if action == "acknowledge" and not query:
            return self._acknowledge(name, member, target, headers, body)
        return None

    def _acquire(
        self,
        name: str,
        member: str,
        target: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        topics: tuple[str, ...],
    ) -> FastShareAcquire | None:
        accept = _ACQUIRE_ACCEPT.get(headers.get("Accept"))
        params = plain_query(query, _ACQUIRE_PARAMS)
        if accept is None or params is None or body.strip():
            return None
        settings = self.gateway.settings
        try:
            max_records, max_bytes, timeout_ms = acquire_query(params, settings)
        except Problem:
            return None
        if timeout_ms and self.gateway.notifier.parked >= settings.max_parked_fetches:
            return None  # the Application answers the 503
        return FastShareAcquire(
            name, member, max_records, max_bytes, timeout_ms, accept, target, tuple(topics)
        )

    def _acknowledge(
        self, name: str, member: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> FastShareAck | None:
        content_type = headers.get("Content-Type")
        if len(body) > self.gateway.settings.max_request_bytes:
            return None
        try:
            if content_type == codecs.JSON:
                doc: Any = orjson.loads(body)
                if not isinstance(doc, dict):
                    return None
                items = json_items(doc)
            elif content_type == codecs.NDJSON:
                items = ndjson_items(body)
            else:
                return None
            acks = acknowledgements_of(items)
        except (Problem, orjson.JSONDecodeError):
            return None
        return FastShareAck(name, member, acks, target)

    async def answer(self, request: FastShare) -> FastAnswer:
        """The acquire or the acknowledgements, as the route runs them."""
        gateway = self.gateway
        if isinstance(request, FastShareAcquire):
            body = await acquired(
                gateway,
                request.group,
                request.member,
                request.max_records,
                request.max_bytes,
                request.timeout_ms,
                request.accept,
            )
            return FastAnswer(200, request.accept, body)
        body = await acknowledged(gateway, request.group, request.member, request.acks)
        return FastAnswer(200, codecs.JSON, body)
