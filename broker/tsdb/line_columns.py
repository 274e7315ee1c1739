"""InfluxDB line protocol, column-wise: the common shape of a Produce batch parsed by Arrow's
compute kernels, with no Python per line — the ingestion hot path (issue 28; the per-line
parser took ~20 µs a line, 68 % of the broker's CPU while ingesting).

``stable_batches`` takes a batch's records (text, precision, key) and returns the rows grouped
per supertable (``schema_plan.StableBatch``, its columns Arrow arrays), exactly what
``group_rows`` makes of ``parse_line_protocol``'s rows, or None when the batch is not of the
shape below; the caller then parses it line by line (``line_protocol``), which also words the
errors. Whatever this module does not handle it hands back, never guesses.

The shape (everything else is None):

- every line, once blank lines are left out, is ``head fields timestamp`` with one space
  between, no backslash, no quote, no tab or carriage return, no leading ``#``; the head is
  parsed once per distinct head by the per-line parser's own head parser (its errors: None);
- the timestamp is a non-zero integer that fits in milliseconds at the record's precision;
- all the lines of a supertable have the same field keys in the same order, no key twice,
  none of them a tag of that supertable, fewer than TDengine's limits;
- each field's values over those lines are all of one kind: integers with one suffix
  (``i`` ``u`` ``i8`` … ``u64``, any case) in the suffix's range, plain numbers (DOUBLE, finite),
  or booleans (``t`` ``true`` … ``FALSE``).

Tests: tests/test_line_columns.py compares the two parsers on generated batches.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tmqgate.broker.tsdb.encode import arange
from tmqgate.broker.tsdb.ingest_rules import (
    BOOL_V,
    INT64_MAX,
    INT_SUFFIX,
    MAX_COLUMN_NAME,
    SchemalessError,
    SchemalessRow,
    check_name,
)
from tmqgate.broker.tsdb.limits import MAX_COLUMNS, MAX_FIELDS, MAX_TAGS
from tmqgate.broker.tsdb.line_protocol import PRECISION_UNITS, head_parser
from tmqgate.broker.tsdb.schema_plan import StableBatch, add_table
from tmqgate.broker.tsdb.types import DOUBLE, TDType

__all__ = ["stable_batches"]

_SUFFIX = re.compile(r"[iIuU](?:8|16|32|64)?$")
_BOOL_TEXTS = ("t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE")
_TRUE = pa.array(_BOOL_TEXTS[:5])
_BOOLS = pa.array(_BOOL_TEXTS)
_BOOL = BOOL_V[True][0]


class _NotColumnar(Exception):
    """The batch is not of the shape this module parses: the per-line parser takes it."""


def stable_batches(records: Sequence[tuple[str, str, str | None]]) -> dict[str, StableBatch] | None:
    """``records``: each (text, precision, key or None) in batch order. The rows grouped per
    supertable as ``group_rows(parse_line_protocol …)`` gives them, or None (see the module)."""
    try:
        return _batches(records)
    except (_NotColumnar, SchemalessError, pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
        return None


def _batches(records: Sequence[tuple[str, str, str | None]]) -> dict[str, StableBatch]:  # noqa: C901
    blanks = False
    for text, _, _ in records:
        if "\\" in text or '"' in text or "\t" in text or "\r" in text:
            raise _NotColumnar
        blanks = blanks or "\n\n" in text or text[0] == "\n" or text[-1] == "\n"
    texts = pa.array([text for text, _, _ in records], pa.large_string())
    split = pc.split_pattern(texts, "\n")
    lines = pc.list_flatten(split)
    record_of = pc.list_parent_indices(split)
    starts = split.offsets.to_pylist()  # each record's first line, among all lines

    def number(line: int) -> int:
        """A line's number in its record (1-based, blank lines counted), as the per-line
        parser names them; ``line`` counts all lines, blank ones too."""
        return int(line - starts[bisect.bisect_right(starts, line) - 1] + 1)

    kept: pa.Array | None = None  # the lines left, by their index among all lines (None: all)
    if blanks:
        present = pc.not_equal(lines, "")
        kept = pc.indices_nonzero(present)
        lines, record_of = pc.filter(lines, present), pc.filter(record_of, present)
    if len(lines) == 0:
        raise _NotColumnar
    parts = pc.split_pattern(lines, " ")
    if _range(pc.list_value_length(parts)) != (3, 3):  # ``head fields timestamp``
        raise _NotColumnar
    heads = pc.list_element(parts, 0).dictionary_encode()
    fields = pc.list_element(parts, 1)
    raw_ts = pc.list_element(parts, 2)

    # timestamps in milliseconds, each record at its precision
    per_record = [PRECISION_UNITS[precision] for _, precision, _ in records]
    ts = pc.cast(raw_ts, pa.int64())
    if _range(ts)[0] <= 0:
        raise _NotColumnar  # 0 is "now", and a sign the per-line parser's to refuse
    muls = {m for m, _ in per_record}
    divs = {d for _, d in per_record}
    if len(muls) == 1 and len(divs) == 1:
        mul, div = muls.pop(), divs.pop()
        if mul != 1:
            ts = pc.multiply_checked(ts, mul)
        if div != 1:
            ts = pc.divide(ts, div)
    else:
        mul = pc.take(pa.array([m for m, _ in per_record], pa.int64()), record_of)
        div = pc.take(pa.array([d for _, d in per_record], pa.int64()), record_of)
        ts = pc.divide(pc.multiply_checked(ts, mul), div)

    # the distinct heads, each parsed once
    head_codes = heads.indices
    parse_head = head_parser()
    raw_heads = heads.dictionary.to_pylist()
    if any(not raw or raw[0] == "#" for raw in raw_heads):
        raise _NotColumnar
    # (a head's error hands the batch to the per-line parser, which names the line)
    parsed = [parse_head(raw, 0) for raw in raw_heads]
    stable_of_head = [stable for stable, _, _ in parsed]

    # each line's child table: its record's key, else its head's
    keys = [key for _, _, key in records]
    if all(keys):
        tbnames = pc.take(pa.array(keys, pa.string()), record_of)
    else:
        tbnames = pc.take(pa.array([tbname for _, tbname, _ in parsed], pa.string()), head_codes)
        if any(keys):
            line_keys = pc.take(pa.array(keys, pa.string()), record_of)
            tbnames = pc.if_else(pc.is_valid(line_keys), line_keys, tbnames)

    out: dict[str, StableBatch] = {}
    stables = list(dict.fromkeys(stable_of_head))
    if len(stables) == 1:
        line_of = number if kept is None else _numbered(number, kept)
        out[stables[0]] = _stable_batch(stables[0], fields, tbnames, ts, head_codes, parsed, line_of)
        return out
    stable_codes = pc.take(pa.array([stables.index(s) for s in stable_of_head], pa.int32()), head_codes)
    index = kept if kept is not None else arange(len(lines))
    for code in pc.unique(stable_codes).to_pylist():  # in the order they first appear
        rows = pc.equal(stable_codes, code)
        out[stables[code]] = _stable_batch(
            stables[code], pc.filter(fields, rows), pc.filter(tbnames, rows), pc.filter(ts, rows),
            pc.filter(head_codes, rows), parsed, _numbered(number, pc.filter(index, rows)))
    return out


def _numbered(number: Callable[[int], int], where: pa.Array) -> Callable[[int], int]:
    """Row i's line number, the row being line ``where[i]`` among all lines."""
    return lambda i: number(where[i].as_py())


def _stable_batch(stable: str, fields: pa.Array, tbnames: pa.Array, ts: pa.Array, head_codes: pa.Array,
                  parsed: list[tuple[str, str, dict[str, tuple[TDType, Any]]]],
                  line_of: Callable[[int], int]) -> StableBatch:
    """One supertable's lines (in order) as a StableBatch; ``line_of(i)``: row i's line number."""
    first_line = line_of(0)
    names = [item.partition("=")[0] for item in fields[0].as_py().split(",")]
    if "" in names or len(set(names)) != len(names) or len(names) >= MAX_FIELDS:
        raise _NotColumnar
    for name in names:
        if len(name) > 16:
            check_name(name, "field key", MAX_COLUMN_NAME, first_line)
    values = pc.split_pattern(fields, ",")
    if _range(pc.list_value_length(values)) != (len(names), len(names)):
        raise _NotColumnar  # lines with other field sets: the per-line parser merges them
    b = StableBatch(stable)
    for j, name in enumerate(names):
        item = pc.list_element(values, j)
        if not pc.all(pc.starts_with(item, name + "=")).as_py():
            raise _NotColumnar
        t, column = _typed(pc.utf8_slice_codeunits(item, len(name) + 1))
        b.columns[name] = column
        b.column_types[name] = t
        b.column_lines[name] = first_line
    b.tbnames, b.ts = tbnames, ts
    # each child table's tags from its first line, in the order the tables first appear
    tables = tbnames.dictionary_encode()
    for first in _first_rows(tables.indices):
        _, _, tags = parsed[head_codes[first].as_py()]
        if len(names) + len(tags) >= MAX_COLUMNS - 1 or len(tags) > MAX_TAGS:
            raise _NotColumnar
        if not tags.keys().isdisjoint(names):
            raise _NotColumnar  # a name both a tag and a field: the per-line parser's error
        add_table(b, SchemalessRow(stable, tbnames[first].as_py(), tags, {}, 0, line_of(first)))
    return b


def _typed(raw: pa.Array) -> tuple[TDType, pa.Array]:
    """One field's values (as written) typed as the per-line parser types them, all of one
    kind; _NotColumnar (or ArrowInvalid from a cast) otherwise. The kind is the first value's;
    Arrow's casts then refuse any value not of it, bar what is checked here besides (hex
    integers, which Arrow reads; non-finite numbers, which it reads as inf and nan)."""
    first = raw[0].as_py()
    suffix = _SUFFIX.search(first)
    if suffix is not None:
        written = suffix.group()
        if not (pc.all(pc.ends_with(raw, written)).as_py()
                or pc.all(pc.ends_with(raw, written, ignore_case=True)).as_py()):
            raise _NotColumnar  # several suffixes
        t, lo, hi = INT_SUFFIX[written.lower()]
        digits = pc.utf8_slice_codeunits(raw, 0, -len(written))
        if pc.any(pc.match_substring(digits, "x")).as_py() or pc.any(pc.match_substring(digits, "X")).as_py():
            raise _NotColumnar
        ints = pc.cast(digits, pa.uint64() if hi > INT64_MAX else pa.int64())
        low, high = _range(ints)
        if low < lo or high > hi:
            raise _NotColumnar  # out of range: the per-line parser's error
        return t, ints
    if first in _BOOL_TEXTS:
        if not pc.all(pc.is_in(raw, _BOOLS)).as_py():
            raise _NotColumnar
        return _BOOL, pc.is_in(raw, _TRUE)
    floats = pc.cast(raw, pa.float64())
    if not pc.all(pc.is_finite(floats)).as_py():
        raise _NotColumnar
    return DOUBLE, floats


def _first_rows(codes: pa.Array) -> list[int]:
    """For dictionary codes 0..k-1, the first row holding each (in code order: a dictionary
    encoding numbers values as they first appear, so also in row order). A stable sort puts
    each code's rows together in row order; the first of each run is its first row."""
    order = pc.sort_indices(codes)
    ordered = pc.take(codes, order)
    later = pc.add(pc.indices_nonzero(pc.not_equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1))), 1)
    return [order[0].as_py(), *pc.take(order, later).to_pylist()]


def _range(values: pa.Array) -> tuple[Any, Any]:
    """The smallest and largest of ``values`` (not empty, no nulls)."""
    got = pc.min_max(values).as_py()
    return got["min"], got["max"]
