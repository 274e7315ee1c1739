"""`kafka-metadata-quorum describe --status / --replication` (issue 16, step 3) against three
brokers: the quorum's leader, its epoch and high watermark, and its voters — for tmqgate the
controller elected through etcd and the live brokers (the quorum being etcd), for Kafka its
KRaft controller. What holds on both: one leader, among the voters, at a non-negative epoch and
a positive high watermark, which every broker names alike; `--replication` lists each voter
once, the leader's row "Leader"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .cli_helpers import require_tools, run
from .clusters import three_brokers
from .helpers import wait_until

# kills brokers, runs a soak or starts a cluster: one such module at a time (compat_tests/serial.py)
pytestmark = pytest.mark.serial


def _status(bootstrap: str) -> dict[str, str]:
    out = run("kafka-metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--status").stdout
    return dict(re.findall(r"^(\w+):\s*(.*?)\s*$", out, re.M))


def _voters(text: str) -> list[int]:
    """The node ids of a CurrentVoters line: [{"id": 0, …}, …] or [0@host:port, …] by version."""
    found = re.findall(r'"id":\s*(\d+)', text) or re.findall(r"(\d+)@", text)
    return sorted(int(n) for n in found)


def test_the_metadata_quorum_status(pytestconfig: pytest.Config, target: str, tmp_path: Path) -> None:
    require_tools()
    def settled(s: dict[str, str]) -> bool:
        """A leader named; on tmqgate also every broker a voter: its voters are the brokers
        registered in etcd, and one may answer before the last has registered (a run on a
        loaded machine read [0, 1])."""
        return int(s.get("LeaderId", -1)) >= 0 and (target != "tmqgate" or
                                                    _voters(s.get("CurrentVoters", "")) == [0, 1, 2])

    with three_brokers(pytestconfig, target, tmp_path) as nodes:
        statuses = [wait_until(lambda n=n: _status(nodes[n].bootstrap), 30, 0.2,
                               f"a quorum leader named by broker {n}", ok=settled) for n in (0, 1, 2)]
        leaders = {s["LeaderId"] for s in statuses}
        assert len(leaders) == 1, statuses
        status = statuses[0]
        leader = int(status["LeaderId"])
        voters = _voters(status["CurrentVoters"])
        assert leader in voters, status
        assert int(status["LeaderEpoch"]) >= 0 and int(status["HighWatermark"]) > 0, status
        if target == "tmqgate":  # the quorum is etcd: its voters are the brokers, any can be elected
            assert voters == [0, 1, 2], status

        table = run("kafka-metadata-quorum", "--bootstrap-server", nodes[1].bootstrap, "describe",
                    "--replication").stdout.splitlines()
        assert table[0].split()[:3] == ["NodeId", "DirectoryId", "LogEndOffset"], table
        rows = [line.split() for line in table[1:] if line.strip()]
        voter_rows = [r for r in rows if r[-1] in ("Leader", "Follower")]
        assert sorted(int(r[0]) for r in voter_rows) == voters, table
        assert [int(r[0]) for r in voter_rows if r[-1] == "Leader"] == [leader], table
