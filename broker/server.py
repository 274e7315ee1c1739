"""The asyncio TCP server: frames in, handlers run, responses out — one request at a time
per connection, in order, as Kafka answers a channel (it mutes it while a request is in flight).

A bad frame fails its own connection only: Kafka closes the connection when it cannot parse
a request header or body, or when the size prefix passes socket.request.max.bytes; an
unsupported ApiVersions version gets the v0 error response carrying our ranges (KIP-511).
A request that parses is always answered: an exception escaping its handler (or the encoding
of its answer) becomes Kafka's error answer for that API and version (protocol.error_response:
UNKNOWN_SERVER_ERROR, or a KafkaError's own code), and the connection lives on. Log lines about
bad input and failures are rate-limited (broker/ratelimit.py).

Framing is the StreamReader's own: `readexactly(4)` for the size, checked before the body is
read, then `readexactly(size)` — one copy out of the reader's buffer, nothing else buffered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import ssl
import struct
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from tmqgate.broker.acl.authorizer import Authorizer
from tmqgate.broker.acl.sql_access import SqlAccess
from tmqgate.broker.apis import MAX_DEFERRED, ApiKey, BoundHandler, Deferred, api_versions_body, bind
from tmqgate.broker.auth.credentials import set_password
from tmqgate.broker.auth.session import SASL_PROTOCOLS, Action, Authenticator, authenticator
from tmqgate.broker.broker_configs import BrokerConfigs
from tmqgate.broker.client import ANONYMOUS, ClientInfo, current_client
from tmqgate.broker.config import BrokerConfig
from tmqgate.broker.dnodes import Dnodes
from tmqgate.broker.errors import KafkaError
from tmqgate.broker.group_configs import GroupConfigs
from tmqgate.broker.group_coordinator import group_coordinator
from tmqgate.broker.handlers import API_TABLE
from tmqgate.broker.handlers.context import (
    AclApis,
    AdminApis,
    ClusterApis,
    DataPlane,
    GroupApis,
    Node,
    TxnApis,
    TxnDataApis,
    TxnGate,
)
from tmqgate.broker.limits import ConnectionLimits, FrameMemory, MemoryPool
from tmqgate.broker.listeners import (
    Listener,
    advertised_addresses,
    load_certificates,
    parse_listeners,
    peer_security,
    server_ssl_context,
)
from tmqgate.broker.log_cleaner import LogCleaner
from tmqgate.broker.metrics import Metrics
from tmqgate.broker.principal import NoMatchingRule, certificate_principal, parse_rules
from tmqgate.broker.quotas import MUTATION_APIS, ClientQuotaManagers
from tmqgate.broker.ratelimit import RateLimitedLog
from tmqgate.broker.tdengine import Executor, GroupQueries, SqlError, TsdbCatalog
from tmqgate.broker.topic_configs import effective
from tmqgate.broker.topics import TopicRegistry
from tmqgate.broker.txn_coordinator import txn_coordinator
from tmqgate.broker.txn_markers import MarkerWriter
from tmqgate.broker.waiters import DataNotifier
from tmqgate.protocol import clock
from tmqgate.protocol.codec import iter_precompile
from tmqgate.protocol.error_response import error_response
from tmqgate.protocol.errors import ErrorCode
from tmqgate.protocol.messages import (
    InvalidRequest,
    Request,
    UnknownApi,
    UnsupportedVersion,
    decode_request,
    encode_response,
    encode_response_parts,
)
from tmqgate.storage import Store

if TYPE_CHECKING:
    from tmqgate.broker.cluster.catalog import SharedCatalog
    from tmqgate.broker.cluster.coordinator_state import CoordinatorState
    from tmqgate.broker.cluster.membership import Membership
    from tmqgate.broker.cluster.replication import Replication
    from tmqgate.broker.cluster.transactions import ClusterTransactions

log = logging.getLogger("tmqgate.server")
# Every completed request at DEBUG, as Kafka's kafka.request.logger (enable with --log-level DEBUG).
_request_log = logging.getLogger("tmqgate.request")
_SIZE = struct.Struct(">i")
# The StreamReader pauses its socket past twice this many unread bytes: what a connection may
# buffer outside the request pool (frames themselves are reserved in the pool first).
_READ_LIMIT = 64 * 1024
#: how long a statement sent to the broker leading its database may take there (a 1 MiB INSERT: seconds)
SQL_FORWARD_TIMEOUT_S = 120.0
#: How long a closing connection waits for the peer's side of the close (TLS close_notify), s.
_CLOSE_WAIT_S = 1.0
#: After a refusal answer, how long the broker waits for the client to close first (seconds).
_PEER_CLOSE_WAIT_S = 1.0
_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16


def write_parts(transport: asyncio.WriteTransport, fd: int, parts: list[bytes | bytearray | memoryview]) -> None:
    """Send one response's buffers in order without joining them.

    `StreamWriter.writelines` joins its buffers (a full copy of a Fetch response), and a
    socket transport then copies whatever the socket did not take into its own buffer. Here,
    when the transport has nothing queued, one gathered write (`writev`) hands the parts to
    the kernel straight from the stored batches; only what the socket did not take is given
    to the transport, which queues it behind and sends it when the socket is writable. With
    `fd` -1 (no plain socket, e.g. TLS) or data already queued, each part goes to the
    transport as it is: sent at once or copied once into its buffer, in order either way.
    """
    if len(parts) == 1:
        transport.write(parts[0])
        return
    i = 0
    n = 0
    if fd >= 0 and not transport.get_write_buffer_size() and not transport.is_closing():
        count = len(parts)
        while i < count:
            chunk = parts[i:i + _IOV_MAX]
            try:
                n = os.writev(fd, chunk)
            except (BlockingIOError, InterruptedError):
                n = 0
            for part in chunk:
                if n < len(part):
                    break
                n -= len(part)
                i += 1
            else:
                continue  # the whole chunk went out
            break
        if i == count:
            return
    if n:  # the rest of a part the socket took in part: a view, not a copy of it
        transport.write(memoryview(parts[i])[n:])
        i += 1
    for part in parts[i:]:
        transport.write(part)


def _socket_fd(writer: asyncio.StreamWriter) -> int:
    """The plain socket under `writer` that `write_parts` may write to directly, or -1."""
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is None or transport.get_extra_info("sslcontext") is not None:
        return -1
    return int(sock.fileno())



#: The data path's APIs: their codecs, newest version, are built in the background from start-up
#: (Broker._precompile); the others', and older versions', by their first request.
PRECOMPILED_APIS = (ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS,
                    ApiKey.FIND_COORDINATOR, ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.HEARTBEAT,
                    ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.INIT_PRODUCER_ID)

class Broker:
    """One tmqgate broker node: storage, topic registry, and the Kafka listener.

    The composition root: it owns the network and builds every collaborator; handlers get
    the small contexts of broker/handlers/context.py, never the Broker itself."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.store = Store(config.data_dir, wal_level=config.wal_level,
                           fsync_period_ms=config.wal_fsync_period_ms,
                           write_buffer_size=config.leveldb_write_buffer_bytes,
                           reserve_bytes=config.disk_reserve_bytes)
        if self.store.read_only:
            log.error("storage is read-only until there is room: %s (writes answer KAFKA_STORAGE_ERROR, "
                      "reads work; disk_reserve_bytes=%d)", self.store.read_only, config.disk_reserve_bytes)
        self.catalog = TsdbCatalog(self.store)
        self.topics = TopicRegistry(self.store, self.catalog, max_partitions=config.max_partitions,
                                    max_databases=config.max_databases,
                                    offsets_partitions=config.offsets_topic_num_partitions,
                                    transaction_partitions=config.transaction_state_log_num_partitions,
                                    transaction_version=config.transaction_version)
        self.notifier = DataNotifier()
        # Commit/abort markers to partitions (the transaction coordinator and WriteTxnMarkers).
        self.markers = MarkerWriter(self.store, self.topics, self.notifier)
        self.apis = API_TABLE
        # authorizer = "acl": Kafka's ACLs, persisted in the store; "none": no checks at all.
        self.authorizer = (Authorizer(self.store, config.super_users, config.allow_everyone_if_no_acl_found)
                           if config.authorizer == "acl" else None)
        self.coordinator = group_coordinator(self.store, self.topics, config, self.authorizer)
        self.group_configs = GroupConfigs(self.store, config, self.coordinator)
        self.broker_configs = BrokerConfigs(self.store, config, self.topics)
        # The transaction coordinator (broker/txn_coordinator.py): markers through the data
        # plane's MarkerWriter, group offsets through the group coordinator's complete_transaction.
        self.transactions = txn_coordinator(self.store, config, markers=self.markers,
                                            groups=self.coordinator)
        # and a TxnOffsetCommit is verified with it first (Kafka: the producer's transaction
        # must hold the group, added by AddOffsetsToTxn)
        self.coordinator.machine.offsets.txn_gate = self.transactions
        # The one SQL executor: the HTTP front, `tmqgate sql` and schemaless ingestion share it.
        admin = self.coordinator.machine.admin
        self.started_ms = clock.now_ms()
        # SHOW DNODES / SHOW VGROUPS: this node, or the cluster's nodes and placements (broker/dnodes.py)
        self.dnodes = Dnodes(config.node_id, self.store, self.topics, config.max_partitions, self.started_ms)
        self.executor = Executor(self.store, self.catalog, self.topics, self.notifier.notify,
                                 GroupQueries(subscribed_to=admin.groups_subscribed_to,
                                              group_ids=admin.group_ids, members=admin.members,
                                              now_ms=self.coordinator.now),
                                 parse_timeout_ms=config.sql_parse_timeout_ms, placement=self.dnodes.queries())
        if self.authorizer is not None:  # SQL statements checked for their caller too
            self.executor.access = SqlAccess(self.authorizer, set_user_password=self._set_user_password)
        self._servers: list[tuple[Listener, asyncio.Server]] = []
        # One TLS context per listener TLS settings in use (listeners with the same share it).
        self._ssl: dict[tuple[str, str | None, str | None, str | None], tuple[Listener, ssl.SSLContext]] = {}
        self._mapping_rules = parse_rules(config.ssl_principal_mapping_rules)
        self.advertised_by_listener: dict[str, tuple[str, int]] = {}
        self.authenticator: Authenticator | None = None  # built at start if a listener speaks SASL
        self._tasks: list[asyncio.Task[None]] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._handlers: dict[int, BoundHandler] = {}
        # Set once the handlers are bound: on a cluster the listeners are open (their addresses
        # are what the broker registers) before etcd is joined; early connections wait.
        self._ready = asyncio.Event()
        # queued.max.request.bytes and max.connections[.per.ip] (broker/limits.py).
        self.pool = MemoryPool(config.queued_max_request_bytes)
        self.connection_limits = ConnectionLimits(config.max_connections, config.max_connections_per_ip)
        self.advertised: tuple[str, int] = ("127.0.0.1", 9092)
        self.membership: Membership | None = None  # with `cluster`: broker/cluster/membership.py
        self.replication: Replication | None = None  # with `cluster`: broker/cluster/replication.py
        self.group_state: CoordinatorState | None = None  # with `cluster`: broker/cluster/coordinator_state.py
        self.txn_state: CoordinatorState | None = None  # with `cluster`: the same for transactional ids
        self.cluster_txns: ClusterTransactions | None = None  # with `cluster`: broker/cluster/transactions.py
        self.shared_catalog: SharedCatalog | None = None  # with `cluster`: broker/cluster/catalog.py
        # Captures every request frame when set (tests use it for byte-for-byte round trips).
        self.frame_hook: Any = None
        self.limited_log = RateLimitedLog(log, config.log_rate_limit_messages,
                                          config.log_rate_limit_interval_ms / 1000)
        self.quotas = ClientQuotaManagers(self.store, config, self.limited_log)
        # GET /metrics (broker/metrics.py): handlers reach it through their contexts.
        self.metrics = Metrics(self.store, self.topics, config.metrics_max_lag_series, self.quotas)
        self.metrics.rebalances = self.coordinator.machine.rebalances
        self.log_cleaner = LogCleaner(self.store, config, self.topics.broker_defaults)
        self.metrics.log_cleaner = self.log_cleaner
        # slow_request_ms: 0 = never (as infinity, which no request's time reaches).
        self._slow_request_ms = config.slow_request_ms or float("inf")

    async def start(self) -> None:
        listeners = parse_listeners(self.config)
        self._ssl = {li.tls_settings: (li, server_ssl_context(self.config, li)) for li in listeners if li.tls}
        bound: dict[str, tuple[str, int]] = {}
        for listener in listeners:
            server = await asyncio.start_server(
                functools.partial(self._serve_connection, listener=listener), listener.host or None,
                listener.port, reuse_address=True, limit=_READ_LIMIT,
                ssl=self._ssl[listener.tls_settings][1] if listener.tls else None)
            self._servers.append((listener, server))
            bound[listener.name] = (listener.host, server.sockets[0].getsockname()[1])
        self.advertised_by_listener = advertised_addresses(self.config, bound)
        if any(li.security_protocol in SASL_PROTOCOLS for li in listeners):
            self.authenticator = authenticator(self.config, self.store, self.limited_log)
            self.metrics.authenticator = self.authenticator
        self.advertised = self.dnodes.advertised = self.advertised_by_listener[listeners[0].name]
        if self.config.cluster is not None:  # imported only on a cluster: one node needs no etcd
            from tmqgate.broker.cluster.membership import Membership
            from tmqgate.broker.cluster.topics import ClusterTopics

            self.membership = Membership(self.config.cluster, self.config.node_id, self.advertised,
                                         self.config.cluster_session_timeout_ms,
                                         self.config.leader_imbalance_check_interval_seconds
                                         if self.config.auto_leader_rebalance_enable else None,
                                         facts=self.dnodes.facts(), http=self.config.http)
            self.dnodes.membership = self.membership
            # how it dials the others' first listener (TLS, SASL as the brokers' user)
            self.membership.peer_security = peer_security(self.config, listeners[0])
            from tmqgate.broker.cluster.coordinator_state import CoordinatorState, kinds
            from tmqgate.broker.cluster.replication import Replication

            cluster_topics = ClusterTopics(self.membership, self.topics)  # the registry's `cluster` from now on
            self.replication = Replication(self.config.node_id, self.store, self.topics, self.membership,
                                           self.notifier, self.config.replica_lag_time_max_ms,
                                           self.config.replica_fetch_wait_max_ms)
            self.membership.on_change.append(self.replication.apply)
            from tmqgate.broker.cluster.catalog import SharedCatalog

            # ACLs, SCRAM users, dynamic configs, quotas: the cluster's, in etcd (broker/cluster/catalog.py)
            reloads = [self.broker_configs.reload, self.group_configs.reload, self.quotas.reload]
            if self.authorizer is not None:
                reloads.append(self.authorizer.reload)
            self.shared_catalog = SharedCatalog(self.membership, self.store, reloads)
            from tmqgate.broker.cluster.sql import ClusterSql

            # SQL databases placed in etcd, statements sent to their leader (broker/cluster/sql.py)
            http_tls = ssl.create_default_context(cafile=self.config.ssl_cafile) if self.config.http_tls else None
            self.executor.cluster = ClusterSql(self.config.node_id, self.membership, cluster_topics, self.topics,
                                               self.store, self.replication, http_tls, SQL_FORWARD_TIMEOUT_S,
                                               self.config.replica_lag_time_max_ms / 1000)
            groups, txns = kinds(self.store, self.config, self.coordinator.machine.partition_of,
                                 self.transactions.machine.partition_of)
            self.group_state, self.txn_state = (
                CoordinatorState(kind, self.config.node_id, self.store, self.topics, cluster_topics, self.membership,
                                 self.replication, self.notifier, runtime, self.config.offsets_commit_timeout_ms)
                for kind, runtime in ((groups, self.coordinator), (txns, self.transactions)))
            # after replication (its leadership); groups first: a transaction's markers end them
            self.membership.on_change.append(self.group_state.apply)
            self.membership.on_change.append(self.txn_state.apply)
            from tmqgate.broker.cluster.transactions import ClusterTransactions

            # transactions over the brokers: markers and group offsets sent to their leaders,
            # transactional batches verified with their coordinator (broker/cluster/transactions.py)
            self.cluster_txns = ClusterTransactions(self.config.node_id, self.membership, self.topics,
                                                    self.replication, self.group_state, self.txn_state,
                                                    self.markers, self.transactions, self.coordinator)
            self.transactions.machine.markers = self.cluster_txns
            self.transactions.machine.groups = self.cluster_txns
            self.coordinator.machine.offsets.txn_gate = self.cluster_txns
            self.store.producers.use_slot(self.config.node_id)  # producer ids unique in the cluster
            await self.membership.start()
        self._handlers = bind(self.apis, self._contexts())
        self._ready.set()
        self._tasks.append(asyncio.create_task(self._housekeeping()))
        if self.config.log_cleaner_enable:  # compacted topics (broker/log_cleaner.py)
            self._tasks.append(asyncio.create_task(self.log_cleaner.run()))
        self._tasks.append(asyncio.create_task(self._precompile()))  # last: tests wait for it
        await self.coordinator.start()
        await self.transactions.start()
        for listener, server in self._servers:
            log.info("tmqgate listening on %s://%s:%d (%s; data dir %s)", listener.name, listener.host,
                     server.sockets[0].getsockname()[1], listener.security_protocol, self.config.data_dir)

    def _set_user_password(self, user: str, password: str, create: bool) -> None:
        """CREATE USER / ALTER USER … PASS: the user's SCRAM credentials, as AlterUserScramCredentials."""
        try:
            set_password(self.store.users, user, password, create=create)
        except (ValueError, KeyError) as exc:  # UserExists, UnknownUser, an empty name or password
            raise SqlError(str(exc)) from None

    def reload_certificates(self) -> None:
        """SIGHUP: TLS listeners take the certificate files as they are now (new handshakes)."""
        if not self._ssl:
            return
        try:
            for listener, context in self._ssl.values():
                load_certificates(context, self.config, listener)
        except (OSError, ssl.SSLError) as exc:  # keep serving with the certificates loaded before
            log.error("could not reload TLS certificates (%s); keeping the ones in use", exc)
            return
        log.info("reloaded TLS certificates from %s", self.config.ssl_certfile)

    def _contexts(self) -> dict[type, Any]:
        """One context of each handler family (the advertised address is known from start)."""
        cfg = self.config
        node = Node(cfg.node_id, cfg.cluster_id, self.advertised)
        auth = self.authorizer
        txn_gate: TxnGate = self.transactions if self.cluster_txns is None else self.cluster_txns
        return {
            DataPlane: DataPlane(self.store, self.topics, self.notifier, self.executor,
                                 cfg.max_decompressed_batch_bytes, quotas=self.quotas, authorizer=auth,
                                 metrics=self.metrics, limited_log=self.limited_log,
                                 transactions=(txn_gate if cfg.transaction_partition_verification_enable else None),
                                 replication=self.replication,
                                 txn_cluster=(self.cluster_txns if cfg.transaction_partition_verification_enable
                                              else None)),
            AdminApis: AdminApis(self.store, self.topics, cfg, self.notifier, quotas=self.quotas,
                                 authorizer=auth, group_configs=self.group_configs,
                                 broker_configs=self.broker_configs),
            ClusterApis: ClusterApis(node, self.topics, cfg, self.apis, authorizer=auth, membership=self.membership),
            GroupApis: GroupApis(self.coordinator, self.topics, node, authorizer=auth, membership=self.membership,
                                 group_state=self.group_state, txn_state=self.txn_state,
                                 txn_cluster=self.cluster_txns),
            AclApis: AclApis(auth),
            TxnApis: TxnApis(self.transactions, self.topics, authorizer=auth, state=self.txn_state),
            TxnDataApis: TxnDataApis(self.markers, self.store, self.topics, authorizer=auth, cluster=self.cluster_txns),
        }

    @property
    def port(self) -> int:
        """The first listener's bound port."""
        return self.ports[self._servers[0][0].name]

    @property
    def ports(self) -> dict[str, int]:
        """Each listener's bound port, by listener name."""
        return {li.name: server.sockets[0].getsockname()[1] for li, server in self._servers}

    @property
    def bound_addresses(self) -> dict[str, list[tuple[str, int]]]:
        """Each listener's listening sockets, (IP, port) each, by listener name: where clients reach it."""
        return {li.name: [tuple(sock.getsockname()[:2]) for sock in server.sockets] for li, server in self._servers}

    async def stop(self) -> None:
        for _, server in self._servers:
            server.close()
        if self.replication is not None:
            self.replication.stop()
        if self.cluster_txns is not None:
            self.cluster_txns.stop()
        for task in [*self._tasks, *self._connections]:
            task.cancel()
        for task in [*self._tasks, *self._connections]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for _, server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        await self.coordinator.stop()
        await self.transactions.stop()
        if self.membership is not None:
            await self.membership.stop()
        self.executor.close()
        self.log_cleaner.close()  # waits for a cleaner step still reading in its thread
        self.store.close()
        self.limited_log.flush()

    async def _precompile(self) -> None:
        """Build the codecs of the data path's APIs at their newest version (what Java, franz-go
        and recent librdkafka send: 22 codecs), in the background from start-up, one codec (~4 ms)
        at a time between other events: such a client's first produce, fetch or commit then
        finds its codec built instead of compiling it in its latency, and readiness does not
        wait for it. Everything else (older versions, admin, groups' joins, transactions) is
        built by its first request, a few ms once per broker: building every version of these
        APIs (192 codecs) cost each broker start 0.5 s of CPU, all of them 1.7 s (a test suite
        starts hundreds of brokers). A request that comes before its codec is built compiles
        it (codecs are cached)."""
        t0 = time.perf_counter()
        n = 0
        for _ in iter_precompile((k, self.apis[k].max_version) for k in PRECOMPILED_APIS if k in self.apis):
            n += 1
            await asyncio.sleep(0)
        log.debug("built %d codecs in %.2fs", n, time.perf_counter() - t0)
        # The start-up heap (modules, codecs, catalog) is kept out of the collector's sight
        # from now on: a full collection, which a large request's temporaries set off, would
        # walk all of it on the event loop (tens of ms; hundreds on a loaded host) — issue 11.
        gc.freeze()

    async def _housekeeping(self) -> None:
        """Periodic jobs: WAL fsync (WAL_FSYNC_PERIOD), retention (log.retention.check.interval.ms)
        and the archiver's disk guard. A failing job is logged and retried on its next turn."""
        cfg = self.config
        jobs: list[tuple[float, Any]] = [
            (cfg.retention_check_interval_ms / 1000,
             lambda: self.metrics.retention_removed(
                 self.store.enforce_retention(clock.now_ms(), self.retention_defaults()))),
            (cfg.archiver_interval_ms / 1000, self._collect),
            (cfg.disk_check_interval_ms / 1000, self._check_space),
        ]
        if cfg.wal_level >= 2 and cfg.wal_fsync_period_ms > 0:
            jobs.append((cfg.wal_fsync_period_ms / 1000, self.store.sync))
        due = [time.monotonic() + every for every, _ in jobs]
        while True:
            await asyncio.sleep(max(0.0, min(due) - time.monotonic()))
            now = time.monotonic()
            for i, (every, job) in enumerate(jobs):
                if now >= due[i]:
                    try:
                        job()
                    except Exception:  # housekeeping must never take the broker down
                        log.exception("housekeeping job failed")
                    due[i] = now + every

    def _check_space(self) -> None:
        """A full disk: take writes again once there is room (storage.space logs it)."""
        if self.store.read_only:
            self.store.check_space()

    def _collect(self) -> None:
        """The archiver (003): oldest entries go first once the data passes its limits."""
        cfg = self.config
        removed = self.store.collect(max_total_bytes=cfg.data_max_bytes,
                                     disk_usage_max_percent=cfg.disk_usage_max_percent,
                                     volume_bytes=cfg.disk_volume_bytes)
        self.metrics.archiver_removed(len(removed))
        if removed:
            log.warning("archiver removed %d WAL range(s) to stay within the disk limits", len(removed))

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                *, listener: Listener) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        if not self._ready.is_set():
            await self._ready.wait()
        peer = writer.get_extra_info("peername")
        host = peer[0] if peer else ""
        # connection_creation_rate of the ip: over it, Kafka closes the new connection unserved
        # once the throttle time has passed.
        delay_ms = self.quotas.connection_throttle(host) if self.quotas.ip_active else 0
        refused = self.connection_limits.admit(host) if not delay_ms else "connection_creation_rate"
        if refused is not None:
            self.limited_log.warning("refused-connection", "closing new connection from %s: %s", peer, refused)
            if delay_ms:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(delay_ms / 1000)
            self._connections.discard(task)
            writer.transport.abort()
            return
        memory = FrameMemory(self.pool)
        self.metrics.connection(listener.name, 1)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("connection from %s on listener %s", peer, listener.name)
        try:
            current_client.set(self._client_info(listener, peer, reader, writer))
            await self._connection_loop(reader, writer, peer, memory)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            # stop() cancels open connections: end quietly (a cancelled task would have
            # Python 3.11's start_server callback log a traceback per connection).
            pass
        except TimeoutError as exc:  # rate-limited: an attacker's sockets time out by the thousand
            self.limited_log.log(logging.INFO, "timed-out", "closing %s: %s", peer, exc)
        except NoMatchingRule as exc:  # Kafka fails the authentication of such a certificate
            self.limited_log.warning("authentication", "closing %s: %s", peer, exc)
        except Exception:  # a bug: its traceback, at most log_rate_limit_messages an interval
            self.limited_log.log(logging.ERROR, "connection-failed", "connection %s failed", peer, exc_info=True)
        finally:
            self.metrics.connection(listener.name, -1)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("connection from %s on listener %s closed", peer, listener.name)
            memory.free()
            self.connection_limits.release(host)
            self._connections.discard(task)
            writer.close()
            # A TLS close waits for the peer's close_notify (asyncio: up to 30 s); a client
            # that never sends it must not hold the connection, nor the broker's shutdown.
            try:
                async with asyncio.timeout(_CLOSE_WAIT_S):
                    await writer.wait_closed()
            except Exception:
                writer.transport.abort()

    def _client_info(self, listener: Listener, peer: Any, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> ClientInfo:
        """Who the new connection is: its listener, and on SSL its certificate's principal;
        `gone()` is true once the peer has closed (Kafka's broker closes a connection whose
        read ends: nothing more is answered on it)."""
        transport = writer.transport

        def gone() -> bool:
            return reader.at_eof() or transport.is_closing()

        principal = ANONYMOUS
        if listener.security_protocol == "SSL":
            ssl_object = writer.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der:
                principal = certificate_principal(der, self._mapping_rules)
        return ClientInfo(host=peer[0] if peer else "", port=peer[1] if peer else 0,
                          listener=listener.name, security_protocol=listener.security_protocol,
                          principal=principal, advertised=self.advertised_by_listener[listener.name], gone=gone)

    async def _connection_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               peer: Any, memory: FrameMemory) -> None:
        transport = writer.transport
        fd = _socket_fd(writer)
        # SASL listeners: the connection's authentication says which requests may pass (auth/session.py)
        session = self.authenticator.session(current_client.get()) if self.authenticator else None
        owed: list[asyncio.Future[None]] = []  # answers still to write (Deferred), oldest first
        try:
            await self._serve_requests(reader, writer, peer, memory, transport, fd, session, owed)
        finally:
            for answer in owed:  # the connection ends: nothing more is written to it
                if not answer.done():
                    answer.cancel()
                elif not answer.cancelled():
                    answer.exception()  # a failed write: the connection is gone anyway

    async def _serve_requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any,
                              memory: FrameMemory, transport: Any, fd: int, session: Any,
                              owed: list[asyncio.Future[None]]) -> None:
        # A SASL connection authenticates within sasl_authentication_timeout_ms; until it has,
        # its frames (at most 512 KiB) are read outside the request pool, as Kafka reads them:
        # sockets that never authenticate cannot hold the pool that everyone's requests need.
        deadline = (time.monotonic() + self.config.sasl_authentication_timeout_ms / 1000
                    if session is not None else None)
        while True:
            if deadline is not None and session.ever_authenticated:
                deadline = None
            (size,) = _SIZE.unpack(await self._read_size(reader, deadline))
            memory.free()  # the previous frame (alive until now in this loop) goes back
            max_size = self.config.socket_request_max_bytes if session is None else session.max_frame(
                self.config.socket_request_max_bytes)
            if size < 0 or size > max_size:
                self.limited_log.warning("bad-frame", "closing %s: frame of %d bytes is over "
                                         "socket.request.max.bytes (%d)", peer, size, max_size)
                return
            frame = await self._read_frame(reader, size, memory if session is None or session.authenticated
                                           else None, deadline)
            if self.frame_hook is not None:
                self.frame_hook(frame)
            if session is not None and session.raw_tokens:  # after SaslHandshake v0: raw SASL tokens
                token = await session.on_token(frame)
                if token is None:
                    return
                await _written(owed)
                writer.write(_SIZE.pack(len(token)) + token)
                await writer.drain()
                continue
            try:
                request = decode_request(frame)
            except UnsupportedVersion as exc:
                if exc.api_key == ApiKey.API_VERSIONS:
                    assert exc.correlation_id is not None  # decode_request read the header
                    await _written(owed)
                    writer.write(self.api_versions_error(exc.correlation_id))
                    await writer.drain()
                    continue
                self.limited_log.warning("bad-frame", "closing %s: unsupported version %d of api %d",
                                         peer, exc.api_version, exc.api_key)
                return
            except (UnknownApi, InvalidRequest) as exc:
                self.limited_log.warning("bad-frame", "closing %s: %s", peer, exc)
                return
            entry = self.apis.get(request.api_key)
            if entry is None or not entry.min_version <= request.api_version <= entry.max_version:
                if request.api_key == ApiKey.API_VERSIONS:
                    await _written(owed)
                    writer.write(self.api_versions_error(request.correlation_id))
                    await writer.drain()
                    continue
                self.limited_log.warning("bad-frame", "closing %s: api %d v%d not served",
                                         peer, request.api_key, request.api_version)
                return
            if session is not None:
                step = await session.on_request(request)
                if step.action is not Action.PASS:
                    if step.body is not None:
                        await _written(owed)
                        writer.write(encode_response(request.api_key, request.api_version,
                                                     request.correlation_id, step.body))
                        await writer.drain()
                    if step.action is Action.ANSWER:
                        continue
                    if step.body is not None:
                        await _let_peer_close_first(reader)
                    return
            request_started = time.monotonic()  # for slow_request_ms and the request log
            quotas = self.quotas
            clock = quotas.clock() if quotas.active else None
            throttle_ms = 0
            metrics = self.metrics
            started = time.perf_counter()
            try:
                body = await self._handlers[request.api_key](request)
                if isinstance(body, Deferred):
                    if clock is None:  # answered later, in order; the next requests are served meanwhile
                        for answer in [t for t in owed if t.done()]:
                            owed.remove(answer)
                            answer.result()  # a failed write (the connection is gone) ends the loop
                        owed.append(memory.hand_over(self._answer_later(
                            request, body.answer, owed[-1] if owed else None, writer, fd, peer,
                            request_started, started), body.answer))
                        if len(owed) >= MAX_DEFERRED:
                            await asyncio.wait([owed[0]])
                        continue
                    body = await body.answer  # client quotas charge the answer: not deferred
                if clock is not None:  # client quotas: the throttle time goes in the answer
                    throttle_ms = quotas.charge(request, body, clock, size)
                if body is not None and quotas.mutation_active and request.api_key in MUTATION_APIS:
                    throttle_ms = max(throttle_ms, body.get("throttle_time_ms") or 0)  # controller_mutation_rate
                metrics.request(request.api_key, request.api_version, (time.perf_counter() - started) * 1000)
                started = 0.0
                if body is None:
                    if throttle_ms:
                        await asyncio.sleep(throttle_ms / 1000)
                    continue
                # Large record payloads (Fetch's stored batches) go out uncopied.
                if body.get("error_code"):  # the answer's top-level error (partitions' are the handlers')
                    metrics.error(request.api_key, body["error_code"])
                parts = encode_response_parts(request.api_key, request.api_version,
                                              request.correlation_id, body)
            except Exception as exc:  # every failure is an answer (CancelledError is not one)
                if started:  # the handler failed (not the encoding of its answer): not counted yet
                    metrics.request(request.api_key, request.api_version, (time.perf_counter() - started) * 1000)
                metrics.error(request.api_key, exc.code if isinstance(exc, KafkaError)
                              else ErrorCode.UNKNOWN_SERVER_ERROR)
                body = self._failed(request, peer, exc)
                if body is None:
                    return  # Kafka closes a connection it owes no answer (Produce acks=0)
                parts = encode_response_parts(request.api_key, request.api_version,
                                              request.correlation_id, body)
            await _written(owed)
            write_parts(transport, fd, parts)
            await writer.drain()
            elapsed_ms = (time.monotonic() - request_started) * 1000
            if elapsed_ms >= self._slow_request_ms or _request_log.isEnabledFor(logging.DEBUG):
                self._log_request(request, peer, elapsed_ms, body)
            if throttle_ms:
                # Over a quota: the answer went out at once; the connection is not read for the
                # throttle time (Kafka mutes the channel, KIP-219).
                await asyncio.sleep(throttle_ms / 1000)

    async def _answer_later(self, request: Request, answer: Coroutine[Any, Any, dict[str, Any] | None],
                            before: asyncio.Future[None] | None, writer: asyncio.StreamWriter, fd: int, peer: Any,
                            request_started: float, started: float) -> None:
        """A deferred answer (``apis.Deferred``): awaited, then written once the answers owed
        before it are (its frame's memory stays taken from the pool until then: FrameMemory.hand_over)."""
        try:
            body = await answer
            self.metrics.request(request.api_key, request.api_version, (time.perf_counter() - started) * 1000)
            assert body is not None  # an answer owed (acks=0 is never deferred)
            if body.get("error_code"):
                self.metrics.error(request.api_key, body["error_code"])
        except Exception as exc:  # every failure is an answer, as the loop's
            self.metrics.error(request.api_key, exc.code if isinstance(exc, KafkaError)
                               else ErrorCode.UNKNOWN_SERVER_ERROR)
            failed = self._failed(request, peer, exc)
            assert failed is not None
            body = failed
        parts = encode_response_parts(request.api_key, request.api_version, request.correlation_id, body)
        if before is not None and not before.done():
            await before
        write_parts(writer.transport, fd, parts)
        await writer.drain()
        elapsed_ms = (time.monotonic() - request_started) * 1000
        if elapsed_ms >= self._slow_request_ms or _request_log.isEnabledFor(logging.DEBUG):
            self._log_request(request, peer, elapsed_ms, body)

    async def _read_size(self, reader: asyncio.StreamReader, deadline: float | None) -> bytes:
        """The next frame's size prefix; a connection silent for connections.max.idle.ms is
        closed, and one not authenticated by `deadline` (time.monotonic()) too."""
        idle_ms = self.config.connections_max_idle_ms
        try:
            async with asyncio.timeout(self._timeout(idle_ms / 1000 if idle_ms > 0 else None, deadline)):
                return await reader.readexactly(4)
        except TimeoutError:
            self._check_deadline(deadline)
            raise TimeoutError(f"idle for connections.max.idle.ms ({idle_ms} ms)") from None

    async def _read_frame(self, reader: asyncio.StreamReader, size: int, memory: FrameMemory | None,
                          deadline: float | None) -> bytes:
        """A frame's body, read once `size` bytes are reserved in the pool (waiting for them,
        unread, as Kafka mutes the channel) — with no `memory`, before authentication, outside
        it; it must arrive within request_read_timeout_ms, and by the authentication deadline."""
        if memory is not None:
            await memory.take(size)
        timeout_ms = self.config.request_read_timeout_ms
        try:
            async with asyncio.timeout(self._timeout(timeout_ms / 1000 if timeout_ms > 0 else None, deadline)):
                return await reader.readexactly(size)
        except TimeoutError:
            self._check_deadline(deadline)
            raise TimeoutError(f"a frame of {size} bytes was not received within "
                               f"request_read_timeout_ms ({timeout_ms} ms)") from None

    @staticmethod
    def _timeout(timeout_s: float | None, deadline: float | None) -> float | None:
        if deadline is None:
            return timeout_s
        left = max(0.0, deadline - time.monotonic())
        return left if timeout_s is None else min(timeout_s, left)

    def _check_deadline(self, deadline: float | None) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError("not authenticated within sasl_authentication_timeout_ms "
                               f"({self.config.sasl_authentication_timeout_ms} ms)") from None

    def _log_request(self, request: Request, peer: Any, elapsed_ms: float, body: dict[str, Any]) -> None:
        """A completed request at DEBUG (Kafka's kafka.request.logger), and a slow one at WARNING:
        one whose time, less what the client asked the broker to wait (Fetch's max_wait_ms; a
        JoinGroup or SyncGroup waits for the rebalance), reached slow_request_ms."""
        name = ApiKey(request.api_key).name
        client = current_client.get(None)
        principal = client.principal if client is not None else "?"
        if _request_log.isEnabledFor(logging.DEBUG):
            _request_log.debug("completed %s v%d in %.1f ms (client id %r, %s, peer %s)", name, request.api_version,
                               elapsed_ms, request.client_id, principal, peer)
        waited = (request.body.get("max_wait_ms", 0) if request.api_key == ApiKey.FETCH
                  else elapsed_ms if request.api_key in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP) else 0)
        if self._slow_request_ms and elapsed_ms - max(waited, 0) >= self._slow_request_ms:
            self.limited_log.warning("slow-request", "slow request: %s v%d took %.0f ms (slow_request_ms %d; "
                                     "client id %r, %s, peer %s)", name, request.api_version, elapsed_ms,
                                     self._slow_request_ms, request.client_id, principal, peer)

    def _failed(self, request: Request, peer: Any, exc: Exception) -> dict[str, Any] | None:
        """Kafka's error answer to a request whose handler failed (KafkaApis' handleError):
        the KafkaError's code, else UNKNOWN_SERVER_ERROR with no message; one log line."""
        if isinstance(exc, KafkaError):  # a refusal a handler did not catch: its own code
            code, message, level = exc.code, exc.message, logging.INFO
        else:
            code, message, level = ErrorCode.UNKNOWN_SERVER_ERROR, None, logging.ERROR
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = f" at {tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb else ""
        name = ApiKey(request.api_key).name  # served, so one of ours
        if self.limited_log.log(level, "handler-error", "error handling %s v%d (client id %r, peer %s), "
                                "answered %s: %r%s", name, request.api_version, request.client_id, peer,
                                code.name, exc, where):
            log.debug("traceback of the failure above", exc_info=exc)
        return error_response(request.api_key, request.api_version, request.body, code, message)

    def retention_defaults(self) -> dict[str, str]:
        """The broker's defaults for retention (log.retention.*: topic_defaults or dynamic configs)."""
        return {name: effective({}, name, self.topics.broker_defaults) for name in ("retention.ms", "retention.bytes")}

    def api_versions_error(self, correlation_id: int) -> bytes:
        """The v0 UNSUPPORTED_VERSION answer a Kafka broker gives to an ApiVersions it can't parse."""
        # Kafka lists only its ApiVersions range in this answer; the client retries with it.
        body = api_versions_body(self.apis, ErrorCode.UNSUPPORTED_VERSION)
        body["api_keys"] = [k for k in body["api_keys"] if k["api_key"] == ApiKey.API_VERSIONS]
        return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)


async def _written(owed: list[asyncio.Future[None]]) -> None:
    """Wait until the answers owed to a connection's earlier requests are written: answers go
    out in the order of the requests."""
    if owed and not owed[-1].done():
        await owed[-1]


async def _let_peer_close_first(reader: asyncio.StreamReader) -> None:
    """Give a refused client the chance to read the answer and close the connection itself.

    kafka-python 3.x drops the bytes it read when the same read ends in EOF (its
    ``_sock_recv`` returns them with the error, and the transport aborts), so a failure answer
    followed at once by the broker's FIN is lost whenever both arrive together — under load,
    often. Every client closes on a failed authentication, so waiting for its EOF (bounded in
    time and bytes) costs nothing; then the broker closes as Kafka does."""
    with contextlib.suppress(TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        async with asyncio.timeout(_PEER_CLOSE_WAIT_S):
            left = _READ_LIMIT
            while left > 0 and (chunk := await reader.read(min(left, 4096))):
                left -= len(chunk)
