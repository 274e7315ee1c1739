"""A statement's answer: its `Result` in the shape of TDengine's REST API, or, for a refusal
(`SqlError`), TDengine's code where TDengine has a specific one.

Every module of broker/sql that answers a statement, and broker/cluster/sql.py that relays a
leader's answer, builds it here, so one shape reaches the HTTP front and `tmqgate sql`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OUT_OF_DNODES = 0x0334  # TDengine's TSDB_CODE_MND_NO_ENOUGH_DNODES: more replicas than dnodes
DB_ALREADY_EXIST = 0x0382  # TDengine's TSDB_CODE_MND_DB_ALREADY_EXIST
SYN_NOT_LEADER = 0x090C  # TDengine's TSDB_CODE_SYN_NOT_LEADER ("Sync leader is unreachable")


@dataclass
class Result:
    """A statement's answer in the shape of TDengine's REST API."""

    columns: list[tuple[str, str, int]] = field(default_factory=lambda: [("affected_rows", "INT", 4)])
    rows: list[list[Any]] = field(default_factory=lambda: [[0]])

    @classmethod
    def affected(cls, n: int) -> Result:
        return cls(rows=[[n]])

    def to_json(self) -> dict[str, Any]:
        return {"code": 0, "column_meta": [list(c) for c in self.columns], "data": self.rows,
                "rows": len(self.rows)}
