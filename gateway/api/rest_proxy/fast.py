"""REST Proxy v2 on the fast routes (gateway.api.fast_routes): which v2 produce targets are
plain, and their answers in v2's shape, byte for byte what the route in `produce` answers (the
reference for everything else); and the decoder of a v2 instance's records (`consumers`)."""

from __future__ import annotations

import functools

import orjson

from gateway.api.rest_proxy.errors import V2_JSON, error_body
from gateway.api.rest_proxy.media import ANSWER_TYPES, JSON_V2, accepted
from gateway.api.rest_proxy.produce import offsets_answer
from gateway.formats import codecs, native
from gateway.http.memo import Memo
from gateway.http.problem import Problem
from groups.coordinator import RecordDecoder

PREFIX = "/topics/"
TOPIC_ROUTE = "/topics/{topic}"
PARTITION_ROUTE = "/topics/{topic}/partitions/{partition}"
PRODUCE_TYPE = JSON_V2  # the body type served here: v2's json format, parsed in C
ERROR_TYPE = V2_JSON
_ACCEPTS_KEPT = 64
_answer_types: Memo[str | None, str | None] = Memo(_ACCEPTS_KEPT)


def produce_target(target: str) -> tuple[str, int | None, str, str] | None:
    """A v2 produce target's topic, partition (if the path names one), query and route
    template, with or without a trailing slash; None for any other target, or one with
    escapes (the Application unescapes those)."""
    path, _, query = target.partition("?")
    if "%" in path:
        return None
    parts = path[len(PREFIX) :].split("/")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not parts[0]:
        return None
    if len(parts) == 1:
        return parts[0], None, query, TOPIC_ROUTE
    if len(parts) == 3 and parts[1] == "partitions":
        raw = parts[2]
        if raw.isascii() and raw.isdigit() and len(raw) <= 9:
            return parts[0], int(raw), query, PARTITION_ROUTE
    return None


def answer_type(accept: str | None) -> str | None:
    """The media type of a produce answer for this Accept (as media.answer_type negotiates
    it); None: not acceptable (the Application answers the 406)."""
    known = _answer_types.get(accept, "")
    if known == "":
        known = codecs.negotiate(accepted(accept or ""), ANSWER_TYPES, V2_JSON)
        _answer_types.remember(accept, known)
    return known


def produced_answer(
    results: list[dict[str, int]] | dict[int, tuple[int, int]], owners: bytes, refused: list[int]
) -> bytes:
    """v2's produce answer: each record's partition (from the C build, in request order) and
    offset; written in C when every partition took its records (`produce.offsets_answer`'s
    document, byte for byte)."""
    if isinstance(results, list):
        results = {r["partition"]: (r["base_offset"], r["count"]) for r in results}
    if not refused:
        written = native.v2_offsets(owners, {p: base for p, (base, _) in results.items()})
        if written is not None:
            return written
    chosen: list[int | None] = list(memoryview(owners).cast("I"))
    return orjson.dumps(offsets_answer(chosen, results, refused))


def error_answer(problem: Problem) -> bytes:
    """A failure's body as v2 answers it (gateway.api.rest_proxy.errors.render's)."""
    return orjson.dumps(error_body(problem))


def record_decoder(embedded: str, budget: codecs.ByteBudget) -> RecordDecoder:
    """How a v2 instance's read turns batches into its records (the group fetch's decoder),
    within the read's byte budget."""
    return functools.partial(codecs.rest_proxy_records, embedded, budget=budget)
