"""The column-wise line-protocol parser (broker/tsdb/line_columns.py) against the per-line one:
on every batch it takes, it must group exactly the rows ``group_rows(parse_line_protocol …)``
groups — same supertables, child tables, tags, timestamps, values and types, and the same rows
table once a schema is planned — and it must hand back (None) every batch it does not take."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from tmqgate.broker.sql.ingest import _parsed, _Text
from tmqgate.broker.tsdb.line_columns import stable_batches
from tmqgate.broker.tsdb.schema_plan import StableBatch, group_rows, plan_schema

Record = tuple[str, str, str | None]


def _per_line(records: list[Record]) -> dict[str, StableBatch]:
    return group_rows(_parsed([_Text(i, text, precision, key) for i, (text, precision, key) in enumerate(records)]))


def _plain(values: Any) -> list[Any]:
    return values.to_pylist() if isinstance(values, pa.Array) else list(values)


def _assert_same(got: dict[str, StableBatch], want: dict[str, StableBatch]) -> None:
    assert list(got) == list(want)
    for name, w in want.items():
        g = got[name]
        assert _plain(g.tbnames) == w.tbnames
        assert _plain(g.ts) == w.ts
        assert list(g.columns) == list(w.columns)
        for k, values in w.columns.items():
            assert _plain(g.columns[k]) == values, k
        assert (g.column_types, g.column_lines, g.column_max_len) == (w.column_types, w.column_lines, w.column_max_len)
        assert list(g.tables.items()) == list(w.tables.items())
        assert (g.table_lines, g.tag_types, g.tag_lines, g.tag_max_len) == (
            w.table_lines, w.tag_types, w.tag_lines, w.tag_max_len)
        schema = plan_schema(None, w)
        assert plan_schema(None, g) == schema
        from tmqgate.broker.sql.ingest import _apply_plan
        stable = _apply_plan(None, name, schema)
        assert g.to_table(stable).equals(w.to_table(stable))


_KINDS = {
    "double": lambda r: r.choice([f"{r.uniform(-1e6, 1e6):.6f}", str(r.randint(-999, 999)), f"{r.random():.17g}",
                                  f"{r.uniform(-1, 1):.3e}", "+1.5", "-.25", "7.", "1E+3", "0", "-0",
                                  repr(r.uniform(-1e300, 1e300))]),
    "i": lambda r: f"{r.randint(-2**63, 2**63 - 1)}{r.choice('iI')}",
    "i8": lambda r: f"{r.randint(-128, 127)}{r.choice(['i8', 'I8'])}",
    "i32": lambda r: f"{r.randint(-2**31, 2**31 - 1)}i32",
    "u": lambda r: f"{r.randint(0, 2**64 - 1)}{r.choice('uU')}",
    "u16": lambda r: f"{r.randint(0, 2**16 - 1)}u16",
    "bool": lambda r: r.choice(["t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE"]),
}


def _batch(r: random.Random) -> list[Record]:
    """A batch of the shape the column-wise parser takes: a few supertables, each with one
    field set, tags from a few heads, keyed or unkeyed records, mixed precisions."""
    stables = {f"m{s}": [(f"f{j}" if r.random() < 0.8 else f"field_with_a_long_name_{j}", r.choice(list(_KINDS)))
                         for j in range(r.randint(1, 5))] for s in range(r.randint(1, 3))}
    records: list[Record] = []
    for _ in range(r.randint(1, 8)):
        precision = r.choice(["ns", "us", "ms", "s"])
        lines = []
        for _ in range(r.randint(1, 30)):
            stable = r.choice(list(stables))
            tags = "".join(f",t{k}=v{r.randint(0, 3)}" for k in range(r.randint(0, 2)))
            fields = ",".join(f"{name}={_KINDS[kind](r)}" for name, kind in stables[stable])
            ts = r.randint(1, 10**12) * (10**6 if precision == "ns" else 10**3 if precision == "us" else 1)
            lines.append(f"{stable}{tags} {fields} {ts}")
            if r.random() < 0.1:
                lines.append("")
        key = r.choice([None, None, f"tb{r.randint(0, 3)}"])
        records.append(("\n".join(lines) + r.choice(["", "\n"]), precision, key))
    return records


@pytest.mark.parametrize("seed", range(60))
def test_both_parsers_group_the_same_rows(seed: int) -> None:
    records = _batch(random.Random(seed))
    got = stable_batches(records)
    assert got is not None, records
    _assert_same(got, _per_line(records))


@pytest.mark.parametrize("records", [
    [("m f=1i 10\nm f=1 11", "ms", None)],  # one field, two kinds
    [("m f=1i 10\nm g=1i 11", "ms", None)],  # two field sets in one supertable
    [("m f=1i,f=2i 10", "ms", None)],  # a key twice
    [('m f="s" 10', "ms", None)],  # a string
    [("m\\ x f=1 10", "ms", None)],  # an escape
    [("m f=1 0", "ms", None)],  # timestamp 0: now
    [("m f=1", "ms", None)],  # no timestamp
    [("m,t=a t=1 10", "ms", None)],  # a tag and a field of one name
    [("m f=300i8 10", "ms", None)],  # out of the suffix's range
    [("m f=-1u 10", "ms", None)],  # negative unsigned
    [("m f=1e999 10", "ms", None)],  # not finite
    [("m f=1.5f32 10", "ms", None)],  # FLOAT
    [("m f=+1i 10", "ms", None)],  # a signed integer
    [("m f=1 99999999999999999999", "ms", None)],  # past int64
    [("m f=1 9223372036854775807", "s", None)],  # past int64 in milliseconds
    [("# comment\nm f=1 10", "ms", None)],
    [(" m f=1 10", "ms", None)],  # leading space
    [("m  f=1 10", "ms", None)],  # two spaces
    [("m f=1 10\r", "ms", None)],
    [(",t=a f=1 10", "ms", None)],  # no measurement
    [("m,t f=1 10", "ms", None)],  # a tag without '='
    [("\n\n", "ms", None)],  # nothing
    [("m f=1 10 ", "ms", None)],  # a trailing space
    [("m f=1,,g=2 10", "ms", None)],  # a stray comma
    [("m f=1,g 10", "ms", None)],  # a field without '='
    [("m f=1,g= 10", "ms", None)],  # an empty value
    [("m f=1=2 10", "ms", None)],  # '=' in a value
    [("m =1 10", "ms", None)],  # an empty key
    [("m f=1 -5", "ms", None)],  # a negative timestamp
    [("m f=1 1x", "ms", None)],  # not a number
    [("m f=1i 10\nm f=1I8 11", "ms", None)],  # two suffixes
    [("m f=0x10i 10", "ms", None)],  # hex
    [("m f=inf 10", "ms", None)], [("m f=nan 10", "ms", None)], [("m f=Infinity 10", "ms", None)],
    [("m f=1.5 10\nm f=t 11", "ms", None)], [("m f=t 10\nm f=1.5 11", "ms", None)],
    [("m f=1i 10\nm f=1.5 11", "ms", None)], [("m f=1.5 10\nm f=1i 11", "ms", None)],
    [("m f=1.5i 10", "ms", None)], [("m f=i 10", "ms", None)], [("m f=-0u 10", "ms", None)],
])
def test_what_it_hands_back_to_the_per_line_parser(records: list[Record]) -> None:
    assert stable_batches(records) is None


def test_the_ingest_path_takes_either_and_they_agree_on_a_bench_like_batch() -> None:
    """The bench's ingest (100 lines a record, keyed by child table, ms precision)."""
    r = random.Random(7)
    records: list[Record] = []
    for t in range(40):
        lines = [f"st,g=g{t % 8} v={r.random():.6f},k={r.randrange(100)}i {1_700_000_000_000 + 100 * t + j}"
                 for j in range(100)]
        records.append(("\n".join(lines), "ms", f"c{t % 8}"))
    got = stable_batches(records)
    assert got is not None and len(got["st"]) == 4000
    _assert_same(got, _per_line(records))
