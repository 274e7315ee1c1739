"""Bad SQL, unknown names and type errors: a clear error (HTTP 4xx, JSON code != 0, a `desc`
naming the problem and, for parse errors, its position) and no change at all — no catalog
entry, no WAL version, no row of a multi-table INSERT whose first table was fine.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from .brokers import _tmqgate_cmd
from .tdengine_helpers import (
    METERS_DDL,
    VGROUPS,
    TdBroker,
    end_offsets,
    read_confluent,
    td_broker_fixture,
    unique,
)

pytestmark = pytest.mark.tmqgate_only

SYNTAX, STATEMENT = 0x2600, 0x2601  # TDengine's parser / statement error families (broker/network/http.py)


@pytest.fixture(scope="module")
def td(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TdBroker]:
    yield from td_broker_fixture(tmp_path_factory, "td-errors")


@pytest.fixture(scope="module")
def db(td: TdBroker) -> str:
    name = unique("errdb")
    td.sql(f"CREATE DATABASE {name} VGROUPS {VGROUPS}")
    td.sql(METERS_DDL.format(db=name))
    td.sql(f"CREATE STABLE {name}.notes (ts TIMESTAMP, note VARCHAR(8), n INT) TAGS (k INT)")
    td.sql(f"INSERT INTO {name}.d1 USING {name}.meters TAGS ('SF', 1) VALUES (1000, 1.5, 220, 0.5) "
           f"{name}.d2 USING {name}.meters TAGS ('LA', 2) VALUES (1000, 2.5, 230, 0.25) "
           f"{name}.n1 USING {name}.notes TAGS (1) VALUES (1000, 'ok', 1)")
    td.sql(f"CREATE TOPIC {name}_all AS DATABASE {name}")
    return name


def _state(td: TdBroker, db: str) -> dict[str, Any]:
    """Everything a failed statement must leave as it was."""
    return {
        "databases": sorted((d["name"], d["vgroups"]) for d in td.rows("SHOW DATABASES")),
        "stables": sorted((s["stable_name"], s["columns"], s["tags"]) for s in td.rows(f"SHOW {db}.STABLES")),
        "tables": sorted((t["table_name"], t["stable_name"], t["vgroup_id"]) for t in td.rows(f"SHOW {db}.TABLES")),
        "topics": sorted(t["topic_name"] for t in td.rows("SHOW TOPICS")),
        "describe": td.rows(f"DESCRIBE {db}.meters"),
        "wal_ends": end_offsets(td.bootstrap, db),  # every write, meta or rows, takes versions
    }


def _rows(td: TdBroker, db: str) -> list[tuple[str | None, bytes | None]]:
    return sorted((r.key, r.value) for r in read_confluent(td.bootstrap, f"{db}_all"))


def _fails(td: TdBroker, db: str, text: str, *, code: int, says: list[str], position_of: str | None = None,
           use: str | None = None) -> str:
    """`text` fails with `code`, a desc holding every string of `says` (and the 0-based
    position of `position_of` in the text), and changes nothing."""
    before = _state(td, db)
    status, answer = td.sql_error(text, use)
    desc = answer["desc"]
    assert status == 400 and answer["code"] == code, (text, status, answer)
    for s in says:
        assert s in desc, (text, desc, s)
    if position_of is not None:
        assert f"position {text.index(position_of)}" in desc, (text, desc)
    assert _state(td, db) == before, text
    return desc


def test_parse_errors_name_the_position(td: TdBroker, db: str) -> None:
    _fails(td, db, f"CREATE STABL {db}.m2 (ts TIMESTAMP, v INT) TAGS (a INT)", code=SYNTAX,
           says=["syntax error", "STABL"], position_of="STABL")
    _fails(td, db, f"CREATE STABLE {db}.m2 (ts TIMESTAMP, current FLOT) TAGS (a INT)", code=SYNTAX,
           says=["unknown data type", "FLOT"], position_of="FLOT")
    _fails(td, db, f"CREATE STABLE {db}.m2 (ts TIMESTAMP, v INT, v INT) TAGS (a INT)", code=SYNTAX,
           says=["duplicate", "'v'"])
    _fails(td, db, f"CREATE STABLE {db}.m2 (v INT, ts TIMESTAMP) TAGS (a INT)", code=SYNTAX,
           says=["first column must be TIMESTAMP"])
    _fails(td, db, f"CREATE STABLE {db}.m2 (ts TIMESTAMP, v VARCHAR) TAGS (a INT)", code=SYNTAX,
           says=["VARCHAR needs a length"])
    _fails(td, db, f"INSERT INTO {db}.d1 VALUES (2000, 1.5, 220, 0.5", code=SYNTAX, says=["expected ')'"])
    _fails(td, db, "SELEC 1", code=SYNTAX, says=["syntax error", "SELEC"], position_of="SELEC")
    _fails(td, db, "CREATE DATABASE x VGROUPS 0", code=SYNTAX, says=["VGROUPS 0"])
    _fails(td, db, "", code=SYNTAX, says=["empty statement"])


def test_unknown_names(td: TdBroker, db: str) -> None:
    _fails(td, db, f"INSERT INTO {db}.nosuch VALUES (2000, 1.5, 220, 0.5)", code=STATEMENT,
           says=["Table does not exist", "nosuch"])
    _fails(td, db, "INSERT INTO nodb_x.d1 VALUES (2000, 1.5, 220, 0.5)", code=STATEMENT,
           says=["Database not exist", "nodb_x"])
    _fails(td, db, f"INSERT INTO {db}.d1 (ts, nope) VALUES (2000, 1)", code=STATEMENT,
           says=["Invalid column name", "nope"])
    _fails(td, db, f"INSERT INTO {db}.d9 USING {db}.nostable TAGS (1) VALUES (2000, 1)", code=STATEMENT,
           says=["STable not exist", "nostable"])
    _fails(td, db, f"CREATE TABLE {db}.d9 USING {db}.nostable TAGS (1)", code=STATEMENT,
           says=["STable not exist", "nostable"])
    _fails(td, db, "INSERT INTO d1 VALUES (2000, 1.5, 220, 0.5)", code=STATEMENT, says=["Database not specified"])
    _fails(td, db, f"DESCRIBE {db}.nope", code=STATEMENT, says=["nope"])
    _fails(td, db, "DROP TOPIC no_such_topic", code=STATEMENT, says=["Topic not exist", "no_such_topic"])
    # TDengine's own code (TSDB_CODE_MND_DB_ALREADY_EXIST), as a cluster answers it too
    _fails(td, db, f"CREATE DATABASE {db}", code=0x0382, says=["Database already exists", db])


def test_insert_type_errors_write_nothing(td: TdBroker, db: str) -> None:
    before_rows = _rows(td, db)
    ok = f"{db}.d1 VALUES (5000, 1.5, 221, 0.5) (5001, 1.75, 222, 0.5)"
    # INT out of range in the second table of a multi-table INSERT whose first table is fine
    _fails(td, db, f"INSERT INTO {ok} {db}.d2 VALUES (5000, 2.5, 2147483648, 0.5)", code=STATEMENT,
           says=["voltage", "2147483648", "out of range for INT"])
    _fails(td, db, f"INSERT INTO {ok} {db}.d2 VALUES (5000, 2.5, 99999999999, 0.5)", code=STATEMENT,
           says=["voltage", "out of range for INT"])
    _fails(td, db, f"INSERT INTO {ok} {db}.d2 VALUES (5000, 2.5, 2.5, 0.5)", code=STATEMENT,
           says=["voltage", "not an integer"])
    _fails(td, db, f"INSERT INTO {ok} {db}.d2 VALUES (5000, 'abc', 230, 0.5)", code=STATEMENT,
           says=["current", "not a number"])
    # a VARCHAR(64) tag too long, in a table the statement would create (no table, no meta entry)
    _fails(td, db, f"INSERT INTO {ok} {db}.d3 USING {db}.meters TAGS ('{'x' * 65}', 3) VALUES (5000, 1, 230, 0.5)",
           code=STATEMENT, says=["location", "too long for VARCHAR(64)"])
    # a VARCHAR(8) column too long
    _fails(td, db, f"INSERT INTO {ok} {db}.n1 VALUES (5000, '123456789', 2)", code=STATEMENT,
           says=["note", "too long for VARCHAR(8)"])
    # wrong number of values, bad and null timestamps
    _fails(td, db, f"INSERT INTO {ok} {db}.d2 VALUES (5000, 2.5, 230)", code=STATEMENT,
           says=["Illegal number of columns"])
    _fails(td, db, f"INSERT INTO {ok} {db}.d2 VALUES ('notatime', 2.5, 230, 0.5)", code=STATEMENT,
           says=["ts", "invalid timestamp", "notatime"])
    _fails(td, db, f"INSERT INTO {ok} {db}.d2 VALUES (NULL, 2.5, 230, 0.5)", code=STATEMENT,
           says=["Primary timestamp column ts can not be null"])
    # a bad row after good rows of the same table
    _fails(td, db, f"INSERT INTO {db}.d1 VALUES (5000, 1.5, 221, 0.5) (5001, 1.5, -2147483649, 0.5)",
           code=STATEMENT, says=["voltage", "out of range for INT"])
    assert _rows(td, db) == before_rows
    # and the good half alone goes in
    assert td.affected(f"INSERT INTO {ok}") == 2
    assert len(_rows(td, db)) == len(before_rows) + 2


def test_topic_errors(td: TdBroker, db: str) -> None:
    name = unique("badtopic")
    _fails(td, db, f"CREATE TOPIC {name} AS SELECT AVG(current) FROM {db}.meters", code=SYNTAX,
           says=["not allowed in a topic", "aggregate function AVG"], position_of="AVG")
    _fails(td, db, f"CREATE TOPIC {name} AS SELECT ts, COUNT(*) FROM {db}.meters", code=SYNTAX,
           says=["not allowed in a topic", "COUNT"])
    _fails(td, db, f"CREATE TOPIC {name} AS SELECT ts, nope FROM {db}.meters", code=SYNTAX,
           says=["unknown column", "nope"], position_of="nope")
    _fails(td, db, f"CREATE TOPIC {name} AS SELECT ts, current FROM {db}.meters WHERE nope > 1", code=SYNTAX,
           says=["unknown column", "nope"], position_of="nope")
    _fails(td, db, f"CREATE TOPIC {name} AS SELECT ts, current FROM {db}.meters WHERE voltage > 'abc'",
           code=SYNTAX, says=["type mismatch", "voltage", "'abc'"], position_of="voltage >")
    _fails(td, db, f"CREATE TOPIC {name} AS SELECT ts, current FROM {db}.meters INTERVAL(10s)", code=SYNTAX,
           says=["not allowed in a topic", "INTERVAL"])
    _fails(td, db, f"CREATE TOPIC {name} AS SELECT ts FROM {db}.nometers", code=STATEMENT,
           says=["STable not exist", "nometers"])
    _fails(td, db, f"CREATE TOPIC {name} AS STABLE {db}.meters WHERE voltage > 3", code=SYNTAX,
           says=["only tags and tbname", "voltage"], position_of="voltage")
    _fails(td, db, f"CREATE TOPIC {name} WITH META AS SELECT ts FROM {db}.meters", code=SYNTAX,
           says=["WITH META is only for database and supertable topics"], position_of="WITH META")
    _fails(td, db, f"CREATE TOPIC {name} AS DATABASE no_such_db", code=STATEMENT,
           says=["Database not exist", "no_such_db"])
    # a topic name taken by a database (databases are Kafka topics too)
    _fails(td, db, f"CREATE TOPIC {db} AS DATABASE {db}", code=STATEMENT, says=[db])


def test_cli_prints_the_error_and_exits_non_zero(td: TdBroker, db: str) -> None:
    before = _state(td, db)
    text = f"CREATE STABLE {db}.m2 (ts TIMESTAMP, current FLOT) TAGS (a INT)"
    p = subprocess.run(_tmqgate_cmd() + ["sql", "--http", td.http, text], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0, p
    assert "FLOT" in p.stderr and f"position {text.index('FLOT')}" in p.stderr, p.stderr
    assert str(SYNTAX) in p.stderr, p.stderr
    p = subprocess.run(_tmqgate_cmd() + ["sql", "--http", td.http, "--db", db,
                                         "INSERT INTO d1 VALUES (6000, 1.5, 2147483648, 0.5)"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "out of range for INT" in p.stderr, p
    p = subprocess.run(_tmqgate_cmd() + ["sql", "--http", td.http, "--json", "INSERT INTO nodb_y.t VALUES (1, 2)"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and '"code": 9729' in p.stdout and "nodb_y" in p.stdout, p
    assert _state(td, db) == before
    # and a good statement through the CLI exits 0 with a table
    p = subprocess.run(_tmqgate_cmd() + ["sql", "--http", td.http, f"SHOW {db}.STABLES"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "meters" in p.stdout and "notes" in p.stdout, p
