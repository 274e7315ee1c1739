"""The TDengine subsystem's interface: the one module through which the Kafka core
(`apis`, `server`, `http`, `cli`, `topics`, `handlers/*`) uses `broker.sql` and `broker.tsdb`.

The subsystem keeps TDengine's data model (databases of supertables and child tables, rows
entries in the vnode WALs, TDengine topics as views) and its SQL; the core knows it only
through these names:

- SQL, for the HTTP front, `tmqgate sql` and SQL-made topics:
  `Executor` (one per broker; built from the store, the catalog, the topic registry, the
  data notifier's `notify` and `GroupQueries`), its `Result`, `GroupQueries` (what SQL asks
  of the consumer groups), `PlacementQueries` (what SHOW DNODES / SHOW VGROUPS ask of the
  broker: its nodes, the vnodes' replicas and their roles), `SqlError` (a refused statement, with its position if a
  parse error, and TDengine's code when it has a specific one: `INVALID_IDENTIFIER` for a name `tsdb.names`
  refuses); `ParseTimeout` / `ParseWorkerDied`, how the process that parses long texts
  (broker/sql/worker.py) fails a parse;
- `topic_definition(store, catalog, text, db)` — the checked `TopicDef` of a
  `CREATE TOPIC … AS …` text (CreateTopics with the `tmq.as` config);
- Produce to a database topic: `ingest(executor, db, vnode, batch, decompressed, producer)`
  (`producer`: an idempotent producer's batch, its window stored with the rows) and its
  `IngestError`;
- Fetch from a database or TDengine topic: `View(definition, store, catalog)`, whose
  `read(vnode, offset, max_bytes)` returns record batches, and its `TopicDef`;
- who runs SQL: `Caller(principal, host)` (the executor's `execute(text, db, caller)`), and
  `Access`, what the broker gives the executor when an authorizer is on (the decision, GRANT /
  REVOKE as ACLs, CREATE / ALTER USER's passwords) — broker/sql/access.py names what each
  statement needs; `Visibility(access, caller)`, what a listing (SHOW, /log-history,
  /metrics) may show a caller: what it may DESCRIBE;
- a follower replica of a SQL database's vnode: `append_replicated(store, catalog, db, vnode,
  version, kind, value, count)` stores the leader's entry and makes its meta's catalog change;
- `TsdbCatalog(store)` — the cached catalog (supertable schemas, child tables) shared by the
  topic registry, the executor and the views.

The dependency goes one way: the subsystem does not import the Kafka core (the executor
sees the topic registry through its `TopicNames` protocol).
"""

from tmqgate.broker.sql.access import FORWARDED, PERMISSION_DENIED, Access, Caller, Visibility
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.context import SelectLimits
from tmqgate.broker.sql.executor import Executor
from tmqgate.broker.sql.ingest import IngestError, ingest
from tmqgate.broker.sql.local import LocalSql
from tmqgate.broker.sql.ports import GroupQueries, PlacementQueries, SqlCluster, TopicNames
from tmqgate.broker.sql.result import DB_ALREADY_EXIST, OUT_OF_DNODES, SYN_NOT_LEADER, Result
from tmqgate.broker.sql.tmq_topics import topic_definition
from tmqgate.broker.sql.views import TopicDef, View
from tmqgate.broker.sql.worker import ParseTimeout, ParseWorkerDied
from tmqgate.broker.tsdb.catalog import TsdbCatalog
from tmqgate.broker.tsdb.names import INVALID_IDENTIFIER
from tmqgate.broker.tsdb.replica import append_replicated

__all__ = [
    "DB_ALREADY_EXIST",
    "FORWARDED",
    "OUT_OF_DNODES",
    "PERMISSION_DENIED",
    "SYN_NOT_LEADER",
    "INVALID_IDENTIFIER",
    "Access",
    "Caller",
    "Executor",
    "GroupQueries",
    "PlacementQueries",
    "IngestError",
    "LocalSql",
    "ParseTimeout",
    "ParseWorkerDied",
    "Result",
    "SelectLimits",
    "SqlCluster",
    "SqlError",
    "TopicDef",
    "TopicNames",
    "TsdbCatalog",
    "View",
    "Visibility",
    "append_replicated",
    "ingest",
    "topic_definition",
]
