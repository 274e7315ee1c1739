"""The broker node's composition root: it builds storage, the registries, the coordinators and
every collaborator, opens the listeners and runs the periodic jobs; each accepted connection is
served by broker/network/connection.py, which gets its collaborators from here (never the Broker).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import ssl
import time
from typing import Any

from tmqgate.broker.acl.authorizer import Authorizer
from tmqgate.broker.acl.sql_access import SqlAccess
from tmqgate.broker.apis import ApiKey, bind
from tmqgate.broker.auth.credentials import set_password
from tmqgate.broker.auth.session import SASL_PROTOCOLS, authenticator
from tmqgate.broker.cluster.dnodes import Dnodes
from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.configs.topic_configs import effective
from tmqgate.broker.dynamic_configs.broker_configs import BrokerConfigs
from tmqgate.broker.dynamic_configs.group_configs import GroupConfigs
from tmqgate.broker.handlers import API_TABLE
from tmqgate.broker.handlers.context import (
    AclApis,
    AdminApis,
    ClusterApis,
    DataPlane,
    GroupApis,
    Node,
    ShareApis,
    TxnApis,
    TxnDataApis,
)
from tmqgate.broker.identity.principal import parse_rules
from tmqgate.broker.network.connection import READ_LIMIT, ConnectionServices, serve_connection
from tmqgate.broker.network.limits import ConnectionLimits, MemoryPool
from tmqgate.broker.network.listeners import (
    Listener,
    advertised_addresses,
    load_certificates,
    parse_listeners,
    peer_security,
    server_ssl_context,
)
from tmqgate.broker.ops.metrics import Metrics
from tmqgate.broker.ops.quotas.client_quotas import ClientQuotaManagers
from tmqgate.broker.ratelimit import RateLimitedLog
from tmqgate.broker.runtime.coordination import (
    LocalTxnRouting,
)
from tmqgate.broker.runtime.group_coordinator import group_coordinator
from tmqgate.broker.runtime.log_cleaner import LogCleaner
from tmqgate.broker.runtime.roles import LocalRoles, Roles
from tmqgate.broker.runtime.shares import ShareRuntime
from tmqgate.broker.runtime.txn_coordinator import txn_coordinator
from tmqgate.broker.runtime.txn_markers import MarkerWriter
from tmqgate.broker.runtime.waiters import DataNotifier
from tmqgate.broker.tdengine import Executor, GroupQueries, SelectLimits, SqlError, TsdbCatalog
from tmqgate.broker.topics import CLUSTER_INTERNAL_SOURCES, Topic, TopicRegistry
from tmqgate.protocol import clock
from tmqgate.protocol.codec import iter_precompile
from tmqgate.storage import Store

log = logging.getLogger("tmqgate.server")


#: The data path's APIs: their codecs, newest version, are built in the background from start-up
#: (Broker._precompile); the others', and older versions', by their first request.
PRECOMPILED_APIS = (ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS,
                    ApiKey.FIND_COORDINATOR, ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.HEARTBEAT,
                    ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.INIT_PRODUCER_ID)


def _set_user_password(store: Store, user: str, password: str, create: bool) -> None:
    """CREATE USER / ALTER USER … PASS: the user's SCRAM credentials, as AlterUserScramCredentials."""
    try:
        set_password(store.users, user, password, create=create)
    except (ValueError, KeyError) as exc:  # UserExists, UnknownUser, an empty name or password
        raise SqlError(str(exc)) from None


class Broker:
    """One tmqgate broker node: storage, topic registry, and the Kafka listener.

    The composition root: it owns the network and builds every collaborator; handlers get
    the small contexts of broker/handlers/context.py, never the Broker itself."""

    def __init__(self, config: BrokerConfig, siblings: tuple[int, ...] = ()) -> None:
        """``siblings``: on a worker of `serve --workers N`, the other workers' node ids."""
        self.config = config
        self.listeners = parse_listeners(config)
        self.store = Store(config.data_dir, wal_level=config.wal_level,
                           fsync_period_ms=config.wal_fsync_period_ms,
                           write_buffer_size=config.leveldb_write_buffer_bytes,
                           reserve_bytes=config.disk_reserve_bytes)
        if self.store.read_only:
            log.error("storage is read-only until there is room: %s (writes answer KAFKA_STORAGE_ERROR, "
                      "reads work; disk_reserve_bytes=%d)", self.store.read_only, config.disk_reserve_bytes)
        self.started_ms = clock.now_ms()
        # The parts one node and a cluster build differently (broker/runtime/roles.py): this broker
        # alone, a cluster of one; with `cluster`, etcd's (imported only then: one node needs no etcd).
        roles: Roles = LocalRoles(config)
        if config.cluster is not None:
            from tmqgate.broker.cluster.roles import ClusterRoles

            roles = ClusterRoles(config, self.store, peer_security(config, self.listeners[0]), siblings)
        # who is in the cluster: this broker alone, or etcd's view (registered at start)
        self.membership = roles.membership()
        self.catalog = TsdbCatalog(self.store)
        # On a cluster Kafka's internal topics follow the state topics (broker/topics.py).
        on_cluster = config.cluster is not None
        self.topics = TopicRegistry(self.store, self.catalog, max_partitions=config.max_partitions,
                                    max_databases=config.max_databases,
                                    offsets_partitions=(config.cluster_state_partitions if on_cluster
                                                        else config.offsets_topic_num_partitions),
                                    transaction_partitions=(config.cluster_state_partitions if on_cluster
                                                            else config.transaction_state_log_num_partitions),
                                    transaction_version=config.transaction_version, node_id=config.node_id,
                                    cluster=roles.topic_cluster,
                                    internal_sources=CLUSTER_INTERNAL_SOURCES if on_cluster else None)
        self.notifier = DataNotifier()
        self.topics.on_deleted.append(self._wake_fetches)
        # leaders, followers and high watermarks: none on one node (every partition led here)
        self.replication = roles.replication(self.topics, self.notifier)
        # Commit/abort markers to the partitions led here (the transaction coordinator and WriteTxnMarkers).
        self.markers = MarkerWriter(self.store, self.topics, self.notifier, self.replication)
        self.apis = API_TABLE
        # authorizer = "acl": Kafka's ACLs, persisted in the store; "none": no checks at all.
        self.authorizer = (Authorizer(self.store, config.super_users, config.allow_everyone_if_no_acl_found)
                           if config.authorizer == "acl" else None)
        self.coordinator = group_coordinator(self.store, self.topics, config, self.authorizer)
        # who coordinates a group: this node, or the leader of its group-state partition
        self.group_state = roles.group_placement(self.topics, self.replication, self.notifier, self.coordinator)
        self.group_configs = GroupConfigs(self.store, config, self.coordinator)
        # share groups (KIP-932): the groups coordinated here, the share-partitions of what is led here
        self.shares = ShareRuntime(clock.now_ms, self.group_configs.share_settings, self.store.share_states,
                                   config.group_share_max_share_sessions,
                                   roles.share_persister(self.store.share_states, self.group_state))
        self.partition_ends = roles.partition_ends(self.store, self.topics)
        self.broker_configs = BrokerConfigs(self.store, config, self.topics)
        # The transaction coordinator (broker/runtime/txn_coordinator.py): its markers and group
        # ends written here, on a cluster sent to the brokers leading them.
        txn_markers, txn_groups = roles.txn_outputs(self.topics, self.markers, self.coordinator)
        self.transactions = txn_coordinator(self.store, config, markers=txn_markers, groups=txn_groups)
        self.txn_state = roles.txn_placement(self.topics, self.replication, self.notifier, self.transactions)
        # Produce's and TxnOffsetCommit's checks of a transaction (Kafka: the producer's transaction
        # must hold the partition or the group), and where the handlers send what is elsewhere
        self.txn_gate, self.txn_routing = roles.txn_checks(self.transactions)
        self.dnodes = Dnodes(config.node_id, self.store, self.topics, config.max_partitions, self.started_ms,
                             self.membership)
        # The one SQL executor: the HTTP front, `tmqgate sql` and schemaless ingestion share it;
        # SQL statements are checked for their caller when there is an authorizer.
        admin = self.coordinator.machine.admin
        access = None if self.authorizer is None else SqlAccess(
            self.authorizer, set_user_password=functools.partial(_set_user_password, self.store))
        self.executor = Executor(self.store, self.catalog, self.topics, self.notifier.notify,
                                 GroupQueries(subscribed_to=admin.groups_subscribed_to,
                                              group_ids=admin.group_ids, members=admin.members,
                                              now_ms=self.coordinator.now),
                                 parse_timeout_ms=config.sql_parse_timeout_ms, access=access,
                                 select_limits=SelectLimits(config.sql_select_max_bytes,
                                                            config.sql_select_memory_bytes,
                                                            config.sql_select_timeout_ms / 1000),
                                 placement=self.dnodes.queries(),
                                 cluster=roles.sql(self.topics, self.replication, self.notifier.notify))
        self._servers: list[tuple[Listener, asyncio.Server]] = []
        # One TLS context per listener TLS settings in use (listeners with the same share it).
        self._ssl: dict[tuple[str, str | None, str | None, str | None], tuple[Listener, ssl.SSLContext]] = {}
        self.advertised_by_listener: dict[str, tuple[str, int]] = {}
        self.advertised: tuple[str, int] = ("127.0.0.1", 9092)  # the first listener's, from start
        self._tasks: list[asyncio.Task[None]] = []
        # queued.max.request.bytes and max.connections[.per.ip] (broker/network/limits.py).
        self.pool = MemoryPool(config.queued_max_request_bytes)
        self.connection_limits = ConnectionLimits(config.max_connections, config.max_connections_per_ip)
        self.limited_log = RateLimitedLog(log, config.log_rate_limit_messages,
                                          config.log_rate_limit_interval_ms / 1000)
        self.quotas = ClientQuotaManagers(self.store, config, self.limited_log)
        # SASL (broker/auth/session.py) when a listener speaks it
        self.authenticator = (authenticator(config, self.store, self.limited_log)
                              if any(li.security_protocol in SASL_PROTOCOLS for li in self.listeners) else None)
        self.log_cleaner = LogCleaner(self.store, config, self.topics.broker_defaults)
        # GET /metrics (broker/ops/metrics.py): handlers reach it through their contexts.
        self.metrics = Metrics(self.store, self.topics, config.metrics_max_lag_series, self.quotas,
                               rebalances=self.coordinator.machine.rebalances, log_cleaner=self.log_cleaner,
                               authenticator=self.authenticator, shares=self.shares)
        # What each connection is served with (broker/network/connection.py); opened at start.
        self.serving = ConnectionServices(config, self.apis, self.quotas, self.metrics, self.limited_log, self.pool,
                                          self.connection_limits, parse_rules(config.ssl_principal_mapping_rules),
                                          self.authenticator)
        # The events between the parts (on a cluster: etcd's reads, the catalog shared through
        # it, markers written and answered); the configs, quotas and ACLs kept in memory are
        # read again when the cluster's catalog changes them.
        reloads = [self.broker_configs.reload, self.group_configs.reload, self.quotas.reload]
        if self.authorizer is not None:
            reloads.append(self.authorizer.reload)
        roles.connect(self.transactions, self.markers, reloads)

    def _wake_fetches(self, topic: Topic) -> None:
        """Fetches parked on a deleted topic answer at once (UNKNOWN_TOPIC_OR_PARTITION)."""
        for vnode in range(topic.partitions):
            self.notifier.notify(topic.db, vnode)

    async def start(self) -> None:
        listeners = self.listeners
        self._ssl = {li.tls_settings: (li, server_ssl_context(self.config, li)) for li in listeners if li.tls}
        bound: dict[str, tuple[str, int]] = {}
        for listener in listeners:
            server = await asyncio.start_server(
                functools.partial(serve_connection, self.serving, listener), listener.host or None,
                listener.port, reuse_address=True, limit=READ_LIMIT,
                ssl=self._ssl[listener.tls_settings][1] if listener.tls else None)
            self._servers.append((listener, server))
            bound[listener.name] = (listener.host, server.sockets[0].getsockname()[1])
        self.advertised_by_listener = advertised_addresses(self.config, bound)
        self.advertised = self.advertised_by_listener[listeners[0].name]
        # a cluster's broker registers its address (the listeners are open: early connections
        # wait for `serving.open`)
        await self.membership.start(self.advertised, self.dnodes.facts())
        self.serving.open(bind(self.apis, self._contexts(), self.membership), self.advertised_by_listener)
        self._tasks.append(asyncio.create_task(self._housekeeping()))
        if self.config.log_cleaner_enable:  # compacted topics (broker/runtime/log_cleaner.py)
            self._tasks.append(asyncio.create_task(self.log_cleaner.run()))
        self._tasks.append(asyncio.create_task(self._precompile()))  # last: tests wait for it
        await self.coordinator.start()
        await self.transactions.start()
        for listener, server in self._servers:
            log.info("tmqgate listening on %s://%s:%d (%s; data dir %s)", listener.name, listener.host,
                     server.sockets[0].getsockname()[1], listener.security_protocol, self.config.data_dir)

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
        verify = cfg.transaction_partition_verification_enable
        return {
            DataPlane: DataPlane(self.store, self.topics, self.notifier, self.executor,
                                 cfg.max_decompressed_batch_bytes, quotas=self.quotas, authorizer=auth,
                                 metrics=self.metrics, limited_log=self.limited_log,
                                 transactions=self.txn_gate if verify else None, replication=self.replication,
                                 txn_cluster=self.txn_routing if verify else LocalTxnRouting()),
            AdminApis: AdminApis(self.store, self.topics, cfg, quotas=self.quotas,
                                 authorizer=auth, group_configs=self.group_configs,
                                 broker_configs=self.broker_configs),
            ClusterApis: ClusterApis(node, self.topics, cfg, self.apis, self.membership, authorizer=auth),
            GroupApis: GroupApis(self.coordinator, self.topics, node, self.membership, self.group_state,
                                 self.txn_state, self.txn_gate, authorizer=auth, txn_cluster=self.txn_routing,
                                 shares=self.shares),
            AclApis: AclApis(auth),
            ShareApis: ShareApis(self.shares, self.store, self.topics, self.notifier, self.coordinator, node,
                                 self.partition_ends, authorizer=auth),
            TxnApis: TxnApis(self.transactions, self.topics, self.txn_state, authorizer=auth),
            TxnDataApis: TxnDataApis(self.markers, self.store, self.topics, authorizer=auth, cluster=self.txn_routing),
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
        self.membership.leaving()  # no controller decisions from a broker on its way out
        for _, server in self._servers:
            server.close()
        self.replication.stop()
        self.txn_routing.stop()
        for task in [*self._tasks, *self.serving.tasks]:
            task.cancel()
        for task in [*self._tasks, *self.serving.tasks]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for _, server in self._servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        await self.coordinator.stop()
        await self.transactions.stop()
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

    def retention_defaults(self) -> dict[str, str]:
        """The broker's defaults for retention (log.retention.*: topic_defaults or dynamic configs)."""
        return {name: effective({}, name, self.topics.broker_defaults) for name in ("retention.ms", "retention.bytes")}
