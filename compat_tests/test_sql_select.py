"""SELECT over what Kafka producers wrote (issue 29), through a real `tmqgate serve`: rows
produced as InfluxDB line protocol with kafka-python, queried over `POST /rest/sql` and with
`tmqgate sql`; answers checked against the rows computed in Python. tmqgate only (Kafka has
no SQL over its topics)."""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections.abc import Iterator

import pytest

from .tdengine_helpers import (
    BASE_TS,
    METERS_DDL,
    TdBroker,
    f32,
    make_children,
    make_rows,
    produce_lines,
    td_broker_fixture,
    unique,
)

pytestmark = pytest.mark.tmqgate_only

TABLES = [f"s{i}" for i in range(12)]
PER_TABLE = 1500  # 18,000 rows: a big answer goes through the HTTP front's off-loop JSON


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "sql-select")


@pytest.fixture(scope="module")
def loaded(td: TdBroker) -> tuple[str, list, dict]:  # type: ignore[type-arg]
    db = unique("seldb")
    td.sql(f"CREATE DATABASE {db} VGROUPS 3")
    td.sql(METERS_DDL.format(db=db))
    children = make_children(TABLES, seed=29)
    rows = make_rows(TABLES, PER_TABLE, seed=29)
    produce_lines(td.bootstrap, db, rows, children)
    return db, rows, children


def test_aggregates_over_produced_rows(td: TdBroker, loaded: tuple[str, list, dict]) -> None:  # type: ignore[type-arg]
    db, rows, children = loaded
    answer = td.sql(f"SELECT count(*), max(voltage), min(voltage), avg(voltage), spread(current) FROM {db}.meters")
    [[count, vmax, vmin, vavg, spread]] = answer["data"]
    assert (count, vmax, vmin) == (len(rows), max(r.voltage for r in rows), min(r.voltage for r in rows))
    assert vavg == pytest.approx(statistics.fmean(r.voltage for r in rows))
    currents = [f32(r.current) for r in rows]
    assert spread == pytest.approx(max(currents) - min(currents))
    assert [c[:2] for c in answer["column_meta"]] == [["count(*)", "BIGINT"], ["max(voltage)", "INT"],
                                                      ["min(voltage)", "INT"], ["avg(voltage)", "DOUBLE"],
                                                      ["spread(current)", "DOUBLE"]]
    by_location = td.sql(f"SELECT location, count(*) FROM {db}.meters GROUP BY location ORDER BY location")
    expected: dict[str, int] = {}
    for r in rows:
        expected[children[r.table].location] = expected.get(children[r.table].location, 0) + 1
    assert by_location["data"] == [[k, v] for k, v in sorted(expected.items())]


def test_windows_over_produced_rows(td: TdBroker, loaded: tuple[str, list, dict]) -> None:  # type: ignore[type-arg]
    db, rows, _ = loaded
    answer = td.sql(f"SELECT _wstart, count(*), max(voltage) FROM {db}.s3 WHERE ts >= {BASE_TS} "
                    f"AND ts < {BASE_TS + 600_000} INTERVAL(1m)")
    mine = [r for r in rows if r.table == "s3" and BASE_TS <= r.ts < BASE_TS + 600_000]
    windows: dict[int, list[int]] = {}
    for r in mine:
        windows.setdefault(r.ts - r.ts % 60_000, []).append(r.voltage)
    assert answer["data"] == [[w, len(v), max(v)] for w, v in sorted(windows.items())]


def test_a_big_answer_is_whole(td: TdBroker, loaded: tuple[str, list, dict]) -> None:  # type: ignore[type-arg]
    db, rows, _ = loaded
    answer = td.sql(f"SELECT tbname, ts, voltage FROM {db}.meters ORDER BY tbname, ts")
    assert answer["rows"] == len(rows) == len(answer["data"])
    assert answer["data"] == [[r.table, r.ts, r.voltage] for r in sorted(rows, key=lambda r: (r.table, r.ts))]


def test_a_bad_query_gets_tdengines_error_with_its_position(td: TdBroker,
                                                            loaded: tuple[str, list, dict]) -> None:  # type: ignore[type-arg]
    db, _, _ = loaded
    status, answer = td.sql_error(f"SELECT nope FROM {db}.meters")
    assert status == 400 and answer["desc"] == "invalid column name nope at position 7"
    status, answer = td.sql_error(f"SELECT count(*) FROM {db}.meters INTERVAL(1m) SLIDING(2m)")
    assert "sliding value no larger than the interval value" in answer["desc"]


def test_tmqgate_sql_prints_the_rows(td: TdBroker, loaded: tuple[str, list, dict]) -> None:  # type: ignore[type-arg]
    db, rows, _ = loaded
    out = subprocess.run([sys.executable, "-m", "tmqgate.broker.cli", "sql", "--http", td.http,
                          f"SELECT count(*) FROM {db}.s1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "Query OK, 1 row(s) in set"
    assert out.stdout.splitlines()[2].strip() == str(sum(1 for r in rows if r.table == "s1"))
