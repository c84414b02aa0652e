"""Kafka's client quotas, sans-IO: per principal (and a `<default>` entity) a produce byte
rate, a fetch byte rate and a request rate, each kept by a token bucket that may run into
debt. A request is served while its principal's buckets are out of debt; what it costs is
taken afterwards (bytes are known only then), so the long-run rate is the quota's, and the
time to pay a debt back is the throttle time a refusal's Retry-After carries."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

QuotaKind = Literal["produce_bytes", "fetch_bytes", "requests"]
KINDS: tuple[QuotaKind, ...] = ("produce_bytes", "fetch_bytes", "requests")
FIELD_OF: dict[QuotaKind, str] = {
    "produce_bytes": "produce_bytes_per_second",
    "fetch_bytes": "fetch_bytes_per_second",
    "requests": "requests_per_second",
}
DEFAULT_ENTITY = "<default>"  # Kafka's name for the quota of every principal without its own
ANONYMOUS = "ANONYMOUS"  # the principal of every request while auth is off (Kafka's name)
MAX_NAME = 255
MAX_RATE = 10**15
# Past this many principals with bucket state, the longest idle one is forgotten (its bucket
# full again), so principals named by JWTs cannot grow the table without bound.
MAX_TRACKED = 10_000


class QuotaError(ValueError):
    """A quota that is not well formed; the message names the field."""


@dataclass(frozen=True)
class Quota:
    """The rates one entity is held to; None: not limited by this one (or, for a principal,
    the `<default>` entity's value applies)."""

    produce_bytes_per_second: int | None = None
    fetch_bytes_per_second: int | None = None
    requests_per_second: float | None = None

    def rate(self, kind: QuotaKind) -> float | None:
        value: float | None = getattr(self, FIELD_OF[kind])
        return value

    def to_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def empty(self) -> bool:
        return all(value is None for value in self.to_dict().values())

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Quota:
        """Validate a quota's JSON form: any of the three rates, each a positive number or
        null; byte rates are whole numbers."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(doc) - set(names))
        if unknown:
            raise QuotaError(f"unknown field(s): {', '.join(unknown)}; expected {', '.join(names)}")
        values: dict[str, Any] = {}
        for name in names:
            value = doc.get(name)
            if value is None:
                values[name] = None
                continue
            whole = name != "requests_per_second"
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise QuotaError(f"{name} must be a number or null")
            if whole and (isinstance(value, float) and not value.is_integer()):
                raise QuotaError(f"{name} must be a whole number of bytes")
            if not (0 < value <= MAX_RATE) or not math.isfinite(value):
                raise QuotaError(f"{name} must be above 0 and at most {MAX_RATE}")
            values[name] = int(value) if whole else float(value)
        return cls(**values)


def check_entity(name: str) -> str:
    """A principal's name, or `<default>`, as quotas are stored under it."""
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise QuotaError(f"principal must be 1 to {MAX_NAME} printable characters")
    return name


@dataclass
class Bucket:
    """A token bucket of `rate` per second holding at most `rate * window_s`, which may go
    below zero: the debt is what was served beyond the rate."""

    rate: float
    capacity: float
    tokens: float
    updated: float

    def refill(self, now: float) -> float:
        if now > self.updated:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
            self.updated = now
        return self.tokens

    def wait_s(self) -> float:
        """How long until the debt is paid back (0 when there is none)."""
        return -self.tokens / self.rate if self.tokens < 0 else 0.0


@dataclass
class PrincipalUsage:
    """One principal's buckets and counters (the counters are what /metrics shows)."""

    buckets: dict[QuotaKind, Bucket]
    requests: int = 0
    produce_bytes: int = 0
    fetch_bytes: int = 0
    throttled: dict[QuotaKind, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    throttle_s: dict[QuotaKind, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))

    def note_throttled(self, kind: QuotaKind, seconds: float) -> None:
        self.throttled[kind] += 1
        self.throttle_s[kind] += seconds


@dataclass(frozen=True)
class Throttle:
    """A refusal: which quota, and how long until the principal is within it again."""

    kind: QuotaKind
    wait_s: float


class QuotaBook:
    """The configured quotas and every limited principal's usage of them."""

    def __init__(
        self,
        quotas: Mapping[str, Quota],
        window_s: float,
        clock: Callable[[], float],
        max_tracked: int = MAX_TRACKED,
        share: float = 1.0,
    ) -> None:
        self.window_s = window_s
        self.share = share  # of each rate, this process's: 1/N for each of N workers
        self.clock = clock
        self.max_tracked = max_tracked
        self.usage: OrderedDict[str, PrincipalUsage] = OrderedDict()
        self.quotas: Mapping[str, Quota] = {}
        self.configure(quotas)

    def configure(self, quotas: Mapping[str, Quota]) -> None:
        """New quotas: each tracked principal's buckets take the new rates, keeping their
        tokens (a debt already run up stays owed)."""
        self.quotas = dict(quotas)
        now = self.clock()
        for principal, usage in list(self.usage.items()):
            rates = self._own_share(principal)
            if not rates:
                del self.usage[principal]
                continue
            buckets: dict[QuotaKind, Bucket] = {}
            for kind, rate in rates.items():
                held = usage.buckets.get(kind)
                tokens = rate * self.window_s if held is None else held.refill(now)
                capacity = rate * self.window_s
                buckets[kind] = Bucket(rate, capacity, min(tokens, capacity), now)
            usage.buckets = buckets

    @property
    def active(self) -> bool:
        """Whether any quota is configured at all (if not, nothing is counted)."""
        return bool(self.quotas)

    def rates(self, principal: str) -> dict[QuotaKind, float]:
        """The principal's rates: its own, else the `<default>` entity's, per kind."""
        own = self.quotas.get(principal)
        default = self.quotas.get(DEFAULT_ENTITY)
        rates: dict[QuotaKind, float] = {}
        for kind in KINDS:
            rate = own.rate(kind) if own is not None else None
            if rate is None and default is not None:
                rate = default.rate(kind)
            if rate is not None:
                rates[kind] = rate
        return rates

    def _own_share(self, principal: str) -> dict[QuotaKind, float]:
        return {kind: rate * self.share for kind, rate in self.rates(principal).items()}

    def usage_of(self, principal: str) -> PrincipalUsage | None:
        """The principal's usage (None when no quota limits it)."""
        usage = self.usage.get(principal)
        if usage is not None:
            self.usage.move_to_end(principal)
            return usage
        rates = self._own_share(principal)
        if not rates:
            return None
        now = self.clock()
        full = {kind: rate * self.window_s for kind, rate in rates.items()}
        buckets = {kind: Bucket(rates[kind], size, size, now) for kind, size in full.items()}
        usage = self.usage[principal] = PrincipalUsage(buckets)
        if len(self.usage) > self.max_tracked:
            self.usage.popitem(last=False)
        return usage

    def check(self, usage: PrincipalUsage, charged: QuotaKind | None = None) -> Throttle | None:
        """None if the principal may be served a request now, else the quota it is over and
        for how long: its request rate, and the byte rate the request is `charged` to (a
        consumer over its fetch rate may still produce). A request served takes one token."""
        now = self.clock()
        worst: Throttle | None = None
        for kind in ("requests", charged):
            bucket = None if kind is None else usage.buckets.get(kind)
            if bucket is not None and kind is not None and bucket.refill(now) < 0:
                wait = bucket.wait_s()
                if worst is None or wait > worst.wait_s:
                    worst = Throttle(kind, wait)
        if worst is None:
            usage.requests += 1
            requests = usage.buckets.get("requests")
            if requests is not None:
                requests.tokens -= 1
        return worst

    def charge(self, usage: PrincipalUsage, kind: QuotaKind, size: int) -> None:
        """Count `size` bytes produced or fetched against the principal's bucket."""
        if kind == "produce_bytes":
            usage.produce_bytes += size
        elif kind == "fetch_bytes":
            usage.fetch_bytes += size
        bucket = usage.buckets.get(kind)
        if bucket is not None:
            bucket.refill(self.clock())
            bucket.tokens -= size

    def tracked(self) -> Iterator[tuple[str, PrincipalUsage]]:
        yield from list(self.usage.items())
