"""`sluice serve`'s configuration: one definition per setting (name, type, default, help),
reachable as a flag, an environment variable (SLUICE_...) and a key of a TOML file
(--config FILE). Flags beat the environment, which beats the file, which beats the default;
`sluice config show` says where each value came from."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gateway.settings import Settings
from replication.metadata import RACK_NAME

Parse = Callable[[str], Any]


def positive(raw: str) -> int:
    """A whole number of at least 1."""
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative(raw: str) -> int:
    """A whole number of at least 0."""
    value = int(raw)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    return len(os.sched_getaffinity(0))


def worker_count(raw: str) -> int:
    """`auto` (one per usable CPU) or 1 to four per usable CPU."""
    cpus = usable_cpus()
    if raw.strip().lower() == "auto":
        return cpus
    value = positive(raw)
    if value > 4 * cpus:
        raise argparse.ArgumentTypeError(
            f"at most {4 * cpus} (4 per CPU this process may use: {cpus}), got {value}"
        )
    return value


def positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {value}")
    return value


def boolean(raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {raw!r}")


def etcd_endpoints(raw: str) -> tuple[str, ...]:
    """`etcd://host:port[,host:port...]` -> the endpoints' http URLs."""
    scheme, sep, rest = raw.partition("://")
    if not sep or scheme != "etcd" or not rest:
        raise argparse.ArgumentTypeError(f"expected etcd://HOST:PORT[,HOST:PORT...], got {raw!r}")
    endpoints = []
    for part in rest.split(","):
        host, colon, port = part.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(f"{part!r} is not HOST:PORT")
        endpoints.append(f"http://{host}:{port}")
    return tuple(endpoints)


def _show_cluster(value: tuple[str, ...]) -> str:
    return "etcd://" + ",".join(url.removeprefix("http://") for url in value) if value else ""


_DEFAULT_PORTS = {"http": 80, "https": 443}
_TOKEN = re.compile(r"[!#$%&'+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 tchar, less "*"


def origins(raw: str) -> tuple[str, ...]:
    """`*` or `scheme://host[:port]` origins, comma-separated."""
    parts = filter(None, (p.strip() for p in raw.split(",")))
    return tuple(part if part == "*" else _origin(part) for part in parts)


def _origin(text: str) -> str:
    """An origin as browsers send it: lower case, without the scheme's default port."""
    url = urlsplit(text.removesuffix("/"))
    try:
        port = url.port
    except ValueError:  # not a number, or out of range
        port = -1
    extra = url.path or url.query or url.fragment or url.username is not None
    if not url.scheme or not url.hostname or extra or port == -1:
        raise argparse.ArgumentTypeError(f"{text!r} is not * or SCHEME://HOST[:PORT]")
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    suffix = "" if port in (None, _DEFAULT_PORTS.get(url.scheme)) else f":{port}"
    return f"{url.scheme}://{host}{suffix}"


def tokens(raw: str) -> tuple[str, ...]:
    """HTTP method or header names, comma-separated (no `*`: list them)."""
    found = tuple(filter(None, (p.strip() for p in raw.split(","))))
    for token in found:
        if not _TOKEN.fullmatch(token):
            raise argparse.ArgumentTypeError(f"{token!r} is not a method or header name")
    return found


def methods(raw: str) -> tuple[str, ...]:
    return tuple(m.upper() for m in tokens(raw))


def _show_list(value: tuple[str, ...]) -> str:
    return ",".join(value)


def principals(raw: str) -> tuple[str, ...]:
    """Principal names, comma-separated."""
    return tuple(filter(None, (p.strip() for p in raw.split(","))))


def hosts(raw: str) -> tuple[str, ...]:
    """Host names or addresses, comma-separated, compared lower-case."""
    return tuple(filter(None, (h.strip().lower() for h in raw.split(","))))


def rack_name(raw: str) -> str:
    """A rack, zone or data centre name: 1 to 64 printable ASCII characters, no spaces."""
    if not RACK_NAME.fullmatch(raw):
        raise argparse.ArgumentTypeError(
            f"a rack name is 1 to 64 printable ASCII characters without spaces, got {raw!r}"
        )
    return raw


def non_negative_float(raw: str) -> float:
    value = float(raw)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def quota_mode(raw: str) -> str:
    if raw not in ("reject", "delay"):
        raise argparse.ArgumentTypeError(f"expected reject or delay, got {raw!r}")
    return raw


def balance_mode(raw: str) -> str:
    if raw not in ("auto", "off"):
        raise argparse.ArgumentTypeError(f"expected auto or off, got {raw!r}")
    return raw


def certificate_principal(raw: str) -> str:
    if raw not in ("cn", "san"):
        raise argparse.ArgumentTypeError(f"expected cn or san, got {raw!r}")
    return raw


@dataclass(frozen=True)
class Option:
    """One setting of `sluice serve`."""

    flag: str  # without the leading dashes
    field: str  # the Settings attribute
    group: str
    help: str
    parse: Parse = str
    metavar: str | None = None
    kafka: str | None = None  # Kafka's name for the same setting, also accepted in the file
    show: Callable[[Any], str] = str
    repeatable: bool = False  # the flag may be given again to add values (a tuple setting)

    @property
    def env(self) -> str:
        return "SLUICE_" + self.flag.upper().replace("-", "_")

    @property
    def default(self) -> Any:
        return getattr(Settings(), self.field)

    @property
    def is_switch(self) -> bool:
        return self.parse is boolean


def _path(raw: str) -> Path:
    return Path(raw)


OPTIONS: tuple[Option, ...] = (
    # -- where it listens and keeps its data
    Option("data-dir", "data_dir", "node", "where the logs live (one process per directory)",
           _path, "DIR", "log.dirs"),
    Option("file-cache-size", "file_cache_size", "node", "files of closed segments kept open at "
           "most, whatever their number (unset: an eighth of the descriptor limit, at most "
           "1024)", positive, "N"),
    Option("host", "host", "node", "listening address", metavar="HOST"),
    Option("port", "port", "node", "listening port (0 picks a free one)", non_negative, "PORT"),
    Option("schema-registry-port", "schema_registry_port", "node", "also serve the schema "
           "registry at the root path of this port, for clients that need it there (it is "
           "always served under /schema-registry on --port); off by default", non_negative,
           "PORT"),
    Option("listen-backlog", "listen_backlog", "node", "connections the kernel completes and "
           "queues for the gateway to accept (capped by net.core.somaxconn); a burst of new "
           "connections past it waits for the client's retries or is lost", positive, "N",
           "socket.listen.backlog.size"),
    Option("workers", "workers", "node", "processes serving the port, for more cores: auto (one "
           "per CPU this process may use) or 1 to 4 per CPU; above 1 they run as a cluster "
           "over an embedded etcd (etcd must be installed)", worker_count, "N|auto"),
    Option("tls-cert", "tls_cert", "node", "serve TLS (HTTP/1.1 and h2 via ALPN) with this "
           "certificate chain", _path, "FILE"),
    Option("tls-key", "tls_key", "node", "the TLS private key", _path, "FILE"),
    Option("no-console", "no_console", "node", "do not serve the web console at /console (the "
           "/v1 API it calls stays)", boolean),
    # -- requests
    Option("max-request-bytes", "max_request_bytes", "requests", "largest request body",
           positive, "N", "socket.request.max.bytes"),
    Option("max-inflight-request-bytes", "max_inflight_request_bytes", "requests", "the "
           "bodies of all requests being served together (chunked ones count as "
           "--max-request-bytes); past it, 503 SERVER_BUSY with Retry-After", positive, "N",
           "queued.max.request.bytes"),
    Option("body-read-timeout", "body_read_timeout_s", "requests", "seconds a client may take "
           "to send its body before 408", positive_float, "S"),
    Option("auto-create-topics", "auto_create_topics", "requests", "create an unknown topic on "
           "its first produce", boolean, kafka="auto.create.topics.enable"),
    Option("default-partitions", "default_partitions", "requests", "partitions of an "
           "auto-created topic", positive, "N", "num.partitions"),
    Option("max-fetch-bytes", "max_fetch_bytes", "requests", "largest max_bytes a fetch may ask",
           positive, "N", "fetch.max.bytes"),
    Option("default-fetch-bytes", "default_fetch_bytes", "requests", "a fetch's max_bytes when "
           "it gives none", positive, "N", "max.partition.fetch.bytes"),
    Option("default-fetch-records", "default_fetch_records", "requests", "a fetch's "
           "max_records when it gives none", positive, "N", "max.poll.records"),
    Option("max-fetch-records", "max_fetch_records", "requests", "largest max_records a fetch "
           "may ask", positive, "N"),
    Option("default-fetch-wait-ms", "default_fetch_wait_ms", "requests", "a fetch's timeout_ms "
           "when it gives none", non_negative, "MS", "fetch.max.wait.ms"),
    Option("max-wait-ms", "max_wait_ms", "requests", "longest timeout_ms a fetch or produce may "
           "ask", positive, "MS"),
    Option("default-produce-timeout-ms", "default_produce_timeout_ms", "requests", "how long "
           "acks=all waits when the produce gives no timeout_ms", positive, "MS",
           "request.timeout.ms"),
    Option("max-parked-fetches", "max_parked_fetches", "requests", "long-polls parked at once; "
           "past it, fetches answer 503 with Retry-After", positive, "N"),
    Option("idempotency-window", "idempotency_window_s", "requests", "seconds an "
           "Idempotency-Key is remembered", positive_float, "S"),
    Option("idempotency-max-entries", "idempotency_max_entries", "requests", "keys remembered "
           "per partition", positive, "N"),
    Option("max-connection-inflight-bytes", "max_connection_inflight_bytes", "requests", "the "
           "bodies being served on one connection together (its HTTP/2 streams; counted as "
           "for --max-inflight-request-bytes); past it, 503 CONNECTION_BUSY with Retry-After",
           positive, "N"),
    Option("admission-max-inflight", "admission_max_inflight", "requests", "produces in "
           "progress at once per worker; past it, 503 SERVER_OVERLOADED with Retry-After",
           positive, "N"),
    Option("admission-target-delay-ms", "admission_target_delay_ms", "requests", "the "
           "queueing delay to hold (the event loop's, plus the produces' wait behind others on "
           "their connections): once it has stood above this for 100 ms, a share of the "
           "produces (at most nine in ten) is answered 503 SERVER_OVERLOADED at once, the share "
           "following target / delay until the delay is back below; 0 turns this off",
           non_negative, "MS"),
    Option("admission-max-wait-ms", "admission_max_wait_ms", "requests", "while that share "
           "is lowered, a produce pipelined behind others on its connection that has waited "
           "this long since it was read is refused too (latency before goodput); 0 (the "
           "default) turns this off", non_negative, "MS"),
    Option("stall-report-ms", "stall_report_ms", "requests", "log the event loop's stack "
           "whenever it stays away from its timers this long (a stall: a long callback, a "
           "blocking call); 0 (the default) turns this off", non_negative, "MS"),
    Option("heap-trim-s", "heap_trim_s", "node", "return the memory allocator's free "
           "pages to the system this often, so that RSS follows the memory in use (glibc "
           "only); 0 turns this off", non_negative_float, "S"),
    Option("malloc-arenas", "malloc_arenas", "node", "the most malloc arenas the process "
           "uses (glibc's MALLOC_ARENA_MAX): a few keep threads' freed memory reusable, so RSS "
           "stays flat; 0 leaves glibc's own limit (eight per core)", non_negative, "N"),
    Option("header-read-timeout", "header_read_timeout_s", "requests", "seconds a client may "
           "take to send a request's headers (HTTP/2: its connection preface and SETTINGS) "
           "before the connection is closed", positive_float, "S"),
    Option("keepalive-timeout", "keepalive_timeout_s", "requests", "seconds a connection "
           "without a request in progress stays open (keep it above a load balancer's idle "
           "timeout)", positive_float, "S"),
    # -- consumer groups
    Option("offsets-topic-partitions", "offsets_topic_partitions", "groups", "partitions of "
           "__consumer_offsets when it is first created", positive, "N",
           "offsets.topic.num.partitions"),
    Option("offsets-topic-replication-factor", "offsets_topic_replication_factor", "groups",
           "replicas of __consumer_offsets in a cluster (a single node: 1)", positive, "N",
           "offsets.topic.replication.factor"),
    Option("schemas-topic-replication-factor", "schemas_topic_replication_factor", "groups",
           "replicas of _schemas (the schema registry's topic) in a cluster (a single node: 1)",
           positive, "N"),
    Option("group-min-session-timeout-ms", "group_min_session_timeout_ms", "groups", "the "
           "shortest session_timeout_ms a member may ask", positive, "MS",
           "group.min.session.timeout.ms"),
    Option("group-max-session-timeout-ms", "group_max_session_timeout_ms", "groups", "the "
           "longest session_timeout_ms a member may ask", positive, "MS",
           "group.max.session.timeout.ms"),
    Option("group-max-members", "group_max_members", "groups", "members per consumer group",
           positive, "N", "group.max.size"),
    Option("offsets-retention-minutes", "offsets_retention_minutes", "groups", "committed "
           "offsets of a group without members are dropped this long after their commit",
           positive, "MIN", "offsets.retention.minutes"),
    Option("offsets-retention-check-interval-ms", "offsets_retention_check_interval_ms",
           "groups", "how often expired offsets are looked for", positive, "MS",
           "offsets.retention.check.interval.ms"),
    Option("transaction-abort-interval-ms", "transaction_abort_interval_ms", "groups", "how "
           "often a transaction coordinator aborts the transactions open past their timeout_ms "
           "(a transaction may stay open this much longer)", positive, "MS",
           "transaction.abort.timed.out.transaction.cleanup.interval.ms"),
    Option("producer-id-expiration-ms", "producer_id_expiration_ms", "groups", "a partition "
           "forgets a transactional producer this long after its last write there when none of "
           "its transactions is open there (a later write of it is a new producer's)", positive,
           "MS", "producer.id.expiration.ms"),
    Option("subscription-allowed-hosts", "subscription_allowed_hosts", "groups", "endpoint "
           "hosts push subscriptions may call even when they are loopback or link-local "
           "(refused otherwise), comma-separated", hosts, "HOST[,HOST...]", show=_show_list),
    # -- cluster
    Option("node-id", "node_id", "cluster", "this node's id in a cluster (stable across "
           "restarts)", non_negative, "N", "node.id"),
    Option("cluster", "cluster", "cluster", "join the cluster whose metadata is in this etcd "
           "(default: the embedded single node)", etcd_endpoints,
           "etcd://HOST:PORT[,HOST:PORT...]", show=_show_cluster),
    Option("advertise", "advertise", "cluster", "the URL other nodes and forwarded requests "
           "reach this node at (default http://HOST:PORT; needed with --cluster when HOST is "
           "0.0.0.0)", metavar="URL", kafka="advertised.listeners"),
    Option("rack", "rack", "cluster", "this node's rack, zone or data centre: a partition's "
           "replicas are spread over racks, and a fetch naming client_rack is served by an "
           "in-sync replica there", rack_name, "NAME", "broker.rack"),
    Option("replica-lost-timeout-ms", "replica_lost_timeout_ms", "cluster", "a node down "
           "this long is removed and its replicas re-created on the others (unset: never; "
           "a removed node that comes back holds nothing)", positive, "MS"),
    Option("balance", "balance", "cluster", "auto: the controller moves replicas and "
           "leaderships whenever a node is more than 10% off the mean (replicas, leaders, "
           "bytes); off: only `sluice cluster balance` does", balance_mode,
           "auto|off"),
    Option("leader-imbalance-check-interval-ms", "leader_imbalance_check_interval_ms",
           "cluster", "how often the controller moves leadership back to preferred replicas "
           "(Kafka's leader.imbalance.check.interval.seconds, in ms)", positive, "MS"),
    Option("etcd-prefix", "etcd_prefix", "cluster", "the key prefix of this cluster in etcd",
           metavar="PREFIX"),
    Option("default-replication-factor", "default_replication_factor", "cluster", "replicas "
           "of a topic created without replication_factor (unset: 3, or the live nodes when "
           "fewer; with --workers: 1)", positive, "N", "default.replication.factor"),
    Option("lease-ttl", "lease_ttl_s", "cluster", "seconds after which a silent node counts "
           "as gone", positive_float, "S"),
    Option("leader-wait-ms", "leader_wait_ms", "cluster", "how long a request waits for a "
           "partition's new leader", positive, "MS"),
    Option("forward-timeout-ms", "forward_timeout_ms", "cluster", "how long a request "
           "forwarded to another node waits for its answer, past the request's own timeout_ms "
           "(then 504 NODE_TIMED_OUT: it may have been served there)", positive, "MS",
           "request.timeout.ms"),
    Option("replica-lag-time-max-ms", "replica_lag_time_max_ms", "cluster", "a follower not "
           "caught up for this long leaves the ISR", positive, "MS", "replica.lag.time.max.ms"),
    Option("controlled-shutdown-timeout", "controlled_shutdown_timeout_s", "cluster", "on "
           "SIGTERM, how long a node waits at most for the controller to move its leaderships "
           "to other in-sync replicas before it drains and leaves (0: leave at once)",
           non_negative_float, "S"),
    # -- tiered storage
    Option("s3-bucket", "s3_bucket", "tiering", "turn on tiered storage into this (existing) "
           "bucket", metavar="BUCKET"),
    Option("s3-endpoint", "s3_endpoint", "tiering", "S3 endpoint URL (default: AWS's; "
           "credentials from boto3's chain: environment, profile, instance role)",
           metavar="URL"),
    Option("s3-prefix", "s3_prefix", "tiering", "key prefix of the tiered objects",
           lambda raw: raw.strip("/"), "PREFIX"),
    Option("tiering-interval", "tiering_interval_s", "tiering", "seconds between passes that "
           "upload closed segments", positive_float, "S"),
    # -- browser clients
    Option("cors-origins", "cors_origins", "cors", "browser origins allowed to call the API "
           "(SCHEME://HOST[:PORT], comma-separated; * for any, never with credentials); none: "
           "no CORS headers at all", origins, "ORIGIN[,ORIGIN...]", show=_show_list),
    Option("cors-methods", "cors_methods", "cors", "methods a cross-origin request may use",
           methods, "METHOD[,METHOD...]", show=_show_list),
    Option("cors-headers", "cors_headers", "cors", "request headers a cross-origin request may "
           "send", tokens, "NAME[,NAME...]", show=_show_list),
    Option("cors-allow-credentials", "cors_allow_credentials", "cors", "let the origins listed "
           "by name (not *) send cookies and HTTP authentication", boolean),
    Option("cors-max-age", "cors_max_age_s", "cors", "seconds a browser may cache a preflight "
           "answer", non_negative, "S"),
    # -- authentication and ACLs
    Option("auth", "auth", "auth", "require credentials on every route but /healthz (a bearer "
           "API key or JWT, HTTP Basic, or a client certificate) and enforce the ACLs", boolean),
    Option("super-user", "super_users", "auth", "a principal every ACL allows (repeat the "
           "flag, or comma-separate)", principals, "NAME", show=_show_list, repeatable=True),
    Option("auth-basic", "auth_basic", "auth", "also accept HTTP Basic (secrets from `sluice "
           "auth create-key --type basic`)", boolean),
    Option("auth-public-metrics", "auth_public_metrics", "auth", "serve /metrics without "
           "credentials", boolean),
    Option("auth-public-readyz", "auth_public_readyz", "auth", "serve /readyz without "
           "credentials", boolean),
    Option("internal-key-file", "internal_key_file", "auth", "the cluster's inter-node key "
           "(the first line is sent, every line is accepted; needed with --auth and --cluster)",
           _path, "FILE"),
    Option("jwt-jwks", "jwt_jwks", "auth", "accept JWTs signed by the keys of this JWKS file or "
           "URL", metavar="FILE|URL"),
    Option("jwt-issuer", "jwt_issuer", "auth", "the iss a JWT must carry", metavar="ISS"),
    Option("jwt-audience", "jwt_audience", "auth", "the aud a JWT must carry", metavar="AUD"),
    Option("jwt-leeway", "jwt_leeway_s", "auth", "seconds of clock skew allowed on a JWT's exp "
           "and nbf", non_negative_float, "S"),
    Option("jwt-principal-claim", "jwt_principal_claim", "auth", "the JWT claim naming the "
           "principal", metavar="CLAIM"),
    Option("tls-client-ca", "tls_client_ca", "auth", "verify client certificates against these "
           "CAs (mutual TLS; a certificate is optional, a bearer token still works)", _path,
           "FILE"),
    Option("tls-principal", "tls_principal", "auth", "a client certificate's principal: its "
           "subject's common name (cn) or its first e-mail, DNS or URI name (san)",
           certificate_principal, "cn|san"),
    Option("quota-mode", "quota_mode", "quotas", "a request over its principal's quota is "
           "refused with 429 and Retry-After (reject), or answered after the throttle time "
           "(delay, Kafka's way)", quota_mode, "reject|delay"),
    Option("quota-window", "quota_window_s", "quotas", "a quota's burst: a principal may spend "
           "this many seconds of its rate at once", positive_float, "S"),
    Option("quota-max-delay", "quota_max_delay_s", "quotas", "with --quota-mode delay, a "
           "throttle time above this is refused with 429 instead", non_negative_float, "S"),
)  # fmt: skip
GROUPS = {
    "node": "where it listens and keeps its data",
    "requests": "requests and their limits",
    "groups": "consumer groups",
    "cluster": "cluster (etcd)",
    "tiering": "tiered storage (S3)",
    "cors": "browser clients (CORS)",
    "auth": "authentication and ACLs",
    "quotas": "quotas (per principal; set with `sluice quotas`)",
}
BY_KEY = {
    **{o.flag: o for o in OPTIONS},
    **{o.flag.replace("-", "_"): o for o in OPTIONS},
    **{o.kafka: o for o in OPTIONS if o.kafka},
}


def shown(option: Option, value: Any) -> str:
    return "" if value is None else option.show(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`serve`'s flags, grouped, each naming its default, variable and Kafka name."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a TOML file of settings (keys: the flag names, or Kafka's names)",
    )
    for group, title in GROUPS.items():
        section = parser.add_argument_group(title)
        for option in (o for o in OPTIONS if o.group == group):
            notes = [f"default: {shown(option, option.default) or 'none'}", f"${option.env}"]
            if option.kafka:
                notes.append(f"Kafka: {option.kafka}")
            text = f"{option.help} ({'; '.join(notes)})".replace("%", "%%")
            if option.is_switch:
                section.add_argument(
                    f"--{option.flag}",
                    dest=option.field,
                    action="store_true",
                    default=argparse.SUPPRESS,
                    help=text,
                )
            else:
                section.add_argument(
                    f"--{option.flag}",
                    dest=option.field,
                    type=option.parse,
                    action="extend" if option.repeatable else "store",
                    metavar=option.metavar,
                    default=argparse.SUPPRESS,
                    help=text,
                )


class ConfigError(Exception):
    """A bad file, key or value: the message names where it came from."""


def _from_file(path: Path) -> dict[str, tuple[Any, str]]:
    try:
        with path.open("rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not TOML ({exc})") from None
    values: dict[str, tuple[Any, str]] = {}
    for key, raw in _dotted(doc):
        option = BY_KEY.get(key)
        if option is None:
            raise ConfigError(f"--config {path}: unknown setting {key!r}")
        text = ",".join(map(str, raw)) if isinstance(raw, list) else raw
        text = str(text).lower() if isinstance(text, bool) else str(text)
        values[option.field] = (_parse(option, text, f"{path}: {key}"), f"file {path}")
    return values


def _dotted(doc: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """The file's keys and values, a Kafka name written bare (`group.max.size = 7`, a table
    in TOML) back as its dotted name."""
    pairs: list[tuple[str, Any]] = []
    for key, value in doc.items():
        if isinstance(value, Mapping):
            pairs.extend(_dotted(value, f"{prefix}{key}."))
        else:
            pairs.append((f"{prefix}{key}", value))
    return pairs


def _parse(option: Option, text: str, where: str) -> Any:
    try:
        return option.parse(text)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise ConfigError(f"{where}: {exc}") from None


def resolve(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> tuple[Settings, dict[str, str]]:
    """Settings from the defaults, the file, the environment and the flags (the latter wins
    each time), and where each value came from."""
    environ = os.environ if environ is None else environ
    values: dict[str, tuple[Any, str]] = {}
    config = getattr(args, "config", None) or (
        Path(environ["SLUICE_CONFIG"]) if environ.get("SLUICE_CONFIG") else None
    )
    if config is not None:
        values.update(_from_file(config))
    for option in OPTIONS:
        if option.env in environ:
            values[option.field] = (
                _parse(option, environ[option.env], f"${option.env}"),
                f"env {option.env}",
            )
        if option.field in vars(args):
            value = getattr(args, option.field)
            value = tuple(value) if option.repeatable else value
            values[option.field] = (value, f"flag --{option.flag}")
    settings = dataclasses.replace(Settings(), **{k: v for k, (v, _) in values.items()})
    sources = {o.field: values.get(o.field, (None, "default"))[1] for o in OPTIONS}
    return settings, sources


def describe(settings: Settings, sources: Mapping[str, str]) -> list[str]:
    """TOML lines of the effective settings, each with where it came from."""
    lines = []
    for option in OPTIONS:
        value = getattr(settings, option.field)
        if value is None or value == ():
            lines.append(f"# {option.flag} is not set  # {sources[option.field]}")
            continue
        if isinstance(value, bool):
            text = str(value).lower()
        elif isinstance(value, int | float):
            text = str(value)
        else:
            text = '"' + shown(option, value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        lines.append(f"{option.flag} = {text}  # {sources[option.field]}")
    return lines


def reference() -> list[str]:
    """The Markdown table of every setting (the README's Configuration reference)."""
    rows = ["| flag | variable | default | what |", "|---|---|---|---|"]
    for option in OPTIONS:
        default = shown(option, option.default) or "none"
        what = option.help + (f" (Kafka: `{option.kafka}`)" if option.kafka else "")
        rows.append(f"| `--{option.flag}` | `{option.env}` | {default} | {what} |")
    return rows
