"""`tsdb.names` and `protocol.names`: the one name rule, kind by kind, at its limits."""

from __future__ import annotations

import pytest

from tmqgate.broker.tsdb.names import MAX_LENGTH, InvalidName, check_name, name_problem
from tmqgate.protocol.names import MAX_TOPIC_NAME_LENGTH, topic_name_problem

FINDING = ["../../etc", "a/b", "a b", "nul\0db", "ünï😀"]  # issue 11, finding 7


@pytest.mark.parametrize("name", [*FINDING, "", ".", "..", "x" * 250, "new\nline", "tab\t", "é"])
def test_kafka_refuses(name: str) -> None:
    assert topic_name_problem(name) is not None


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "x" * MAX_TOPIC_NAME_LENGTH, "...", "-"])
def test_kafka_accepts(name: str) -> None:
    assert topic_name_problem(name) is None


@pytest.mark.parametrize("kind", ["database", "topic"])
@pytest.mark.parametrize("name", [*FINDING, ".", "..", "x\n"])
def test_kafka_kinds_refuse_the_findings_names(kind: str, name: str) -> None:
    for quoted in (True, False):
        problem = name_problem(name, kind, quoted)  # type: ignore[arg-type]
        assert problem is not None and problem.startswith("Invalid identifier name"), (name, quoted)


def test_limits_in_utf8_bytes() -> None:
    for kind, limit in MAX_LENGTH.items():
        assert name_problem("a" * limit, kind) is None, kind  # type: ignore[arg-type]
        assert "too long" in (name_problem("a" * (limit + 1), kind) or ""), kind  # type: ignore[arg-type]
    assert MAX_LENGTH == {"database": 64, "table": 192, "column": 64, "tag": 64, "topic": 192}
    assert name_problem("é" * 96, "table") is None  # 192 bytes
    assert name_problem("é" * 97, "table") is not None  # 194 bytes
    assert name_problem("😀" * 16, "column") is None and name_problem("😀" * 17, "column") is not None


def test_table_column_tag_names_follow_tdengine() -> None:
    for kind in ("table", "column", "tag"):
        for ok in ("a/b", "a b", "ünï😀", "abc@TD", "1970", "select"):  # backquoted names TDengine takes
            assert name_problem(ok, kind) is None, (kind, ok)  # type: ignore[arg-type]
        for bad in ("../../etc", "a.b", "nul\0db", "x\x7f", "back`tick", "zero\u200bwidth", "\ud800"):
            assert name_problem(bad, kind) is not None, (kind, bad)  # type: ignore[arg-type]
        # unquoted: ASCII letters, digits and '_', not starting with a digit
        assert name_problem("_a1", kind, quoted=False) is None  # type: ignore[arg-type]
        for bad in ("ünï", "1970", "a b"):
            assert name_problem(bad, kind, quoted=False) is not None  # type: ignore[arg-type]


def test_database_is_both_tdengine_and_kafka() -> None:
    assert name_problem("my-db", "database") is None
    assert name_problem("my.db", "database") is not None  # Kafka takes it, TDengine does not
    assert name_problem("t.opic", "topic") is None  # a TDengine topic may have Kafka's '.'
    with pytest.raises(InvalidName, match="Invalid identifier name"):
        check_name("a/b", "database")
    assert check_name("ok", "database") == "ok"
