"""What the fast routes read of a request's target: the routes they serve and a target's
plain reading (no escapes, each parameter allowed and named once); anything else is the
Application's."""

from __future__ import annotations

TOPIC_ROUTE = "/v1/topics/{topic}/records"
PARTITION_ROUTE = "/v1/topics/{topic}/partitions/{partition}/records"
MEMBER_ROUTE = "/v1/groups/{group}/members/{member}/records"
TOPICS_PREFIX = "/v1/topics/"
GROUPS_PREFIX = "/v1/groups/"


def parse_route(
    target: str, allowed: frozenset[str]
) -> tuple[str, int | None, dict[str, str]] | None:
    """A records route's topic name, partition (if the path names one) and query (each
    parameter allowed, once, unescaped); None for any other target."""
    path, _, query = target.partition("?")
    parts = path[len(TOPICS_PREFIX) :].split("/")
    partition: int | None = None
    if len(parts) == 4 and parts[1] == "partitions" and parts[3] == "records":
        partition = partition_number(parts[2])
        if partition is None:
            return None
    elif len(parts) != 2 or parts[1] != "records":
        return None
    params = plain_query(query, allowed)
    return None if params is None else (parts[0], partition, params)


def partition_number(raw: str) -> int | None:
    """A path's partition number, if it is one (digits only, as the routes take it)."""
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else None


def plain_query(query: str, allowed: frozenset[str]) -> dict[str, str] | None:
    """The query's parameters, if each is plain (no escapes, named once, allowed)."""
    params: dict[str, str] = {}
    if not query:
        return params
    if "%" in query or "+" in query:
        return None
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name not in allowed or name in params:
            return None
        params[name] = value
    return params
