"""The cluster's share persister reads its coordinator's answer (broker/cluster/share_state.py):
an error code this broker does not know, from a newer peer, is UNKNOWN_SERVER_ERROR, not an
exception out of the ShareFetch that asked."""

from __future__ import annotations

import asyncio
from typing import Any

from tmqgate.broker.cluster.share_state import ClusterSharePersister
from tmqgate.protocol.errors import ErrorCode


class _Placement:
    def coordinator_of(self, group: str) -> int:
        return 2


class _Conn:
    def __init__(self, code: int) -> None:
        self.code = code
        self.asked: list[tuple[int, dict[str, Any]]] = []

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.asked.append((api_key, body))
        return {"results": [{"topic_id": body["topics"][0]["topic_id"], "partitions": [
            {"partition": 0, "error_code": self.code, "error_message": None, "state_epoch": 3, "start_offset": 7,
             "state_batches": []}]}]}


class _Peers:
    def __init__(self, conn: _Conn) -> None:
        self.conn = conn

    def get(self, node: int) -> _Conn:
        assert node == 2
        return self.conn


def _read(code: int) -> tuple[ErrorCode, Any, _Conn]:
    conn = _Conn(code)
    persister = ClusterSharePersister(1, _Placement(), _Peers(conn), here=None)  # type: ignore[arg-type]
    result = asyncio.run(persister.read(("g", b"\x01" * 16, 0)))
    return result[0], result[1], conn


def test_an_unknown_code_from_the_coordinator_is_unknown_server_error() -> None:
    code, stored, conn = _read(30000)
    assert code == ErrorCode.UNKNOWN_SERVER_ERROR and stored is None
    assert [api for api, _ in conn.asked] == [84]


def test_a_known_code_is_passed_on() -> None:
    code, stored, _ = _read(ErrorCode.FENCED_STATE_EPOCH.value)
    assert code == ErrorCode.FENCED_STATE_EPOCH and stored is None
