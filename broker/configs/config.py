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
from typing import get_type_hints

from tmqgate.broker.configs.environment import ENV_PREFIX, settings_from_env
from tmqgate.broker.configs.values import (
    INTER_BROKER_MECHANISMS,
    RANGES,
    ConfigError,
    is_host,
    is_hostport,
    loopback,
    parse_hostport,
    type_name,
    unknown_names,
)


@dataclass
class BrokerConfig:
    """Everything the broker reads at start-up."""

    # --- Addresses and data ---------------------------------------------------------------
    # The Kafka listener HOST:PORT when `listeners` is empty (flag --listen).
    listen: str = "127.0.0.1:9092"
    # The HTTP SQL front's HOST:PORT (flag --http); keep it on loopback unless http_auth is set.
    http: str = "127.0.0.1:6041"
    # The data directory (flag --data-dir); created once the start-up checks pass (a start that
    # fails leaves nothing behind). One broker per directory (LevelDB's LOCK).
    data_dir: str = "./data"
    # HOST:PORT clients are told for `listen` (Kafka's advertised.listeners for one listener),
    # or a HOST alone: that host with the bound port (so a --listen port change is told as
    # bound); unset = the bound address itself (the host's name for 0.0.0.0). The broker warns
    # at start when the address is not one of this machine where it listens.
    advertised_listener: str | None = None
    # --- Listeners (Kafka's listeners / advertised.listeners / listener.security.protocol.map)
    # Kafka's listeners, e.g. ["PLAINTEXT://127.0.0.1:9092", "SASL_SSL://127.0.0.1:9093"];
    # empty = one PLAINTEXT listener on `listen`. See broker/network/listeners.py.
    listeners: list[str] = field(default_factory=list)
    # Kafka's advertised.listeners: NAME://HOST:PORT told to clients per listener, or NAME://HOST
    # for that host with the listener's bound port; a listener not named here is told as bound
    # (the host's name for a wildcard).
    advertised_listeners: list[str] = field(default_factory=list)
    # Kafka's listener.security.protocol.map: listener name -> PLAINTEXT, SSL, SASL_PLAINTEXT or
    # SASL_SSL (names that are protocols need no entry).
    listener_security_protocol_map: dict[str, str] = field(default_factory=dict)
    # --- TLS (SSL and SASL_SSL listeners, and the HTTP front with http_tls) ---------------
    # The server certificate chain, PEM (Kafka's ssl.keystore). SIGHUP reloads the files.
    ssl_certfile: str | None = None
    # The server certificate's private key, PEM.
    ssl_keyfile: str | None = None
    # The password of an encrypted ssl_keyfile (Kafka's ssl.key.password).
    ssl_key_password: str | None = None
    # CA certificates, PEM, that client certificates must chain to (Kafka's ssl.truststore).
    ssl_cafile: str | None = None
    # Kafka's ssl.client.auth: "required" | "requested" | "none" — for SSL listeners (and the
    # HTTP front); a SASL_SSL listener takes only its own entry in listener_ssl_client_auth.
    ssl_client_auth: str = "none"
    # Kafka's listener.name.<name>.ssl.client.auth, one entry per listener: listener name ->
    # "required" | "requested" | "none", e.g. {EXTERNAL = "required", INTERNAL = "none"} is
    # listener.name.external.ssl.client.auth=required and listener.name.internal.ssl.client.auth=none.
    # A listener without an entry: ssl_client_auth on SSL, "none" on SASL_SSL (Kafka, KIP-684).
    listener_ssl_client_auth: dict[str, str] = field(default_factory=dict)
    # Kafka's listener.name.<name>.ssl.keystore.location (its certificate part), per listener:
    # listener name -> a PEM certificate chain used on that listener instead of ssl_certfile.
    listener_ssl_certfile: dict[str, str] = field(default_factory=dict)
    # Kafka's listener.name.<name>.ssl.keystore.location (its key part): listener name -> the PEM
    # private key of that listener's certificate, instead of ssl_keyfile (same password setting).
    listener_ssl_keyfile: dict[str, str] = field(default_factory=dict)
    # Kafka's listener.name.<name>.ssl.truststore.location: listener name -> PEM CA certificates
    # that client certificates on that listener must chain to, instead of ssl_cafile.
    listener_ssl_cafile: dict[str, str] = field(default_factory=dict)
    # The oldest TLS version offered: "TLSv1.2" or "TLSv1.3"; older versions are never offered.
    ssl_min_version: str = "TLSv1.2"
    # The HTTP SQL front over HTTPS with the same certificate (and ssl_client_auth) settings.
    http_tls: bool = False
    # Kafka's ssl.principal.mapping.rules (one rule per entry): a certificate's subject DN -> principal.
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
    # connection closed only after this delay (Kafka's default 100; 0 = at once). The HTTP
    # front answers wrong Basic credentials 401 after the same delay.
    connection_failed_authentication_delay_ms: int = 100
    # A SASL connection must complete its authentication within this time after it is accepted,
    # or it is closed (tmqgate's own, issue 25: a half-open handshake held its socket until
    # connections_max_idle_ms). Kafka has no such bound; its frames before authentication are,
    # as here, at most sasl.server.max.receive.size (512 KiB) and outside the request pool.
    sasl_authentication_timeout_ms: int = 30_000
    # sasl.oauthbearer.jwks.endpoint.url (Kafka 4.x): signed JWTs are checked against this JWKS
    # (https:// or file://); unset = unsecured tokens.
    sasl_oauthbearer_jwks_endpoint_url: str | None = None
    # sasl.oauthbearer.expected.audience: a token must name one of these (checked when set).
    sasl_oauthbearer_expected_audience: list[str] = field(default_factory=list)
    # sasl.oauthbearer.expected.issuer: a token's `iss` must be this (checked when set).
    sasl_oauthbearer_expected_issuer: str | None = None
    # sasl.oauthbearer.sub.claim.name: the claim that names the principal.
    sasl_oauthbearer_sub_claim_name: str = "sub"
    # sasl.oauthbearer.scope.claim.name: the claim that holds the token's scopes.
    sasl_oauthbearer_scope_claim_name: str = "scope"
    # sasl.oauthbearer.clock.skew.seconds: leeway when checking a token's times.
    sasl_oauthbearer_clock_skew_seconds: int = 30
    # --- The HTTP SQL front ----------------------------------------------------------------
    # "none" or "basic" (HTTP Basic with the broker's SCRAM users, as taosAdapter). The broker
    # refuses to start with the front on a non-loopback address and no authentication unless
    # allow_insecure_http is true.
    http_auth: str = "none"
    # Accept an unauthenticated SQL front on a non-loopback address.
    allow_insecure_http: bool = False
    # The front's share of the process's file descriptors: a new connection over this many
    # open ones is closed at once (counted, logged rate-limited), so idle connects to the HTTP
    # port cannot take the descriptors Kafka clients need (max_connections is theirs). The
    # broker warns at start when max_connections + http_max_connections does not fit the
    # descriptor limit (RLIMIT_NOFILE, raised to its hard limit at start as the JVM does).
    http_max_connections: int = 1000
    # A request line and its headers must arrive whole within this time from the connection's
    # start (or the request's first byte on a kept-alive connection), else the connection is
    # closed: a slow-loris connection trickling header bytes cannot be held open.
    http_header_timeout_ms: int = 10_000
    # A kept-alive connection with no request for this long after its last answer is closed.
    http_idle_timeout_ms: int = 60_000
    # --- Metrics ----------------------------------------------------------------------------
    # GET /metrics (Prometheus text, broker/ops/metrics.py): with http_auth = "basic", whether it
    # takes the same credentials (true) or is open like /health (false, the default: a
    # Prometheus scraper needs no user). The Host check applies either way.
    metrics_auth: bool = False
    # With an authorizer on, GET /metrics shows the series labelled with a topic, database or
    # consumer group only if its caller (the Basic user with metrics_auth, else User:ANONYMOUS)
    # may DESCRIBE each, as Metadata and ListGroups hide names; super users see all. false:
    # every series to whoever reaches /metrics (a scraper on a network of its own).
    metrics_acl_filter: bool = True
    # kafka_consumergroup_lag/current_offset are computed at scrape time: at most this many
    # (group, partition) series per scrape (kafka_consumergroup_lag_truncated says when cut).
    metrics_max_lag_series: int = 10_000
    # --- Broker ---------------------------------------------------------------------------
    # Kafka's node.id: this broker's id in Metadata answers.
    node_id: int = 1
    # The cluster id Metadata and DescribeCluster answer (with `cluster`: the one kept in etcd).
    cluster_id: str = "tmqgate-cluster-00000"
    # etcd://HOST:PORT[,HOST:PORT…]: join the cluster coordinated by that etcd (docs/CLUSTER.md;
    # `serve --cluster`); local:PATH: the brokers of one machine sharing that SQLite file, no
    # etcd (broker/cluster/local_kv.py); unset: one node, no other server needed.
    cluster: str | None = None
    # `serve --workers`: the broker processes of this `tmqgate serve` (broker/workers.py), each a
    # broker of its own on every configured port + its index, each on its own core. 0 (the
    # default): one per core this process may run on — one broker where the data directory holds
    # a single broker's data or `cluster` is set (node ids must be planned N apart there).
    workers: int = 0
    # Kafka's broker.session.timeout.ms: the TTL of this broker's etcd lease; a broker not heard
    # from for this long leaves the others' Metadata and gives up the controller role.
    cluster_session_timeout_ms: int = 9000
    # How this broker authenticates to the others of a cluster (followers fetching, transaction
    # markers, verification) when the listener they dial — each broker's first, the one it
    # registers — takes SASL: Kafka's sasl.mechanism.inter.broker.protocol (PLAIN, SCRAM-SHA-256
    # or SCRAM-SHA-512, one of sasl_enabled_mechanisms; SCRAM keeps the password off the wire
    # and checks that the peer holds the user's credential) and the credentials of the brokers' user (put it in
    # super_users, or give it CLUSTER_ACTION and READ / WRITE on the topics, as Kafka's broker principal needs). On a
    # TLS listener the broker checks the peer's certificate against ssl_cafile and presents ssl_certfile (mutual TLS).
    inter_broker_sasl_mechanism: str = "PLAIN"
    # The brokers' user, with which this broker authenticates to the others over SASL.
    inter_broker_username: str | None = None
    # Its password (or TMQGATE_INTER_BROKER_PASSWORD, to keep it out of the file).
    inter_broker_password: str | None = None
    # Kafka's replica.lag.time.max.ms: a follower that has not caught up with its leader for
    # this long leaves the partition's in-sync replicas (acks=all stops waiting for it).
    replica_lag_time_max_ms: int = 30000
    # Kafka's replica.fetch.wait.max.ms: how long a follower's Fetch waits at the leader for
    # new data (lower than replica_lag_time_max_ms, so an idle follower stays in sync).
    replica_fetch_wait_max_ms: int = 500
    # Kafka's auto.leader.rebalance.enable: on a cluster the controller gives each partition
    # back to its preferred replica (the first) when that one is live and in sync again — after
    # a broker came back, its partitions return to it.
    auto_leader_rebalance_enable: bool = True
    # Kafka's leader.imbalance.check.interval.seconds: how often the controller does that.
    leader_imbalance_check_interval_seconds: int = 300
    # socket.request.max.bytes in Kafka: a frame larger than this closes the connection.
    socket_request_max_bytes: int = 104_857_600
    # --- Storage and topics -----------------------------------------------------------------
    # TDengine WAL_LEVEL: 1 = written to the OS before the ack (survives a process kill),
    # 2 = fsync'd.
    wal_level: int = 1
    # TDengine WAL_FSYNC_PERIOD in ms: with wal_level 2, 0 = fsync every write, else fsync on
    # this period.
    wal_fsync_period_ms: int = 3000
    # auto.create.topics.enable: Metadata and Produce for an unknown topic create it.
    auto_create_topics_enable: bool = True
    # num.partitions: the partitions (vnodes) of an auto-created topic or one created with -1.
    num_partitions: int = 1
    # default.replication.factor: the replicas of each partition of an auto-created topic or
    # one created with replication factor -1; above 1 only on a cluster of that many live
    # brokers (else such a create is INVALID_REPLICATION_FACTOR, as Kafka answers it).
    default_replication_factor: int = 1
    # How often retention runs (log.retention.check.interval.ms in Kafka).
    retention_check_interval_ms: int = 300_000
    # log.cleaner.enable: run the log cleaner, which compacts topics whose cleanup.policy
    # includes compact (storage.cleaner).
    log_cleaner_enable: bool = True
    # log.cleaner.backoff.ms: how long the cleaner sleeps when no topic needs cleaning.
    log_cleaner_backoff_ms: int = 15_000
    # log.cleaner.io.buffer.size: the bytes of WAL entries one cleaner step reads (off the event
    # loop) before its rewrites are committed; bounds each step's work.
    log_cleaner_io_buffer_size: int = 524_288
    # log.cleaner.dedupe.buffer.size: memory for the cleaner's key -> newest offset map, 24 bytes
    # a key as Kafka counts (a full map ends a cleaning early; the rest is cleaned next time).
    log_cleaner_dedupe_buffer_size: int = 134_217_728
    # log.cleaner.io.buffer.load.factor: how full the dedupe map may get.
    log_cleaner_io_buffer_load_factor: float = 0.9
    # log.cleaner.io.max.bytes.per.second: the cleaner's read rate cap (Kafka: Double.MAX_VALUE,
    # no cap).
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308
    # Topic configs applied to new topics unless the request sets them, e.g.
    # {"retention.ms" = "86400000"} (Kafka's log.* broker defaults).
    topic_defaults: dict[str, str] = field(default_factory=dict)
    # --- The archiver and a full disk ----------------------------------------------------
    # The archiver (003) collects the oldest WAL entries first when the data volume passes this
    # percentage of its filesystem (or of disk_volume_bytes, if set). It removes acknowledged
    # records that retention still keeps, so it is off unless the operator sets a limit (as
    # Kafka, which deletes only by retention and answers KAFKA_STORAGE_ERROR on a full disk).
    disk_usage_max_percent: float | None = None
    # The volume size disk_usage_max_percent is a percentage of; unset = the filesystem's size.
    disk_volume_bytes: int | None = None
    # The archiver collects the oldest WAL entries when the data passes this many bytes.
    data_max_bytes: int | None = None
    # How often the archiver checks its limits.
    archiver_interval_ms: int = 10_000
    # A file of this size kept in the data directory and released when a write finds no space,
    # so LevelDB can reopen, delete and compact; it should be at least twice
    # leveldb_write_buffer_bytes (each of the two LevelDBs replays its log at open). Writes
    # answer KAFKA_STORAGE_ERROR while the disk is full. 0 = no reserve.
    disk_reserve_bytes: int = 128 << 20
    # While the disk is full, how often the broker looks for room to take writes again.
    disk_check_interval_ms: int = 1000
    # LevelDB's write buffer (memtable) size of the main LevelDB; the payloads' places LevelDB
    # uses at most 8 MiB of it (its values are 16-byte places: storage/payloads.py).
    leveldb_write_buffer_bytes: int = 64 << 20
    # --- Consumer groups (Kafka's group.* settings) -----------------------------------------
    # group.initial.rebalance.delay.ms: a new classic group waits this long for more members.
    group_initial_rebalance_delay_ms: int = 3000
    # group.min.session.timeout.ms: a classic member's smallest allowed session timeout.
    group_min_session_timeout_ms: int = 6000
    # group.max.session.timeout.ms: a classic member's largest allowed session timeout.
    group_max_session_timeout_ms: int = 1_800_000
    # group.consumer.session.timeout.ms: the KIP-848 session timeout (TDengine's 12 s).
    group_consumer_session_timeout_ms: int = 12_000
    # group.consumer.heartbeat.interval.ms: a KIP-848 member learns of a rebalance only from its
    # next heartbeat, so the interval is short (1 s, where Kafka says 5 s): a heartbeat costs the
    # broker ~0.1 ms, and a member that must give up partitions finds out within a second.
    group_consumer_heartbeat_interval_ms: int = 1000
    # group.consumer.min.session.timeout.ms: the smallest consumer.session.timeout.ms a group's
    # own config may set (Kafka: 45 s; here 6 s, as classic groups, since the default is 12 s).
    group_consumer_min_session_timeout_ms: int = 6000
    # group.consumer.max.session.timeout.ms: the largest consumer.session.timeout.ms a group may set.
    group_consumer_max_session_timeout_ms: int = 60_000
    # group.consumer.min.heartbeat.interval.ms: the smallest consumer.heartbeat.interval.ms a
    # group's own config may set (Kafka: 5 s; here 500 ms, since the default is 1 s).
    group_consumer_min_heartbeat_interval_ms: int = 500
    # group.consumer.max.heartbeat.interval.ms: the largest consumer.heartbeat.interval.ms a group may set.
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    # group.share.session.timeout.ms: a share group member's session timeout (KIP-932).
    group_share_session_timeout_ms: int = 45_000
    # group.share.min.session.timeout.ms: the smallest share.session.timeout.ms a group may set.
    group_share_min_session_timeout_ms: int = 45_000
    # group.share.max.session.timeout.ms: the largest share.session.timeout.ms a group may set.
    group_share_max_session_timeout_ms: int = 60_000
    # group.share.heartbeat.interval.ms: the heartbeat interval given to share group members.
    group_share_heartbeat_interval_ms: int = 5000
    # group.share.min.heartbeat.interval.ms: the smallest share.heartbeat.interval.ms a group may set.
    group_share_min_heartbeat_interval_ms: int = 5000
    # group.share.max.heartbeat.interval.ms: the largest share.heartbeat.interval.ms a group may set.
    group_share_max_heartbeat_interval_ms: int = 15_000
    # group.share.record.lock.duration.ms: how long a record acquired by a share consumer stays
    # locked to it before it is available to others again.
    group_share_record_lock_duration_ms: int = 30_000
    # group.share.min.record.lock.duration.ms: the smallest share.record.lock.duration.ms a group may set.
    group_share_min_record_lock_duration_ms: int = 15_000
    # group.share.max.record.lock.duration.ms: the largest share.record.lock.duration.ms a group may set.
    group_share_max_record_lock_duration_ms: int = 60_000
    # group.share.delivery.count.limit: deliveries of a record to a share group before it is archived.
    group_share_delivery_count_limit: int = 5
    # group.share.min.delivery.count.limit: the smallest share.delivery.count.limit a group may set.
    group_share_min_delivery_count_limit: int = 2
    # group.share.max.delivery.count.limit: the largest share.delivery.count.limit a group may set.
    group_share_max_delivery_count_limit: int = 10
    # group.share.partition.max.record.locks: records in flight per share-partition at most.
    group_share_partition_max_record_locks: int = 2000
    # group.share.min.partition.max.record.locks: the smallest share.partition.max.record.locks a group may set.
    group_share_min_partition_max_record_locks: int = 100
    # group.share.max.partition.max.record.locks: the largest share.partition.max.record.locks a group may set.
    group_share_max_partition_max_record_locks: int = 4000
    # group.share.max.share.sessions: share sessions this broker holds at most; a new one past it
    # is refused with SHARE_SESSION_LIMIT_REACHED (each is one member's, ended with its connection).
    group_share_max_share_sessions: int = 2000
    # offset.metadata.max.bytes: the longest metadata string an offset commit may carry.
    offset_metadata_max_bytes: int = 4096
    # offsets.topic.num.partitions: the partitions of the internal topic __consumer_offsets
    # (Metadata shows it with is_internal once a group has used the broker); a group's commits
    # are read from partition abs(groupId.hashCode()) % this. Fixed once groups have committed.
    # On a cluster __consumer_offsets has cluster_state_partitions partitions instead.
    offsets_topic_num_partitions: int = 50
    # On a cluster: the partitions of each of the internal topics that hold the groups' and
    # the transactional ids' state (broker/cluster/coordinator_state.py; Kafka's
    # __consumer_offsets and __transaction_state, whose partition counts are
    # offsets_topic_num_partitions and transaction_state_log_num_partitions): a key's
    # coordinator leads its partition. Fewer than Kafka's 50 because every replicated partition
    # costs in each replica fetch round (tmqgate has no fetch sessions, KIP-227, yet): with 50
    # each, the replicated-cluster benchmark's acks=all throughput fell by a third. All brokers
    # must agree on it. __consumer_offsets and __transaction_state have this many partitions on
    # a cluster, each led by the coordinator of its keys (broker/topics.py).
    cluster_state_partitions: int = 6
    # offsets.topic.replication.factor: on a cluster, the replicas of each partition of the
    # group-state topic (broker/cluster/coordinator_state.py), made once this many brokers are live
    # (FindCoordinator answers COORDINATOR_NOT_AVAILABLE until then).
    offsets_topic_replication_factor: int = 3
    # offsets.commit.timeout.ms: on a cluster, how long an offset commit waits for the
    # group-state partition's in-sync replicas (COORDINATOR_NOT_AVAILABLE after it).
    offsets_commit_timeout_ms: int = 5000
    # transaction.state.log.num.partitions: the partitions of the internal topic
    # __transaction_state (listed in Metadata; a transactional id's partition is
    # abs(transactionalId.hashCode()) % this; on a cluster cluster_state_partitions instead).
    transaction_state_log_num_partitions: int = 50
    # transaction.state.log.replication.factor: on a cluster, the replicas of each partition of
    # the transaction-state topic (broker/cluster/coordinator_state.py), made once this many
    # brokers are live.
    transaction_state_log_replication_factor: int = 3
    # transaction.state.log.min.isr: that topic's min.insync.replicas.
    transaction_state_log_min_isr: int = 2
    # --- Transactions (Kafka's transaction.* settings) --------------------------------------
    # transaction.max.timeout.ms: the longest transaction.timeout.ms a producer may ask for;
    # InitProducerId over it answers INVALID_TRANSACTION_TIMEOUT.
    transaction_max_timeout_ms: int = 900_000
    # transactional.id.expiration.ms: a transactional id with no transaction for this long is
    # forgotten (its producer id and epoch with it).
    transactional_id_expiration_ms: int = 604_800_000
    # transaction.abort.timed.out.transaction.cleanup.interval.ms: the longest the coordinator
    # waits between checks for timed-out transactions (it also wakes at the earliest deadline,
    # so a transaction is aborted as soon as its timeout has passed).
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # transaction.partition.verification.enable: a transactional Produce is checked with the
    # transaction coordinator (the partition must be in the producer's ongoing transaction,
    # its epoch current) before it is appended; false appends it unchecked, as Kafka before
    # KIP-890 did — which lets a batch open a transaction its coordinator never ends (a
    # "hanging" one, what `kafka-transactions find-hanging` reports).
    transaction_partition_verification_enable: bool = True
    # transaction.version (a feature, `kafka-storage format --feature transaction.version=N`):
    # the level ApiVersions gives as finalized, which clients use to choose the protocol. 2
    # (Kafka 4.x's new clusters, KIP-890 part 2): Produce adds partitions and TxnOffsetCommit
    # groups implicitly, every EndTxn bumps the epoch; 1 (or 0, not listed as finalized): clients
    # add partitions with AddPartitionsToTxn and keep one epoch per session.
    transaction_version: int = 2
    # --- Bounded resources ----------------------------------------------------------------
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
    # max.connections: a new connection over it is closed at once. Kafka's default is
    # Int.MaxValue; tmqgate caps the total (each connection may hold up to ~400 KiB of socket
    # buffers outside the pool).
    max_connections: int = 4096
    # max.connections.per.ip: a new connection over it is closed at once (Kafka's default,
    # not capped: many clients may share one address behind NAT).
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
    # A SELECT over stored rows (run by DuckDB off the event loop) reads at most this many
    # bytes of rows entries (after pruning by time range and tbname) and is refused past it,
    # so one query cannot pull a whole disk into memory. tmqgate's own setting.
    sql_select_max_bytes: int = 1_073_741_824
    # The memory DuckDB may use for one SELECT's work (hash tables, sorts, windows) beyond
    # the rows it scans in place; a query needing more is refused. tmqgate's own setting.
    sql_select_memory_bytes: int = 1_073_741_824
    # A SELECT running longer than this is interrupted and refused. tmqgate's own setting.
    sql_select_timeout_ms: int = 60_000
    # Produce decompresses every batch to validate its records (as Kafka's LogValidator does);
    # the decompressed records may not pass this cap, so a small compressed bomb is refused
    # (MESSAGE_TOO_LARGE) before it is inflated past it. tmqgate's own setting: Kafka bounds
    # only the batch as sent, compressed (the topic's max.message.bytes, as tmqgate does too).
    max_decompressed_batch_bytes: int = 134_217_728
    # --- Logging ----------------------------------------------------------------------------
    # Log lines about bad input and failed requests: at most this many of a kind per
    # log_rate_limit_interval_ms, then one line saying how many were suppressed.
    log_rate_limit_messages: int = 10
    # The window of log_rate_limit_messages.
    log_rate_limit_interval_ms: int = 60_000
    # A request whose time (from its decoding to its answer sent, less the wait the client asked
    # for: Fetch's max_wait_ms, a JoinGroup's or SyncGroup's rebalance) reaches this is logged at
    # WARNING with its API, client id, principal and peer; 0 = never. tmqgate's own setting
    # (Kafka logs every request at DEBUG in kafka.request.logger, as tmqgate does in tmqgate.request).
    slow_request_ms: int = 1000
    # --- Client quotas (broker/ops/quotas/) -------------------------------------------------------
    # Kafka's quota.window.num: the samples a client's rate is measured over (10 whole windows
    # + the current).
    quota_window_num: int = 11
    # Kafka's quota.window.size.seconds: the length of one sample.
    quota_window_size_seconds: int = 1
    # Kafka's controller.quota.window.num: with controller_quota_window_size_seconds, the burst
    # of a controller_mutation_rate quota's token bucket (rate x samples x window seconds).
    controller_quota_window_num: int = 11
    # Kafka's controller.quota.window.size.seconds: see controller_quota_window_num.
    controller_quota_window_size_seconds: int = 1
    # --- Authorization ----------------------------------------------------------------------
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
        (keys as the field names), the environment, then non-None `overrides` (command-line
        flags); then checked. Every refusal is a `ConfigError` whose text names the file (or the
        variable, or the flag) and the key: the CLI prints it as the one line of a failed start.

        The environment rule is one for every setting: TMQGATE_ + the TOML key upper-cased, its
        value read as a TOML value (`TMQGATE_NUM_PARTITIONS=3`,
        `TMQGATE_LISTENERS='["PLAINTEXT://0.0.0.0:9092"]'`); a value that is not TOML (a bare
        `0.0.0.0:9092`) is taken as a string. Any other TMQGATE_* variable is refused as a file's
        unknown key is (a misspelt TMQGATE_WAL_LEVLE would otherwise be ignored), except those of
        ENV_NOT_SETTINGS (TMQGATE_PASSWORD, ...), which are not settings and are left alone.
        `environ` defaults to os.environ."""
        values: dict[str, object] = {}
        if path:
            try:
                with open(path, "rb") as fh:
                    values.update(tomllib.load(fh))
            except FileNotFoundError:
                raise ConfigError(f"config file {path} not found: give --config an existing TOML file") from None
            except IsADirectoryError:
                raise ConfigError(f"config file {path} is a directory: give --config a TOML file") from None
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: not valid TOML: {exc}") from None
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{path}: {unknown_names(unknown, sorted(known))}")
        origin = {k: str(path) for k in values}
        from_env = settings_from_env(known, os.environ if environ is None else environ)
        values.update(from_env)
        origin.update({k: ENV_PREFIX + k.upper() for k in from_env})
        for k, v in overrides.items():
            if v is not None:
                values[k] = v
                origin[k] = "--" + k.replace("_", "-")
        config = cls(**values)  # type: ignore[arg-type]
        try:
            config.check()
        except ConfigError as exc:
            where = origin.get(exc.key or "")
            raise ConfigError(f"{where}: {exc}" if where else str(exc), exc.key) from None
        return config

    def check(self) -> None:
        """Refuse settings of the wrong type, out of range, or contradicting each other (Kafka
        checks its configs' types and ranges at start too, ConfigDef): the one place the
        settings are validated. Raises ConfigError naming the key."""
        self._check_types_and_ranges()
        self._check_addresses()
        self._check_files()
        if self.cluster is not None:
            self._check_cluster(self.cluster)
        self._check_security()
        self._check_http()
        pool = self.queued_max_request_bytes
        if 0 < pool < self.socket_request_max_bytes:
            raise ConfigError(f"queued_max_request_bytes ({pool}) must be -1 or at least "
                              f"socket_request_max_bytes ({self.socket_request_max_bytes})", "queued_max_request_bytes")

    def _check_types_and_ranges(self) -> None:
        hints = get_type_hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            expected = type_name(hints[f.name], value)
            if expected:
                raise ConfigError(f"{f.name} must be {expected}, not {value!r}", f.name)
        ints = {f.name: (0, None) for f in fields(self) if hints[f.name] is int}
        for name, (low, high) in {**ints, **RANGES}.items():
            value = getattr(self, name)
            if value is None:
                continue
            if value < low or (high is not None and value > high):
                span = f"at least {low}" if high is None else f"between {low} and {high}"
                raise ConfigError(f"{name} = {value!r} is out of range: must be {span}", name)

    def _check_addresses(self) -> None:
        for name in ("listen", "http"):
            value = getattr(self, name)
            if not is_hostport(value):
                raise ConfigError(f"{name} = {value!r} is not HOST:PORT (e.g. 127.0.0.1:9092; "
                                  "a port is required, 0 to pick a free one)", name)
        told = self.advertised_listener
        if told is not None and not (is_hostport(told) or is_host(told)):
            raise ConfigError(f"advertised_listener = {told!r} is not HOST:PORT or HOST (e.g. kafka.example.com:9092, "
                              "or kafka.example.com for the bound port)", "advertised_listener")

    def _check_files(self) -> None:
        for name in ("ssl_certfile", "ssl_keyfile", "ssl_cafile"):
            value = getattr(self, name)
            if value is not None and not Path(value).is_file():
                raise ConfigError(f"{name} = {value!r}: no such file", name)
            for listener, path in getattr(self, f"listener_{name}").items():
                if not Path(path).is_file():
                    raise ConfigError(f"listener_{name}: {listener} = {path!r}: no such file", f"listener_{name}")

    def _check_cluster(self, cluster: str) -> None:
        """The settings a node of a cluster (``cluster`` set) needs besides a single broker's."""
        from tmqgate.broker.metadata.view import parse_cluster
        try:
            parse_cluster(cluster)
        except ValueError as exc:
            raise ConfigError(str(exc), "cluster") from None
        if self.inter_broker_sasl_mechanism not in INTER_BROKER_MECHANISMS:
            raise ConfigError(f"inter_broker_sasl_mechanism: one of {', '.join(INTER_BROKER_MECHANISMS)}, not "
                              f"{self.inter_broker_sasl_mechanism!r}", "inter_broker_sasl_mechanism")
        from tmqgate.storage.producers import PRODUCER_ID_STRIDE
        if self.node_id >= PRODUCER_ID_STRIDE:  # a node's producer ids are ≡ node_id mod the stride
            raise ConfigError(f"node_id must be below {PRODUCER_ID_STRIDE} on a cluster, not {self.node_id}",
                              "node_id")

    def _check_security(self) -> None:
        if self.authorizer not in ("acl", "none"):
            raise ConfigError(f'authorizer must be "acl" or "none", not {self.authorizer!r}', "authorizer")
        bad = [p for p in self.super_users if ":" not in p]
        if bad:
            raise ConfigError(f"super_users must be principals such as User:admin: {bad}", "super_users")
        from tmqgate.broker.identity.principal import parse_rules
        try:
            parse_rules(self.ssl_principal_mapping_rules)  # a bad rule refuses the start, as in Kafka
        except ValueError as exc:
            raise ConfigError(f"ssl_principal_mapping_rules: {exc}", "ssl_principal_mapping_rules") from None
        if self.http_tls and not (self.ssl_certfile and self.ssl_keyfile):
            raise ConfigError("http_tls needs ssl_certfile and ssl_keyfile", "http_tls")
        if self.ssl_client_auth not in ("required", "requested", "none"):
            raise ConfigError(f"ssl_client_auth must be required, requested or none, not {self.ssl_client_auth!r}",
                              "ssl_client_auth")
        for name, value in self.listener_ssl_client_auth.items():
            if value not in ("required", "requested", "none"):
                raise ConfigError(f"listener_ssl_client_auth: {name} must be required, requested or none, "
                                  f"not {value!r}", "listener_ssl_client_auth")
        if self.ssl_min_version not in ("TLSv1.2", "TLSv1.3"):
            raise ConfigError(f"ssl_min_version must be TLSv1.2 or TLSv1.3, not {self.ssl_min_version!r}",
                              "ssl_min_version")

    def _check_http(self) -> None:
        if self.http_auth not in ("none", "basic"):
            raise ConfigError(f"http_auth must be none or basic, not {self.http_auth!r}", "http_auth")
        if self.http_auth == "none" and not self.allow_insecure_http and not loopback(self.http_address[0]):
            raise ConfigError(f"the SQL front would listen on {self.http} with no authentication: set "
                              'http_auth = "basic", or allow_insecure_http = true to accept that', "http")

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_hostport(self.listen)

    @property
    def http_address(self) -> tuple[str, int]:
        return parse_hostport(self.http)
