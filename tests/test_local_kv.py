"""broker/cluster/local_kv.py: etcd's key-value semantics (revisions, create / replace as
compare-and-swap, leases whose expiry deletes their keys) over one SQLite file that several
processes share — what `--cluster local:PATH` brokers coordinate through."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tmqgate.broker.cluster.local_kv import LocalKv, local_path
from tmqgate.broker.metadata.view import parse_cluster


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_revisions_create_replace_delete(tmp_path: Path) -> None:
    kv = LocalKv(tmp_path / "c.db")
    assert kv.revision() == 0 and kv.get("a") == [] and kv.get_prefix("") == []
    assert kv.create("a", "1") is True and kv.create("a", "2") is False
    assert kv.get("a") == [b"1"]
    assert kv.put("b/x", "x") is True and kv.put("b/y", b"y") is True
    assert kv.replace("a", "9", "3") is False and kv.get("a") == [b"1"]
    assert kv.replace("a", "1", "3") is True and kv.get("a") == [b"3"]
    [(value, meta)] = kv.get("a", metadata=True)
    # a created at revision 1, b/x 2, b/y 3, a replaced at 4
    assert (value, meta["key"], meta["create_revision"], meta["mod_revision"], meta["version"]) == (
        b"3", b"a", "1", "4", "2")
    assert [(v, m["key"], m["mod_revision"]) for v, m in kv.get_prefix("b/")] == [
        (b"x", b"b/x", "2"), (b"y", b"b/y", "3")]
    assert kv.delete("b/x") is True and kv.delete("b/x") is False
    assert kv.revision() == 5 and [m["key"] for _, m in kv.get_prefix("b")] == [b"b/y"]
    kv.close()
    again = LocalKv(tmp_path / "c.db")  # kept in the file
    assert again.revision() == 5 and again.get("a") == [b"3"]


def test_a_lease_that_expires_takes_its_keys(tmp_path: Path) -> None:
    clock = Clock()
    kv = LocalKv(tmp_path / "c.db", clock=clock)
    other = LocalKv(tmp_path / "c.db", clock=clock)  # another broker's connection
    lease = kv.lease(3)
    assert kv.put("brokers/1", "me", lease=lease) and kv.create("controller", "1", lease=lease)
    assert kv.put("topics/t", "placement")  # no lease: stays
    clock.now += 2.5
    assert lease.refresh() == 3  # kept alive: 3 s from now
    clock.now += 2.5
    assert other.get("brokers/1") == [b"me"]
    before = other.revision()
    clock.now += 1.0  # 3.5 s since the refresh: expired, whoever reads next removes it
    assert other.get_prefix("brokers/") == [] and other.get("controller") == []
    assert other.revision() == before + 1  # one change: the lease's keys deleted
    assert other.create("controller", "2") is True  # another broker takes the role
    assert lease.refresh() == -1  # the broker finds its lease gone (and registers again)
    assert kv.get("topics/t") == [b"placement"]
    fresh = kv.lease(3)
    kv.put("brokers/1", "me", lease=fresh)
    assert fresh.revoke() is True and kv.get("brokers/1") == []


def _create_many(path: str, who: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    kv = LocalKv(Path(path))
    won = [n for n in range(200) if kv.create(f"k/{n}", str(who))]
    out.put((who, won))


def test_processes_share_it_as_one_store(tmp_path: Path) -> None:
    """Four processes race to create the same 200 keys: each key is created once, by exactly
    one of them, and the store's revision counts every creation once."""
    path = str(tmp_path / "c.db")
    LocalKv(Path(path)).close()
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_create_many, args=(path, who, out)) for who in range(4)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    won = sorted(n for ns in results.values() for n in ns)
    assert won == list(range(200))
    kv = LocalKv(Path(path))
    assert kv.revision() == 200
    assert {int(m["key"].split(b"/")[1]): int(v) for v, m in kv.get_prefix("k/")} == {
        n: who for who, ns in results.items() for n in ns}


def test_the_cluster_url() -> None:
    assert local_path("local:/var/lib/tmqgate/cluster.db") == Path("/var/lib/tmqgate/cluster.db")
    assert local_path("etcd://127.0.0.1:2379") is None
    assert parse_cluster("local:data/cluster.db") == [("data/cluster.db", 0)]
    with pytest.raises(ValueError, match="local:PATH"):
        local_path("local:")
    with pytest.raises(ValueError, match="or local:PATH"):
        parse_cluster("local:")
