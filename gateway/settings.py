"""Gateway settings: one frozen object built from the command line (or tests)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    data_dir: Path = Path("data")
    file_cache_size: int | None = None  # closed segments' descriptors kept open; None: derived
    host: str = "127.0.0.1"
    port: int = 8080
    listen_backlog: int = 4096  # socket.listen.backlog.size; the kernel caps it at somaxconn
    workers: int = 1  # processes serving the port; above 1, a supervisor runs them as a cluster
    tls_cert: Path | None = None
    tls_key: Path | None = None
    no_console: bool = False  # True: /console (the web console) is not served
    max_request_bytes: int = 32 * 1024 * 1024
    max_inflight_request_bytes: int = 512 * 1024 * 1024  # all bodies being served, together
    body_read_timeout_s: float = 30.0  # a client slower than this to send its body gets 408
    max_connection_inflight_bytes: int = 64 * 1024 * 1024  # one connection's bodies (h2 streams)
    admission_max_inflight: int = 1024  # produces in progress at once, per worker
    admission_target_delay_ms: int = 50  # held above it, a share of produces refused; 0: off
    admission_max_wait_ms: int = 0  # a pipelined produce held this long is refused then; 0: off
    stall_report_ms: int = 0  # the loop away from its timers this long logs its stack; 0: off
    heap_trim_s: float = 60.0  # free heap pages go back to the system this often; 0: never
    malloc_arenas: int = 2  # glibc's malloc arenas at most (MALLOC_ARENA_MAX); 0: its own
    header_read_timeout_s: float = 10.0  # a request's headers (or h2's preface) arrive within
    keepalive_timeout_s: float = 75.0  # an idle connection is closed (above LBs' usual 60 s)
    auto_create_topics: bool = False
    default_partitions: int = 1
    max_fetch_bytes: int = 64 * 1024 * 1024
    default_fetch_bytes: int = 1024 * 1024  # max.partition.fetch.bytes
    default_fetch_records: int = 500  # max.poll.records
    max_fetch_records: int = 100_000
    default_fetch_wait_ms: int = 500  # fetch.max.wait.ms
    max_wait_ms: int = 300_000
    default_produce_timeout_ms: int = 30_000
    max_parked_fetches: int = 10_000
    idempotency_window_s: float = 3600.0
    idempotency_max_entries: int = 100_000
    node_id: int = 0
    cluster: tuple[str, ...] = ()  # etcd endpoints (host:port); empty: the embedded single node
    advertise: str | None = None  # the URL other nodes reach this one at (default: host:port)
    rack: str | None = None  # this node's rack or zone (KIP-36): replicas spread over racks
    replica_lost_timeout_ms: int | None = None  # a node down this long is removed (None: never)
    balance: str = "off"  # "auto": the controller balances replicas continuously
    # the controller moves leadership back to preferred replicas this often
    leader_imbalance_check_interval_ms: int = 30_000
    etcd_prefix: str = "/sluice"
    default_replication_factor: int | None = None  # None: 3, or the live nodes when fewer
    lease_ttl_s: float = 2.0  # a node silent this long is gone (etcd's lease minimum is ~1.5 s)
    leader_wait_ms: int = 5_000  # a request waits this long for a partition's new leader
    # a forwarded request's answer, past what the request itself waits for (its timeout_ms)
    forward_timeout_ms: int = 30_000
    replica_lag_time_max_ms: int = 30_000  # replica.lag.time.max.ms
    # On SIGTERM a cluster node waits this long at most for its leaderships to move; 0: no wait
    controlled_shutdown_timeout_s: float = 10.0
    s3_endpoint: str | None = None  # None: AWS's endpoints (credentials: boto3's chain)
    s3_bucket: str | None = None  # tiered storage is on when set
    s3_prefix: str = ""
    tiering_interval_s: float = 5.0  # between passes uploading closed segments
    offsets_topic_partitions: int = 50  # offsets.topic.num.partitions
    offsets_topic_replication_factor: int = 3  # offsets.topic.replication.factor (a cluster's)
    schemas_topic_replication_factor: int = 3  # replicas of _schemas (a cluster's)
    schema_registry_port: int | None = None  # the registry at the root of its own port too
    group_min_session_timeout_ms: int = 1_000  # group.min.session.timeout.ms (Kafka: 6 s)
    group_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    group_max_members: int = 1_000  # group.max.size (Kafka: unbounded)
    offsets_retention_minutes: int = 7 * 24 * 60  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    # how often a transaction coordinator aborts the transactions open past their timeout
    transaction_abort_interval_ms: int = 10_000
    # a partition forgets a transactional producer idle this long with no transaction open there
    producer_id_expiration_ms: int = 86_400_000
    # Push subscriptions' endpoints that may be loopback or link-local (refused otherwise).
    subscription_allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()  # browser origins served CORS headers; empty: CORS off
    cors_methods: tuple[str, ...] = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
    cors_headers: tuple[str, ...] = ("Accept", "Authorization", "Content-Type", "Idempotency-Key")
    cors_allow_credentials: bool = False  # only ever for origins listed by name
    cors_max_age_s: int = 600  # how long a browser may cache a preflight answer
    auth: bool = False  # every route but /healthz needs credentials; ACLs decide the rest
    super_users: tuple[str, ...] = ()  # principals every ACL allows
    auth_basic: bool = False  # also accept HTTP Basic (hashed secrets)
    auth_public_metrics: bool = False  # /metrics answers without credentials
    auth_public_readyz: bool = False  # /readyz answers without credentials
    internal_key_file: Path | None = None  # the cluster's inter-node key(s), one per line
    jwt_jwks: str | None = None  # a JWKS file or URL: accept JWTs signed by its keys
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_leeway_s: float = 30.0  # clock skew allowed on exp and nbf
    jwt_principal_claim: str = "sub"
    tls_client_ca: Path | None = None  # verify client certificates against these CAs (mTLS)
    tls_principal: str = "cn"  # a client certificate's principal: its subject CN, or first SAN
    quota_mode: str = "reject"  # over a quota: 429 with Retry-After, or "delay" the answer
    quota_window_s: float = 1.0  # a quota's burst: this many seconds of its rate at once
    quota_max_delay_s: float = 30.0  # delay mode: a longer throttle is refused with 429
