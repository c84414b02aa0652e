"""Quotas: the token buckets measured against their configured rates on a simulated clock
(within 10%), the /v1/quotas routes and their bad input, and a gateway refusing (429 with
Retry-After) or delaying what is over a principal's quota."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gateway.auth.quotas import (
    ANONYMOUS,
    DEFAULT_ENTITY,
    Quota,
    QuotaBook,
    QuotaError,
    check_entity,
)
from gateway.auth.throttle import THROTTLE_HEADER
from replication.node_contract import FORWARDED_BY, ON_BEHALF_OF
from tests.api.support import Client, Start, create_topic, end_offsets, metrics, problem, sample
from tests.auth.support import bearer, make_key

DEFAULT = "%3Cdefault%3E"  # <default>, URL-encoded


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def book(quotas: dict[str, Quota], window_s: float = 1.0) -> tuple[QuotaBook, Clock]:
    clock = Clock()
    return QuotaBook(quotas, window_s, clock), clock


def greedy_client(
    quotas: QuotaBook, clock: Clock, principal: str, size: int, seconds: float, kind: str
) -> tuple[int, int]:
    """A client that sends back to back and, when refused, waits exactly the throttle time
    (as `sluice` does with retry_after_ms): what it got served over `seconds`, and refusals."""
    served = refused = 0
    end = clock.now + seconds
    while clock.now < end:
        usage = quotas.usage_of(principal)
        assert usage is not None
        throttle = quotas.check(usage, None if kind == "requests" else kind)  # type: ignore[arg-type]
        if throttle is not None:
            refused += 1
            clock.now += max(throttle.wait_s, 1e-6)
            continue
        if kind != "requests":
            quotas.charge(usage, kind, size)  # type: ignore[arg-type]
        served += size if kind != "requests" else 1
        clock.now += 0.0001  # the request's own time
    return served, refused


@pytest.mark.parametrize(
    ("kind", "quota", "rate", "size"),
    [
        ("produce_bytes", Quota(produce_bytes_per_second=100_000), 100_000, 7_000),
        ("fetch_bytes", Quota(fetch_bytes_per_second=1_000_000), 1_000_000, 65_536),
        ("requests", Quota(requests_per_second=250), 250, 1),
        ("produce_bytes", Quota(produce_bytes_per_second=1_000), 1_000, 20_000),  # > burst
    ],
)
def test_a_greedy_client_gets_its_rate_within_ten_percent(
    kind: str, quota: Quota, rate: float, size: int
) -> None:
    quotas, clock = book({"alice": quota})
    seconds = 600.0  # long enough that one request's debt (here up to 20 s) is a small part
    served, refused = greedy_client(quotas, clock, "alice", size, seconds, kind)
    assert refused > 0
    assert abs(served / seconds - rate) <= 0.1 * rate, served / seconds


def test_the_default_applies_per_rate_to_principals_without_their_own() -> None:
    quotas, _ = book(
        {
            DEFAULT_ENTITY: Quota(produce_bytes_per_second=10, requests_per_second=5.0),
            "alice": Quota(produce_bytes_per_second=1000),
        }
    )
    assert quotas.rates("alice") == {"produce_bytes": 1000, "requests": 5.0}
    assert quotas.rates("bob") == {"produce_bytes": 10, "requests": 5.0}
    alone, _ = book({"alice": Quota(requests_per_second=1.0)})
    assert alone.usage_of("bob") is None  # nothing limits bob: nothing is counted


def test_a_debt_outlives_a_quota_change_and_is_paid_at_the_new_rate() -> None:
    quotas, clock = book({"alice": Quota(produce_bytes_per_second=100)})
    usage = quotas.usage_of("alice")
    assert usage is not None and quotas.check(usage, "produce_bytes") is None
    quotas.charge(usage, "produce_bytes", 1100)  # 100 in the bucket: 1000 owed
    throttle = quotas.check(usage, "produce_bytes")
    assert throttle is not None and throttle.kind == "produce_bytes"
    assert math.isclose(throttle.wait_s, 10.0)
    quotas.configure({"alice": Quota(produce_bytes_per_second=1000)})
    throttle = quotas.check(usage, "produce_bytes")
    assert throttle is not None and math.isclose(throttle.wait_s, 1.0)
    clock.now += 1.0
    assert quotas.check(usage, "produce_bytes") is None
    quotas.configure({})
    assert quotas.usage_of("alice") is None and not quotas.active


def test_the_worst_quota_names_the_wait() -> None:
    quotas, _ = book({"alice": Quota(produce_bytes_per_second=10, requests_per_second=1.0)})
    usage = quotas.usage_of("alice")
    assert usage is not None and quotas.check(usage, "produce_bytes") is None
    quotas.charge(usage, "produce_bytes", 60)  # 50 owed: 5 s; one request owed: under 1 s
    throttle = quotas.check(usage, "produce_bytes")
    assert throttle is not None and throttle.kind == "produce_bytes"
    assert math.isclose(throttle.wait_s, 5.0)


def test_idle_principals_are_forgotten_past_the_bound() -> None:
    quotas = QuotaBook({DEFAULT_ENTITY: Quota(requests_per_second=1.0)}, 1.0, Clock(), 3)
    for name in ("a", "b", "c", "d"):
        assert quotas.usage_of(name) is not None
    assert [name for name, _ in quotas.tracked()] == ["b", "c", "d"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"produce_bytes_per_second": 0}, "above 0"),
        ({"produce_bytes_per_second": -5}, "above 0"),
        ({"fetch_bytes_per_second": 1.5}, "whole number"),
        ({"requests_per_second": "10"}, "a number or null"),
        ({"requests_per_second": True}, "a number or null"),
        ({"requests_per_second": float("inf")}, "at most"),
        ({"requests_per_second": float("nan")}, "above 0"),
        ({"produce_bytes_per_second": 10**16}, "at most"),
        ({"bytes": 10}, "unknown field"),
    ],
)
def test_malformed_quotas_name_the_field(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(QuotaError, match=message):
        Quota.from_dict(doc)


def test_entity_names_are_bounded() -> None:
    assert check_entity(DEFAULT_ENTITY) == DEFAULT_ENTITY
    for bad in ("", "x" * 256, "tab\there"):
        with pytest.raises(QuotaError):
            check_entity(bad)


# The routes and the middleware, on an in-process gateway.


async def test_quotas_are_set_described_listed_and_removed(start: Start) -> None:
    client = await start()
    put = await client.put(f"/v1/quotas/{DEFAULT}", json={"requests_per_second": 1000})
    assert put.status == 200
    assert await put.json() == {
        "principal": DEFAULT_ENTITY,
        "produce_bytes_per_second": None,
        "fetch_bytes_per_second": None,
        "requests_per_second": 1000.0,
    }
    put = await client.put("/v1/quotas/alice", json={"produce_bytes_per_second": 2048.0})
    assert (await put.json())["produce_bytes_per_second"] == 2048
    described = await (await client.get("/v1/quotas/alice")).json()
    assert described["quota"]["produce_bytes_per_second"] == 2048
    assert described["effective"] == {
        "produce_bytes_per_second": 2048,
        "fetch_bytes_per_second": None,
        "requests_per_second": 1000.0,
    }
    nobody = await (await client.get("/v1/quotas/nobody")).json()
    assert nobody["quota"] is None and nobody["effective"]["requests_per_second"] == 1000.0
    listed = await (await client.get("/v1/quotas")).json()
    assert [q["principal"] for q in listed["quotas"]] == [DEFAULT_ENTITY, "alice"]
    assert (await client.delete("/v1/quotas/alice")).status == 204
    await problem(await client.delete("/v1/quotas/alice"), 404, "QUOTA_NOT_FOUND")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "INVALID_QUOTA"),
        ({"produce_bytes_per_second": None}, "INVALID_QUOTA"),
        ({"produce_bytes_per_second": -1}, "INVALID_QUOTA"),
        ({"requests_per_second": "many"}, "INVALID_QUOTA"),
        ({"rate": 5}, "INVALID_QUOTA"),
        ([1, 2], "INVALID_JSON"),
    ],
)
async def test_bad_quotas_are_refused(start: Start, body: Any, code: str) -> None:
    client = await start()
    await problem(await client.put("/v1/quotas/alice", json=body), 400, code)
    assert (await (await client.get("/v1/quotas")).json())["quotas"] == []


async def test_malformed_json_and_long_names_are_refused(start: Start) -> None:
    client = await start()
    answer = await client.put(
        "/v1/quotas/alice", data=b"{", headers={"Content-Type": "application/json"}
    )
    assert answer.status == 400
    await problem(
        await client.put(f"/v1/quotas/{'x' * 256}", json={"requests_per_second": 1}),
        400,
        "INVALID_PARAMETER",
    )


async def test_quotas_survive_a_restart(start: Start) -> None:
    client = await start()
    await client.put("/v1/quotas/alice", json={"fetch_bytes_per_second": 4096})
    await client.close()
    client = await start()
    described = await (await client.get("/v1/quotas/alice")).json()
    assert described["quota"]["fetch_bytes_per_second"] == 4096


async def over_requests_quota(client: Client, headers: dict[str, str] | None = None) -> None:
    """Spend a tiny request quota: the first request is served, the next refused."""
    assert (await client.get("/v1/topics", headers=headers)).status == 200
    refused = await client.get("/v1/topics", headers=headers)
    body = await problem(refused, 429, "QUOTA_EXCEEDED")
    assert body["quota"] == "requests_per_second" and body["retry_after_ms"] > 90_000
    assert int(refused.headers["Retry-After"]) == math.ceil(body["retry_after_ms"] / 1000)


async def test_over_the_request_rate_answers_429_with_retry_after(start: Start) -> None:
    client = await start()
    await client.put(f"/v1/quotas/{ANONYMOUS}", json={"requests_per_second": 0.01})
    await over_requests_quota(client)
    for probe in ("/healthz", "/readyz", "/metrics"):  # probes and scrapes: never throttled
        assert (await client.get(probe)).status == 200
    # the quota routes themselves are throttled too, so the operator removes it offline
    await problem(await client.delete(f"/v1/quotas/{ANONYMOUS}"), 429, "QUOTA_EXCEEDED")
    seen = await metrics(client)
    principal = {"principal": ANONYMOUS}
    assert sample(seen, "sluice_principal_requests_total", **principal) == 1
    assert (
        sample(
            seen,
            "sluice_quota_throttled_requests_total",
            quota="requests_per_second",
            **principal,
        )
        == 2
    )
    throttled_s = sample(
        seen, "sluice_quota_throttle_seconds_total", quota="requests_per_second", **principal
    )
    assert throttled_s is not None and throttled_s > 180


async def test_produce_bytes_are_charged_and_refused_with_nothing_appended(
    start: Start,
) -> None:
    client = await start()
    await create_topic(client, "t")
    await client.put(f"/v1/quotas/{DEFAULT}", json={"produce_bytes_per_second": 1000})
    big = {"records": [{"value": "x" * 5000}]}
    assert (await client.post("/v1/topics/t/records", json=big)).status == 200
    refused = await client.post("/v1/topics/t/records", json={"records": [{"value": 1}]})
    body = await problem(refused, 429, "QUOTA_EXCEEDED")
    assert body["quota"] == "produce_bytes_per_second"
    assert 3500 < body["retry_after_ms"] <= 4100  # ~4,000 bytes owed at 1,000 bytes/s
    assert await end_offsets(client, "t") == [1]
    seen = await metrics(client)
    produced = sample(seen, "sluice_principal_produce_bytes_total", principal=ANONYMOUS)
    assert produced is not None and produced > 5000


async def test_fetch_bytes_are_charged_by_the_answer(start: Start) -> None:
    client = await start()
    await create_topic(client, "t")
    for _ in range(3):
        assert (await client.post("/v1/topics/t/records", json={"records": [
            {"value": "y" * 4000}]})).status == 200  # fmt: skip
    await client.put(f"/v1/quotas/{DEFAULT}", json={"fetch_bytes_per_second": 2000})
    records = "/v1/topics/t/partitions/0/records?offset=0&timeout_ms=0"
    assert (await client.get(records)).status == 200
    body = await problem(await client.get(records), 429, "QUOTA_EXCEEDED")
    assert body["quota"] == "fetch_bytes_per_second" and body["retry_after_ms"] > 4000
    # producing is not limited by the fetch quota
    assert (await client.post("/v1/topics/t/records", json={"records": [{"value": 1}]})).ok


async def test_delay_mode_answers_after_the_throttle_time(start: Start) -> None:
    client = await start(quota_mode="delay", quota_window_s=0.05)
    await client.put(f"/v1/quotas/{ANONYMOUS}", json={"requests_per_second": 20})
    answers = [await client.get("/v1/topics") for _ in range(4)]
    assert all(a.status == 200 for a in answers)
    delayed = [int(a.headers[THROTTLE_HEADER]) for a in answers if THROTTLE_HEADER in a.headers]
    assert delayed and all(0 < ms <= 100 for ms in delayed)
    seen = await metrics(client)
    labels = {"principal": ANONYMOUS, "quota": "requests_per_second"}
    assert sample(seen, "sluice_quota_throttled_requests_total", **labels) == len(delayed)
    waited = sample(seen, "sluice_quota_throttle_seconds_total", **labels)
    assert waited is not None and abs(waited * 1000 - sum(delayed)) <= len(delayed)


async def test_delay_mode_refuses_a_throttle_past_its_maximum(start: Start) -> None:
    client = await start(quota_mode="delay", quota_max_delay_s=1.0)
    await client.put(f"/v1/quotas/{ANONYMOUS}", json={"requests_per_second": 0.01})
    await over_requests_quota(client)


async def test_each_principal_has_its_own_buckets(start: Start, data_dir: Path) -> None:
    keys = {name: make_key(data_dir, name) for name in ("admin", "alice", "bob", "carol")}
    client = await start(
        auth=True, super_users=("admin", "alice", "bob", "carol"), auth_public_metrics=True
    )
    admin = bearer(keys["admin"])
    await client.put("/v1/quotas/alice", json={"requests_per_second": 0.01}, headers=admin)
    await client.put(f"/v1/quotas/{DEFAULT}", json={"requests_per_second": 0.01},
                     headers=admin)  # fmt: skip
    await client.put("/v1/quotas/bob", json={"produce_bytes_per_second": 10**9}, headers=admin)
    await over_requests_quota(client, bearer(keys["alice"]))
    await over_requests_quota(client, bearer(keys["carol"]))  # the default's, her own
    # bob's own quota has no request rate: the default's applies to him
    assert (await client.get("/v1/topics", headers=bearer(keys["bob"]))).status == 200
    await problem(await client.get("/v1/topics", headers=bearer(keys["bob"])), 429,
                  "QUOTA_EXCEEDED")  # fmt: skip
    seen = await metrics(client)
    for name in ("alice", "bob", "carol"):
        assert sample(seen, "sluice_principal_requests_total", principal=name) == 1


async def test_a_forwarded_request_is_charged_only_where_it_came_in(
    start: Start, data_dir: Path, tmp_path: Path
) -> None:
    internal = tmp_path / "internal.key"
    internal.write_text("quota-internal-key-0123456789abcdef")
    key = make_key(data_dir, "alice")
    client = await start(auth=True, super_users=("alice",), internal_key_file=internal)
    await client.put("/v1/quotas/alice", json={"requests_per_second": 0.01}, headers=bearer(key))
    from_node = {**bearer(internal.read_text()), FORWARDED_BY: "7", ON_BEHALF_OF: "alice"}
    for _ in range(3):
        assert (await client.get("/v1/topics", headers=from_node)).status == 200
    # a client claiming to be forwarded, with its own key, is charged all the same
    spoofed = {**bearer(key), FORWARDED_BY: "7"}
    assert (await client.get("/v1/topics", headers=spoofed)).status == 200
    await problem(await client.get("/v1/topics", headers=spoofed), 429, "QUOTA_EXCEEDED")
