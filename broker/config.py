"""Broker settings: command-line flags, an optional TOML file, and Kafka-compatible defaults.

The defaults are Apache Kafka's where Kafka has the setting, and TDengine's for the WAL
(WAL_LEVEL 1, WAL_FSYNC_PERIOD 3000 ms), so that a Kafka user meets no surprise.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

ENV_PREFIX = "TMQGATE_"


def settings_from_env(known: set[str], environ: Mapping[str, str]) -> dict[str, object]:
    """The settings given as TMQGATE_<KEY> variables (see BrokerConfig.load)."""
    values: dict[str, object] = {}
    for name in known:
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None:
            continue
        try:
            values[name] = tomllib.loads(f"value = {raw}")["value"]
        except tomllib.TOMLDecodeError:
            values[name] = raw
    return values


def parse_hostport(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """Split "host:port" (the host may be omitted, IPv6 in brackets) into its parts."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or default_host
    return host, int(port)


def _loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or localhost): reachable from this host only."""
    import ipaddress

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


@dataclass
class BrokerConfig:
    """Everything the broker reads at start-up."""

    listen: str = "127.0.0.1:9092"
    http: str = "127.0.0.1:6041"
    data_dir: str = "./data"
    advertised_listener: str | None = None  # HOST:PORT clients are told for `listen`
    # --- Listeners (Kafka's listeners / advertised.listeners / listener.security.protocol.map)
    # e.g. ["PLAINTEXT://127.0.0.1:9092", "SASL_SSL://127.0.0.1:9093"]; empty = one PLAINTEXT
    # listener on `listen`. See broker/listeners.py.
    listeners: list[str] = field(default_factory=list)
    advertised_listeners: list[str] = field(default_factory=list)
    listener_security_protocol_map: dict[str, str] = field(default_factory=dict)
    # TLS of the SSL and SASL_SSL listeners (PEM files; Kafka's ssl.keystore/ssl.truststore).
    # ssl_client_auth is Kafka's ssl.client.auth: "required" | "requested" | "none"; the CAs
    # of ssl_cafile are the ones client certificates must chain to. SIGHUP reloads the files.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: str | None = None
    ssl_cafile: str | None = None
    ssl_client_auth: str = "none"
    ssl_min_version: str = "TLSv1.2"  # or "TLSv1.3"; older versions are never offered
    # The HTTP SQL front over HTTPS with the same certificate (and ssl_client_auth) settings.
    http_tls: bool = False
    # ssl.principal.mapping.rules (one rule per entry): a certificate's subject DN -> principal.
    ssl_principal_mapping_rules: list[str] = field(default_factory=lambda: ["DEFAULT"])
    # --- SASL (SASL_PLAINTEXT and SASL_SSL listeners; broker/auth/) ---------------------------
    # sasl.enabled.mechanisms: Kafka's default ["GSSAPI"] needs Kerberos, which tmqgate does not
    # speak; tmqgate's default is the SCRAM mechanisms and PLAIN (checked against the same SCRAM
    # users). OAUTHBEARER may be added: with no JWKS it takes Kafka's unsecured tokens.
    sasl_enabled_mechanisms: list[str] = field(
        default_factory=lambda: ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
    # connections.max.reauth.ms (KIP-368): 0 = sessions never expire (Kafka's default); else
    # the session lifetime SaslAuthenticate answers, after which a connection that has not
    # re-authenticated is closed at its next request.
    connections_max_reauth_ms: int = 0
    # connection.failed.authentication.delay.ms: a failed authentication is answered and its
    # connection closed only after this delay (Kafka's default 100; 0 = at once).
    connection_failed_authentication_delay_ms: int = 100
    # sasl.oauthbearer.* (Kafka 4.x): signed JWTs checked against this JWKS (https:// or
    # file://); None = unsecured tokens. Audience/issuer are checked when set.
    sasl_oauthbearer_jwks_endpoint_url: str | None = None
    sasl_oauthbearer_expected_audience: list[str] = field(default_factory=list)
    sasl_oauthbearer_expected_issuer: str | None = None
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_scope_claim_name: str = "scope"
    sasl_oauthbearer_clock_skew_seconds: int = 30
    # --- The HTTP SQL front ----------------------------------------------------------------
    # http_auth: "none" or "basic" (HTTP Basic with the broker's SCRAM users, as taosAdapter).
    # The broker refuses to start with the front on a non-loopback address and no
    # authentication unless allow_insecure_http is true.
    http_auth: str = "none"
    allow_insecure_http: bool = False
    # GET /metrics (Prometheus text, broker/metrics.py): with http_auth = "basic", whether it
    # takes the same credentials (true) or is open like /health (false, the default: a
    # Prometheus scraper needs no user). The Host check applies either way.
    metrics_auth: bool = False
    # kafka_consumergroup_lag/current_offset are computed at scrape time: at most this many
    # (group, partition) series per scrape (kafka_consumergroup_lag_truncated says when cut).
    metrics_max_lag_series: int = 10_000
    node_id: int = 1
    cluster_id: str = "tmqgate-cluster-00000"
    # socket.request.max.bytes in Kafka: a frame larger than this closes the connection.
    socket_request_max_bytes: int = 104_857_600
    # TDengine WAL_LEVEL: 1 = written to the OS before the ack (survives a process kill),
    # 2 = fsync'd; WAL_FSYNC_PERIOD in ms (0 = fsync every write when WAL_LEVEL is 2).
    wal_level: int = 1
    wal_fsync_period_ms: int = 3000
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    # How often retention runs (log.retention.check.interval.ms in Kafka).
    retention_check_interval_ms: int = 300_000
    topic_defaults: dict[str, str] = field(default_factory=dict)
    # The archiver (003): oldest WAL entries are collected first when the data volume passes
    # disk_usage_max_percent of its filesystem (or of disk_volume_bytes, if set), or when the
    # data passes data_max_bytes; checked every archiver_interval_ms. It removes acknowledged
    # records that retention still keeps, so it is off unless the operator sets a limit (as
    # Kafka, which deletes only by retention and answers KAFKA_STORAGE_ERROR on a full disk).
    disk_usage_max_percent: float | None = None
    disk_volume_bytes: int | None = None
    data_max_bytes: int | None = None
    archiver_interval_ms: int = 10_000
    # A full disk (storage.space): a file of disk_reserve_bytes kept in the data directory and
    # released when a write finds no space, so LevelDB can reopen, delete and compact; it should
    # be at least twice leveldb_write_buffer_bytes (each of the two LevelDBs replays its log at
    # open). Writes answer KAFKA_STORAGE_ERROR while the disk is full; every
    # disk_check_interval_ms the broker looks for room to take writes again. 0 = no reserve.
    disk_reserve_bytes: int = 128 << 20
    disk_check_interval_ms: int = 1000
    leveldb_write_buffer_bytes: int = 64 << 20
    # Consumer groups (Kafka's group.* settings). The KIP-848 session timeout is TDengine's 12 s.
    # A KIP-848 member learns of a rebalance only from its next heartbeat, so the interval is
    # short (1 s, where Kafka says 5 s): a heartbeat costs the broker ~0.1 ms, and a member that
    # must give up partitions finds out within a second instead of five.
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_consumer_session_timeout_ms: int = 12_000
    group_consumer_heartbeat_interval_ms: int = 1000
    offset_metadata_max_bytes: int = 4096
    # --- Bounded resources (issue 11, findings 3 and 4) -----------------------------------
    # Partitions one CreateTopics/CreatePartitions request may create: Kafka's controller
    # refuses an operation of more than 10,000 records (MAX_RECORDS_PER_USER_OP, one per
    # partition) with POLICY_VIOLATION "Unable to perform excessively large batch operation.".
    max_partitions_per_request: int = 10_000
    # Partitions (vnodes) of all topics and databases on this broker (tmqgate's own; every
    # vnode costs memory, Metadata response bytes and start-up time). Over it: POLICY_VIOLATION.
    max_partitions: int = 100_000
    # Databases (Kafka topics and SQL databases alike) on this broker (tmqgate's own).
    max_databases: int = 10_000
    # connections.max.idle.ms: a connection with no request for this long is closed.
    connections_max_idle_ms: int = 600_000
    # A frame whose size prefix has arrived must arrive whole within this time, or the
    # connection is closed (tmqgate's own: a trickled frame holds pool memory).
    request_read_timeout_ms: int = 60_000
    # queued.max.request.bytes: the broker-wide pool request frames are read into. Kafka's
    # default is -1 (unbounded); tmqgate caps it (256 MiB: two frames of the largest size
    # socket.request.max.bytes allows, and far below the host's memory). A frame that does
    # not fit waits for memory to be freed (its connection is not read meanwhile), as Kafka
    # mutes a channel; -1 (or 0) = unbounded. Else must be >= socket_request_max_bytes.
    queued_max_request_bytes: int = 268_435_456
    # max.connections / max.connections.per.ip: a new connection over either is closed at
    # once. Kafka's defaults are Int.MaxValue; tmqgate caps the total (each connection may
    # hold up to ~400 KiB of socket buffers outside the pool), not the per-IP count (NAT).
    max_connections: int = 4096
    max_connections_per_ip: int = 2_147_483_647
    # The SQL front: TDengine's maximum SQL length (1 MiB, TSDB_MAX_ALLOWED_SQL_LEN) is also
    # the HTTP body limit of /rest/sql (a larger body gets 413 without being read whole).
    max_sql_length: int = 1_048_576
    # DNS rebinding: the HTTP front answers only requests whose Host is its bound address,
    # localhost / 127.0.0.1 / [::1] with the bound port, or the configured `http`; these are
    # more names it is served as ("name" any port, "name:port"; ["*"] = any Host, for a front
    # behind a proxy or a port map). Others get 421. tmqgate's own setting.
    http_allowed_hosts: list[str] = field(default_factory=list)
    # SQL texts of 1 KiB or more are parsed in a process of their own, one at a time (pure
    # Python parsing would hold the event loop: ~3 s for a 1 MiB INSERT). A parse running
    # longer than this is stopped (the process replaced) and answered 503 "Operation timeout"
    # (tmqgate's own; the slowest 1 MiB text parses in ~7 s on an idle core, a 1 MiB INSERT
    # in ~3 s: the default leaves room for a host several times busier).
    sql_parse_timeout_ms: int = 30_000
    # Produce decompresses every batch to validate its records (as Kafka's LogValidator does);
    # the decompressed records may pass neither the topic's max.message.bytes nor this cap, so
    # a small compressed bomb is refused (MESSAGE_TOO_LARGE) before it is inflated. tmqgate's
    # own setting: Kafka bounds only the compressed size.
    max_decompressed_batch_bytes: int = 134_217_728
    # Log lines about bad input and failed requests: at most log_rate_limit_messages of a kind
    # per log_rate_limit_interval_ms, then one line saying how many were suppressed.
    log_rate_limit_messages: int = 10
    log_rate_limit_interval_ms: int = 60_000
    # Client quotas (broker/quotas.py): Kafka's quota.window.num and quota.window.size.seconds,
    # the samples a client's rate is measured over (11 of 1 s: 10 whole windows + the current).
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    # --- Authorization (issue 12, point 4) --------------------------------------------------
    # "acl": Kafka's ACLs (StandardAuthorizer's decision, CreateAcls/DescribeAcls/DeleteAcls,
    # every API checks what Kafka checks); "none": no authorizer (everyone may do anything,
    # the ACL APIs answer SECURITY_DISABLED) — Kafka's authorizer.class.name unset.
    authorizer: str = "none"
    # super.users: principals allowed everything, whatever the ACLs say.
    super_users: list[str] = field(default_factory=list)
    # allow.everyone.if.no.acl.found: a resource with no ACL at all is open to everyone
    # (Kafka's default, false: denied).
    allow_everyone_if_no_acl_found: bool = False

    @classmethod
    def load(cls, path: str | Path | None, environ: Mapping[str, str] | None = None,
             **overrides: object) -> BrokerConfig:
        """Settings from three places, each overriding the one before: the TOML file at `path`
        (keys as the field names), the environment, then non-None `overrides` (command-line flags).

        The environment rule is one for every setting: TMQGATE_ + the TOML key upper-cased, its
        value read as a TOML value (`TMQGATE_NUM_PARTITIONS=3`,
        `TMQGATE_LISTENERS='["PLAINTEXT://0.0.0.0:9092"]'`); a value that is not TOML (a bare
        `0.0.0.0:9092`) is taken as a string. Other TMQGATE_* variables (TMQGATE_PASSWORD, ...)
        are not settings and are left alone. `environ` defaults to os.environ."""
        values: dict[str, object] = {}
        if path:
            with open(path, "rb") as fh:
                values.update(tomllib.load(fh))
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown settings in {path}: {', '.join(sorted(unknown))}")
        values.update(settings_from_env(known, os.environ if environ is None else environ))
        values.update({k: v for k, v in overrides.items() if v is not None})
        config = cls(**values)  # type: ignore[arg-type]
        config.check()
        return config

    def check(self) -> None:
        """Refuse settings that contradict each other (Kafka checks these at start too)."""
        if self.quota_window_num < 1 or self.quota_window_size_seconds < 1:
            raise ValueError("quota_window_num and quota_window_size_seconds must be at least 1")
        if self.authorizer not in ("acl", "none"):
            raise ValueError(f'authorizer must be "acl" or "none", not {self.authorizer!r}')
        bad = [p for p in self.super_users if ":" not in p]
        if bad:
            raise ValueError(f"super_users must be principals such as User:admin: {bad}")
        from tmqgate.broker.principal import parse_rules
        parse_rules(self.ssl_principal_mapping_rules)  # a bad rule refuses the start, as in Kafka
        if self.http_tls and not (self.ssl_certfile and self.ssl_keyfile):
            raise ValueError("http_tls needs ssl_certfile and ssl_keyfile")
        if self.ssl_client_auth not in ("required", "requested", "none"):
            raise ValueError(f"ssl_client_auth must be required, requested or none, not {self.ssl_client_auth!r}")
        if self.ssl_min_version not in ("TLSv1.2", "TLSv1.3"):
            raise ValueError(f"ssl_min_version must be TLSv1.2 or TLSv1.3, not {self.ssl_min_version!r}")
        if self.http_auth not in ("none", "basic"):
            raise ValueError(f"http_auth must be none or basic, not {self.http_auth!r}")
        if self.http_auth == "none" and not self.allow_insecure_http and not _loopback(self.http_address[0]):
            raise ValueError(f"the SQL front would listen on {self.http} with no authentication: set "
                             'http_auth = "basic", or allow_insecure_http = true to accept that')
        pool = self.queued_max_request_bytes
        if 0 < pool < self.socket_request_max_bytes:
            raise ValueError(f"queued_max_request_bytes ({pool}) must be -1 or at least "
                             f"socket_request_max_bytes ({self.socket_request_max_bytes})")

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_hostport(self.listen)

    @property
    def http_address(self) -> tuple[str, int]:
        return parse_hostport(self.http)
