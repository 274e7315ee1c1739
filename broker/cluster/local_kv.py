"""The cluster's metadata on one machine without etcd (issue 28's first step): `LocalKv`, the
part of etcd's key-value API the membership uses (`membership.py`), over one SQLite file that
every broker of the machine opens — `--cluster local:PATH`.

Why SQLite: the brokers of one machine (the workers of one `tmqgate serve`, or brokers started
by hand) are separate processes; SQLite (in Python's standard library) gives them one file with
transactions across processes (its file locks; WAL journal), so no server runs beside them.

The semantics are etcd's, as etcd3gw's client exposes them:
- one revision counter for the whole store, bumped by every change; each key keeps the
  revision that created it (`create_revision`) and the one that last changed it
  (`mod_revision`);
- `create` puts a key only if it does not exist, `replace` only if it holds the given value
  (a put without a lease, as etcd3gw's transaction does), both answering whether they did;
- a lease lasts its TTL from its grant or last `refresh` (etcd's keep-alive); once it expires
  — checked at the start of every operation, by whichever broker comes first — its keys are
  deleted, as etcd deletes a dead broker's registration and controller key. Expiry uses the
  wall clock, which every process of the machine shares and which survives a reboot (a lease
  of a broker that was running then has expired when the machine is back).

Every operation is one SQLite transaction (`BEGIN IMMEDIATE`: one writer at a time), waiting up
to `BUSY_TIMEOUT_S` for another process's; an error is raised as etcd3gw raises a connection
error, so the membership's failover and "serving with the last view" apply unchanged.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: how long an operation waits for another process's transaction (a broker's round is a few ms)
BUSY_TIMEOUT_S = 5.0
SCHEME = "local:"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY, value BLOB NOT NULL, lease INTEGER NOT NULL, "
    "create_rev INTEGER NOT NULL, mod_rev INTEGER NOT NULL, version INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS leases (id INTEGER PRIMARY KEY AUTOINCREMENT, ttl INTEGER NOT NULL, "
    "expires REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS revision (one INTEGER PRIMARY KEY CHECK (one = 1), value INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO revision VALUES (1, 0)",
)


def local_path(url: str) -> Path | None:
    """``local:PATH`` → the SQLite file's path; None for any other URL (etcd's)."""
    if not url.startswith(SCHEME):
        return None
    path = url[len(SCHEME):]
    if not path:
        raise ValueError("--cluster local:PATH needs the path of the file the brokers share")
    return Path(path)


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


class LocalLease:
    """A lease granted by `LocalKv.lease`, as etcd3gw's `Lease`."""

    def __init__(self, lease_id: int, kv: LocalKv) -> None:
        self.id = lease_id
        self._kv = kv

    def refresh(self) -> int:
        """Keep it alive: its TTL from now, or -1 when it has expired (its keys are gone)."""
        return self._kv.refresh(self.id)

    def revoke(self) -> bool:
        return self._kv.revoke(self.id)


class LocalKv:
    """See the module docstring; `clock`: wall-clock seconds (tests pass a fake one)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        # the membership calls it from asyncio.to_thread's pool: any thread, one at a time
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("BEGIN IMMEDIATE")  # the first broker makes the tables; the others find them
        for statement in _SCHEMA:
            self._db.execute(statement)
        self._db.execute("COMMIT")
        self._read_lock = threading.Lock()
        self._reader = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._read_lock:
            self._reader.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction, expired leases removed first."""
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                expired = [row[0] for row in db.execute("SELECT id FROM leases WHERE expires < ?", (self._clock(),))]
                if expired:
                    self._drop_leases(db, expired)
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _drop_leases(self, db: sqlite3.Connection, ids: list[int]) -> None:
        marks = ",".join("?" * len(ids))
        if db.execute(f"DELETE FROM kv WHERE lease IN ({marks})", ids).rowcount:  # noqa: S608 - placeholders only
            self._bump(db)
        db.execute(f"DELETE FROM leases WHERE id IN ({marks})", ids)  # noqa: S608

    @staticmethod
    def _bump(db: sqlite3.Connection) -> int:
        db.execute("UPDATE revision SET value = value + 1")
        return int(db.execute("SELECT value FROM revision").fetchone()[0])

    def _put(self, db: sqlite3.Connection, key: bytes, value: bytes, lease: int) -> None:
        rev = self._bump(db)
        db.execute("INSERT INTO kv VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
                   "lease = excluded.lease, mod_rev = excluded.mod_rev, version = version + 1",
                   (key, value, lease, rev, rev))

    # ---- etcd3gw's Etcd3Client, the part membership.py uses ---------------------------------

    def lease(self, ttl: int) -> LocalLease:
        with self._transaction() as db:
            cursor = db.execute("INSERT INTO leases (ttl, expires) VALUES (?, ?)", (ttl, self._clock() + ttl))
            assert cursor.lastrowid is not None
            return LocalLease(cursor.lastrowid, self)

    def refresh(self, lease_id: int) -> int:
        with self._transaction() as db:
            row = db.execute("SELECT ttl FROM leases WHERE id = ?", (lease_id,)).fetchone()
            if row is None:
                return -1
            db.execute("UPDATE leases SET expires = ? WHERE id = ?", (self._clock() + row[0], lease_id))
            return int(row[0])

    def revoke(self, lease_id: int) -> bool:
        with self._transaction() as db:
            self._drop_leases(db, [lease_id])
        return True

    def put(self, key: str | bytes, value: str | bytes, lease: LocalLease | None = None) -> bool:
        with self._transaction() as db:
            self._put(db, _bytes(key), _bytes(value), 0 if lease is None else lease.id)
        return True

    def create(self, key: str | bytes, value: str | bytes, lease: LocalLease | None = None) -> bool:
        """The key put if it does not exist (etcd's compare create_revision = 0)."""
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM kv WHERE key = ?", (_bytes(key),)).fetchone() is not None:
                return False
            self._put(db, _bytes(key), _bytes(value), 0 if lease is None else lease.id)
            return True

    def replace(self, key: str | bytes, initial_value: str | bytes, new_value: str | bytes) -> bool:
        """The key set to ``new_value`` if it holds ``initial_value`` (etcd's compare value)."""
        with self._transaction() as db:
            row = db.execute("SELECT value FROM kv WHERE key = ?", (_bytes(key),)).fetchone()
            if row is None or bytes(row[0]) != _bytes(initial_value):
                return False
            self._put(db, _bytes(key), _bytes(new_value), 0)
            return True

    def delete(self, key: str | bytes) -> bool:
        with self._transaction() as db:
            if not db.execute("DELETE FROM kv WHERE key = ?", (_bytes(key),)).rowcount:
                return False
            self._bump(db)
            return True

    def get(self, key: str | bytes, metadata: bool = False) -> list[Any]:
        """[value], or [(value, its metadata)] with ``metadata``; [] when there is no such key."""
        with self._transaction() as db:
            rows = db.execute("SELECT key, value, lease, create_rev, mod_rev, version FROM kv WHERE key = ?",
                              (_bytes(key),)).fetchall()
        return [_item(row) if metadata else bytes(row[1]) for row in rows]

    def get_prefix(self, key_prefix: str | bytes) -> list[tuple[bytes, dict[str, Any]]]:
        """Every key starting with the prefix, by key, each (value, its metadata)."""
        prefix = _bytes(key_prefix)
        with self._transaction() as db:
            rows = db.execute("SELECT key, value, lease, create_rev, mod_rev, version FROM kv "
                              "WHERE substr(key, 1, ?) = ? ORDER BY key", (len(prefix), prefix)).fetchall()
        return [_item(row) for row in rows]

    def revision(self) -> int:
        """The store's revision now (etcd's header revision): a read on a connection of its own,
        which waits on no transaction (WAL: readers never wait for writers), so the event loop
        may ask it before a request (the membership's ``catch_up``)."""
        with self._read_lock:
            return int(self._reader.execute("SELECT value FROM revision").fetchone()[0])


def _item(row: tuple[Any, ...]) -> tuple[bytes, dict[str, Any]]:
    """A row as etcd3gw gives a key: its value and metadata (revisions as etcd's JSON strings)."""
    key, value, lease, create_rev, mod_rev, version = row
    return bytes(value), {"key": bytes(key), "create_revision": str(create_rev), "mod_revision": str(mod_rev),
                          "version": str(version), "lease": str(lease)}
