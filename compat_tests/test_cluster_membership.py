"""Three `tmqgate serve --cluster etcd://…` processes and a real etcd (issue 16, step 1):
Metadata and DescribeCluster from each list every live broker and one controller; kill -9 of
the controller takes it out of the others' answers once its lease lapses and moves the
controller role; restarted, it is listed again.

tmqgate only: the reference Kafka's 3-node KRaft fixture comes with replication (step 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .brokers import TmqgateProcess, stop_all
from .clusters import metadata
from .etcd import EtcdProcess, require_etcd
from .helpers import wait_until
from .raw import RawConn

pytestmark = [pytest.mark.serial, pytest.mark.tmqgate_only]


@pytest.fixture(autouse=True)
def _etcd() -> None:
    require_etcd()

DESCRIBE_CLUSTER = 60
SESSION_MS = 2000


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    e = EtcdProcess(tmp_path / "etcd")
    e.start()
    try:
        yield e
    finally:
        e.stop()


def _node(tmp_path: Path, etcd: EtcdProcess, node_id: int) -> TmqgateProcess:
    return TmqgateProcess(tmp_path / f"node{node_id}", config={
        "node_id": node_id, "cluster": etcd.url, "cluster_session_timeout_ms": SESSION_MS})


def _listed(bootstrap: str) -> tuple[list[tuple[int, int]], int, str]:
    """(sorted (node id, port) of the brokers, controller id, cluster id) from one broker's Metadata."""
    meta = metadata(bootstrap, [])
    return sorted((b["node_id"], b["port"]) for b in meta["brokers"]), meta["controller_id"], meta["cluster_id"]


def _describe_cluster(bootstrap: str) -> dict[str, Any]:
    with RawConn(bootstrap) as conn:
        return conn.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                  "endpoint_type": 1})


def test_three_brokers_see_each_other_and_the_controller_moves_when_it_dies(tmp_path: Path, etcd: EtcdProcess) -> None:
    nodes = {n: _node(tmp_path, etcd, n) for n in (0, 1, 2)}
    for p in nodes.values():
        p.start()
    try:
        everyone = sorted((n, int(p.bootstrap.rsplit(":", 1)[1])) for n, p in nodes.items())
        answers = [wait_until(lambda p=p: _listed(p.bootstrap), 30, 0.2, "all three listed",
                              ok=lambda m: m[0] == everyone)
                   for p in nodes.values()]
        controllers = {controller for _, controller, _ in answers}
        cluster_ids = {cid for _, _, cid in answers}
        assert len(controllers) == 1 and controllers <= {0, 1, 2}, answers
        assert len(cluster_ids) == 1, answers  # one id, kept in etcd
        [controller] = controllers
        described = _describe_cluster(nodes[0].bootstrap)
        assert described["error_code"] == 0 and described["controller_id"] == controller
        assert sorted((b["broker_id"], b["port"]) for b in described["brokers"]) == everyone
        assert described["cluster_id"] in cluster_ids

        nodes[controller].kill()  # kill -9: its lease lapses after the session timeout
        survivors = {n: p for n, p in nodes.items() if n != controller}
        left = [e for e in everyone if e[0] != controller]
        for p in survivors.values():
            seen = wait_until(lambda p=p: _listed(p.bootstrap), 30, 0.2,
                              "the dead controller gone and a new one elected",
                              ok=lambda m: m[0] == left and m[1] in survivors)
        new_controllers = {_listed(p.bootstrap)[1] for p in survivors.values()}
        assert len(new_controllers) == 1 and new_controllers <= set(survivors), seen

        nodes[controller].start()  # back on its data: registered again, listed by everyone
        for p in nodes.values():
            wait_until(lambda p=p: _listed(p.bootstrap), 30, 0.2, "the restarted broker listed again",
                       ok=lambda m: m[0] == everyone)
    finally:
        stop_all(nodes.values())


def test_a_broker_that_cannot_reach_etcd_refuses_to_start(tmp_path: Path) -> None:
    from .helpers import free_port

    p = TmqgateProcess(tmp_path / "lonely", config={"node_id": 3, "cluster": f"etcd://127.0.0.1:{free_port()}",
                                                     "cluster_session_timeout_ms": 1000}, ready_timeout=30)
    with pytest.raises(Exception) as info:  # noqa: PT011 - the fixture's own start failure
        p.start()
    log = (tmp_path / "lonely").glob("*.log")
    text = "".join(f.read_text(errors="replace") for f in log)
    assert "cannot reach etcd" in text or "cannot reach etcd" in str(info.value), (text[-2000:], info.value)
