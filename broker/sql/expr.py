"""sqlglot expressions → vectorised evaluation over a `pyarrow.Table` (Arrow compute only).

A table holds `tbname`, the supertable's columns and its tags. Names resolve
case-insensitively against the schema; type errors are found at compile time and name the
offending column or function and its position. Semantics follow TDengine: arithmetic yields
DOUBLE (TIMESTAMP ± integer stays TIMESTAMP), division or modulo by zero yields NULL, a
filter's NULL counts as false, topics may only project and filter (no aggregates, windows,
grouping, ordering, limits, joins or subqueries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.parser import AGGREGATE_FUNCTIONS, DIALECT, check_topic_query, node_position
from tmqgate.broker.tsdb.types import (
    BIGINT,
    BOOL,
    DOUBLE,
    FLOAT,
    INT,
    SMALLINT,
    TIMESTAMP,
    TINYINT,
    UBIGINT,
    UINT,
    USMALLINT,
    UTINYINT,
    StableSchema,
    TDType,
    TypeError_,
    nchar,
    parse_timestamp,
    varchar,
)
from tmqgate.protocol import clock

__all__ = [
    "Filter",
    "Projection",
    "compile_filter",
    "compile_projection",
    "check_topic_query",
    "AGGREGATE_FUNCTIONS",
]

NULLTYPE = TDType("NULL", pa.null())
TBNAME = varchar(192)

_WINDOW_PSEUDO = frozenset({"_WSTART", "_WEND", "_WDURATION", "_IROWTS", "_ISFILLED", "_QSTART", "_QEND"})

Value: TypeAlias = pa.Array | pa.Scalar
Evaluator = Callable[[pa.Table, "_Ctx"], Value]
_NO = object()


@dataclass
class _Ctx:
    n: int
    now_ms: int


class _Text:
    """An expression's SQL text, printed only when a message or a name needs it (printing
    with sqlglot costs more than compiling)."""

    __slots__ = ("node", "_s")

    def __init__(self, node: exp.Expr) -> None:
        self.node = node
        self._s: str | None = None

    def __str__(self) -> str:
        if self._s is None:
            try:
                self._s = self.node.sql(dialect=DIALECT)
            except Exception:  # sqlglot can fail to print odd trees; the class name still helps
                self._s = type(self.node).__name__
        return self._s

    def __eq__(self, other: object) -> bool:
        return str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


@dataclass
class _V:
    """A compiled expression: its TDengine type, its evaluator, and its value when constant."""

    type: TDType
    ev: Evaluator
    text: str | _Text
    const: Any = _NO


# --- small Arrow helpers ----------------------------------------------------------------


def _cast(x: Value, t: pa.DataType, safe: bool = False) -> Value:
    if x.type == t:
        return x
    return pc.cast(x, t, safe=safe)


def _full(x: Value, n: int, t: pa.DataType | None = None) -> pa.Array:
    """Broadcast a scalar to n rows (and cast to t)."""
    if isinstance(x, pa.Scalar):
        if not x.is_valid:
            return pa.nulls(n, t or x.type)
        x = pa.repeat(x, n)
    elif isinstance(x, pa.ChunkedArray):
        x = x.combine_chunks()
    return _cast(x, t, safe=False) if t is not None else x


def _null(t: pa.DataType) -> pa.Scalar:
    return pa.scalar(None, t)


def _column(table: pa.Table, name: str, t: pa.DataType, n: int) -> pa.Array:
    i = table.schema.get_field_index(name)
    if i < 0:
        low = name.lower()
        i = next((k for k, f in enumerate(table.schema) if f.name.lower() == low), -1)
    if i < 0:  # a column added after this entry was written reads back as NULL
        return pa.nulls(n, t)
    col = table.column(i)
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arr if arr.type == t else pc.cast(arr, t, safe=False)


def _domain_of(a: TDType, b: TDType) -> pa.DataType | None:
    """The Arrow type two operands are compared in, or None when TDengine would refuse."""
    if a.is_string and b.is_string:
        return pa.string()
    if a.is_bool and b.is_bool:
        return pa.bool_()
    num_a = a.is_numeric or a.is_bool or a.is_timestamp
    num_b = b.is_numeric or b.is_bool or b.is_timestamp
    if not (num_a and num_b):
        return None
    if a.is_float or b.is_float:
        return pa.float64()
    if a.name == b.name == "BIGINT UNSIGNED":
        return pa.uint64()
    if "BIGINT UNSIGNED" in (a.name, b.name):
        return pa.float64()
    return pa.int64()


def _common_type(types: list[TDType]) -> TDType | None:
    """The type of CASE branches: numbers → BIGINT/DOUBLE, strings → the longest, same otherwise."""
    ts = [t for t in types if t is not NULLTYPE]
    if not ts:
        return NULLTYPE
    if all(t.is_string for t in ts):
        n = max(t.length or 1 for t in ts)
        return nchar(min(n, 16379)) if any(t.name == "NCHAR" for t in ts) else varchar(n)
    if all(t.is_numeric for t in ts):
        if all(t.name == ts[0].name for t in ts):
            return ts[0]
        return DOUBLE if any(t.is_float for t in ts) else BIGINT
    if all(t.name == ts[0].name for t in ts):
        return ts[0]
    return None


_CAST_TYPES: dict[str, TDType] = {
    "BIGINT": BIGINT,
    "INT": INT,
    "SMALLINT": SMALLINT,
    "TINYINT": TINYINT,
    "UBIGINT": UBIGINT,
    "UINT": UINT,
    "USMALLINT": USMALLINT,
    "UTINYINT": UTINYINT,
    "DOUBLE": DOUBLE,
    "FLOAT": FLOAT,
    "BOOLEAN": BOOL,
    "TIMESTAMP": TIMESTAMP,
    "TIMESTAMPTZ": TIMESTAMP,
    "DATETIME": TIMESTAMP,
}
_NUMERIC_RE = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"


# --- the compiler -----------------------------------------------------------------------


class _Compiler:
    def __init__(self, schema: StableSchema, root: exp.Expr, tags_only: bool = False) -> None:
        self.schema = schema
        self.root = root
        self.tags_only = tags_only
        self.used: list[str] = []
        src = root.meta.get("tmq_text")
        self.src = src if isinstance(src, str) else None

    # -- errors --

    def pos(self, node: exp.Expr) -> int | None:
        return node_position(node, self.root)

    def error(self, message: str, node: exp.Expr) -> SqlError:
        p = self.pos(node)
        return SqlError(f"{message} at position {p}" if p is not None else message, p)

    @staticmethod
    def text(node: exp.Expr) -> _Text:
        return _Text(node)

    def describe(self, v: _V) -> str:
        return f"{v.text} ({v.type})"

    # -- dispatch --

    def compile(self, node: exp.Expr) -> _V:
        v = self._compile(node)
        if node.args.get("negate") and v.type.is_bool:  # sqlglot marks NOT LIKE etc. this way
            inner = v
            return _V(BOOL, lambda t, c: pc.invert(inner.ev(t, c)), self.text(node))
        return v

    def _compile(self, node: exp.Expr) -> _V:
        if isinstance(node, exp.Paren):
            return self.compile(node.this)
        if isinstance(node, exp.Literal):
            return self.literal(node)
        if isinstance(node, exp.Boolean):
            v = bool(node.this)
            return _V(BOOL, lambda t, c: pa.scalar(v), self.text(node), v)
        if isinstance(node, exp.Null):
            return _V(NULLTYPE, lambda t, c: _null(pa.null()), "NULL", None)
        if isinstance(node, exp.Column):
            return self.column(node)
        if isinstance(node, exp.Star | exp.Subquery | exp.Query | exp.Exists | exp.Window):
            raise self.refused(node)
        if isinstance(node, exp.Neg):
            return self.negate(node)
        if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod):
            return self.arith(node)
        if isinstance(node, exp.EQ | exp.NEQ | exp.GT | exp.GTE | exp.LT | exp.LTE):
            return self.compare(node, self.compile(node.this), self.compile(node.expression))
        if isinstance(node, exp.And | exp.Or | exp.Not):
            return self.logic(node)
        if isinstance(node, exp.In):
            return self.in_list(node)
        if isinstance(node, exp.Between):
            return self.between(node)
        if isinstance(node, exp.Like | exp.ILike):
            return self.like(node)
        if isinstance(node, exp.RegexpLike):
            return self.regexp(node)
        if isinstance(node, exp.Is):
            return self.is_null(node)
        if isinstance(node, exp.Case):
            return self.case(node)
        if isinstance(node, exp.Cast | exp.TryCast):
            return self.cast(node)
        if isinstance(node, exp.Func):
            return self.function(node)
        raise self.error(f"unsupported expression {self.text(node)}", node)

    def refused(self, node: exp.Expr) -> SqlError:
        """What a topic's expression may not hold: * (but alone in the select list), a subquery, a window."""
        if isinstance(node, exp.Star):
            return self.error("* is only allowed alone in the select list", node)
        if isinstance(node, exp.Window):
            return self.error("not allowed in a topic: window function", node)
        return self.error("not allowed in a topic: subquery", node)

    def logic(self, node: exp.And | exp.Or | exp.Not) -> _V:
        """AND / OR (Kleene: NULL where the answer is unknown) and NOT, of booleans only."""
        a = self.as_bool(node.this)
        if isinstance(node, exp.Not):
            return _V(BOOL, lambda t, c: pc.invert(a.ev(t, c)), self.text(node))
        b = self.as_bool(node.expression)
        fn = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
        return _V(BOOL, lambda t, c: fn(a.ev(t, c), b.ev(t, c)), self.text(node))

    # -- leaves --

    def literal(self, node: exp.Literal) -> _V:
        text = str(node.this)
        if node.is_string:
            n = max(1, len(text.encode("utf-8")))
            return _V(varchar(min(n, 65517)), lambda t, c: pa.scalar(text, pa.string()), repr(text), text)
        try:
            v: int | float = int(text, 0) if text.lower().startswith("0x") else int(text)
        except ValueError:
            try:
                v = float(text)
            except ValueError:
                raise self.error(f"invalid number {text!r}", node) from None
        return self.number(v, text)

    def number(self, v: int | float, text: str) -> _V:
        if isinstance(v, int):
            if -(2**63) <= v < 2**63:
                return _V(BIGINT, lambda t, c: pa.scalar(v, pa.int64()), text, v)
            if 0 <= v < 2**64:
                return _V(UBIGINT, lambda t, c: pa.scalar(v, pa.uint64()), text, v)
            v = float(v)
        fv = float(v)
        return _V(DOUBLE, lambda t, c: pa.scalar(fv, pa.float64()), text, fv)

    def column(self, node: exp.Column) -> _V:
        if node.table and node.table.lower() != self.schema.name.lower():
            raise self.error(f"unknown table {node.table!r} (the query reads {self.schema.name})", node)
        ident = node.this
        if isinstance(ident, exp.Star):
            raise self.error("* is only allowed alone in the select list", node)
        name = str(node.name)
        quoted = isinstance(ident, exp.Identifier) and bool(ident.quoted)
        low = name.lower()
        if low == "tbname" and self.schema.find(name) is None:
            if "tbname" not in self.used:
                self.used.append("tbname")
            return _V(TBNAME, lambda t, c: _column(t, "tbname", pa.string(), c.n), "tbname")
        col = self.schema.find(name)
        if col is None and not quoted:
            if low == "now":
                return self.now(node)
            if low in ("_rowts", "_c0"):
                col = self.schema.columns[0]
            if low.upper() in _WINDOW_PSEUDO:
                raise self.error(f"not allowed in a topic: window pseudo-column {name}", node)
        if col is None:
            raise self.error(f"unknown column or tag {name!r} of {self.schema.name}", node)
        if self.tags_only and not self.schema.is_tag(col.name):
            raise self.error(
                f"a supertable topic's WHERE may use only tags and tbname, not column {col.name!r}", node
            )
        if col.name not in self.used:
            self.used.append(col.name)
        cname, arrow = col.name, col.type.arrow
        return _V(col.type, lambda t, c: _column(t, cname, arrow, c.n), col.name)

    def now(self, node: exp.Expr, day: bool = False) -> _V:
        def ev(t: pa.Table, c: _Ctx) -> Value:
            return pa.scalar(c.now_ms - (c.now_ms % 86_400_000 if day else 0), pa.int64())

        return _V(TIMESTAMP, ev, "today()" if day else "now")

    # -- operators --

    def negate(self, node: exp.Neg) -> _V:
        a = self.compile(node.this)
        if a.const is not _NO and a.const is not None and a.type.is_numeric:
            return self.number(-a.const, f"-{a.text}")
        if a.type is NULLTYPE:
            return _V(DOUBLE, lambda t, c: _null(pa.float64()), self.text(node), None)
        if not a.type.is_numeric:
            raise self.error(f"invalid operand {self.describe(a)} for unary '-'", node)
        return _V(DOUBLE, lambda t, c: pc.negate(_cast(a.ev(t, c), pa.float64())), self.text(node))

    def arith(self, node: exp.Binary) -> _V:
        op = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}[type(node)]
        a = self.compile(node.this)
        b = self.compile(node.expression)
        for v, side in ((a, node.this), (b, node.expression)):
            if not (v.type.is_numeric or v.type.is_timestamp or v.type is NULLTYPE):
                raise self.error(f"invalid operand {self.describe(v)} for '{op}'", side)
        text = self.text(node)
        ta, tb = a.type, b.type
        if op in "+-" and (ta.is_timestamp or tb.is_timestamp):
            if ta.is_timestamp and tb.is_timestamp:
                if op == "+":
                    raise self.error("cannot add two timestamps", node)
                return _V(BIGINT, self._int_op(pc.subtract, a, b), text)
            other = tb if ta.is_timestamp else ta
            if other.is_float:
                raise self.error(f"a timestamp can only be shifted by an integer, not {other}", node)
            fn = pc.add if op == "+" else pc.subtract
            return _V(TIMESTAMP, self._int_op(fn, a, b), text)

        def ev(t: pa.Table, c: _Ctx) -> Value:
            x = _cast(a.ev(t, c), pa.float64())
            y = _cast(b.ev(t, c), pa.float64())
            if op == "+":
                return pc.add(x, y)
            if op == "-":
                return pc.subtract(x, y)
            if op == "*":
                return pc.multiply(x, y)
            y = pc.if_else(pc.equal(y, 0.0), _null(pa.float64()), y)  # x/0 and x%0 are NULL
            if op == "/":
                return pc.divide(x, y)
            return pc.subtract(x, pc.multiply(y, pc.trunc(pc.divide(x, y))))

        return _V(DOUBLE, ev, text)

    @staticmethod
    def _int_op(fn: Callable[..., Value], a: _V, b: _V) -> Evaluator:
        return lambda t, c: fn(
            _cast(a.ev(t, c), pa.int64(), safe=False), _cast(b.ev(t, c), pa.int64(), safe=False)
        )

    def _coerce(self, a: _V, b: _V, node: exp.Expr) -> tuple[_V, _V, pa.DataType]:
        """Bring two operands of a comparison into one Arrow type (timestamp strings parsed)."""
        if a.type.is_timestamp and b.type.is_string and isinstance(b.const, str):
            b = self.ts_literal(b, node)
        elif b.type.is_timestamp and a.type.is_string and isinstance(a.const, str):
            a = self.ts_literal(a, node)
        dom = _domain_of(a.type, b.type)
        if dom is None:
            bad, other = (a, b) if not a.type.is_numeric else (b, a)
            raise self.error(
                f"type mismatch: cannot compare {self.describe(bad)} with {self.describe(other)}", node
            )
        return a, b, dom

    def ts_literal(self, v: _V, node: exp.Expr) -> _V:
        try:
            ms = parse_timestamp(v.const)
        except TypeError_ as e:
            raise self.error(str(e), node) from None
        return _V(TIMESTAMP, lambda t, c: pa.scalar(ms, pa.int64()), v.text, ms)

    def compare(self, node: exp.Expr, a: _V, b: _V) -> _V:
        text = self.text(node)
        if a.type is NULLTYPE or b.type is NULLTYPE:
            return _V(BOOL, lambda t, c: _null(pa.bool_()), text, None)
        a, b, dom = self._coerce(a, b, node)
        fn = {
            exp.EQ: pc.equal,
            exp.NEQ: pc.not_equal,
            exp.GT: pc.greater,
            exp.GTE: pc.greater_equal,
            exp.LT: pc.less,
            exp.LTE: pc.less_equal,
        }[type(node)]  # type: ignore[index]  # (node is one of these comparisons)
        return _V(
            BOOL,
            lambda t, c: fn(_cast(a.ev(t, c), dom, safe=False), _cast(b.ev(t, c), dom, safe=False)),
            text,
        )

    def as_bool(self, node: exp.Expr) -> _V:
        v = self.compile(node)
        if v.type.is_bool:
            return v
        if v.type is NULLTYPE:
            return _V(BOOL, lambda t, c: _null(pa.bool_()), v.text, None)
        if v.type.is_numeric:
            return _V(BOOL, lambda t, c: pc.not_equal(_cast(v.ev(t, c), pa.float64()), 0.0), v.text)
        raise self.error(f"expected a condition, got {self.describe(v)}", node)

    def in_list(self, node: exp.In) -> _V:
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise self.error("not allowed in a topic: subquery", node)
        a = self.compile(node.this)
        items = [self.compile(e) for e in node.expressions]
        text = self.text(node)
        for e, v in zip(node.expressions, items, strict=True):
            if v.const is _NO:
                raise self.error(f"IN needs constant values, not {v.text}", e)
        if a.type is NULLTYPE:
            return _V(BOOL, lambda t, c: _null(pa.bool_()), text, None)
        has_null = any(v.const is None for v in items)
        values = [v for v in items if v.const is not None]
        dom: pa.DataType = {"VARCHAR": pa.string(), "NCHAR": pa.string()}.get(a.type.name, pa.int64())
        for e, v in zip(node.expressions, items, strict=True):
            if v.const is None:
                continue
            if a.type.is_timestamp and isinstance(v.const, str):
                continue
            d = _domain_of(a.type, v.type)
            if d is None:
                raise self.error(f"type mismatch: {self.describe(a)} IN {self.describe(v)}", e)
            if d == pa.float64() or (d == pa.uint64() and dom != pa.float64()):
                dom = d
            elif d == pa.bool_():
                dom = d
        consts = []
        for e, v in zip(node.expressions, items, strict=True):
            if v.const is None:
                continue
            c = v.const
            if a.type.is_timestamp and isinstance(c, str):
                c = self.ts_literal(v, e).const
            consts.append(c)
        try:
            value_set = pa.array(consts, dom) if values else pa.array([], dom)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as err:
            raise self.error(f"IN values do not fit {a.type}: {err}", node) from None

        # is_in hashes floats by their bits, so -0.0 would miss 0.0 (which `=` matches):
        # adding 0.0 turns every zero into +0.0 on both sides.
        floats = dom == pa.float64()
        if floats:
            value_set = pc.add(value_set, 0.0)

        def ev(t: pa.Table, c: _Ctx) -> Value:
            x = _full(a.ev(t, c), c.n, dom)
            if floats:
                x = pc.add(x, 0.0)
            r = pc.is_in(x, value_set=value_set, skip_nulls=True)
            r = pc.if_else(pc.is_null(x), _null(pa.bool_()), r)
            if has_null:
                r = pc.if_else(r, pa.scalar(True), _null(pa.bool_()))
            return r

        return _V(BOOL, ev, text)

    def between(self, node: exp.Between) -> _V:
        a = self.compile(node.this)
        lo = self.compile(node.args["low"])
        hi = self.compile(node.args["high"])
        ge = self.compare(exp.GTE(this=node.this, expression=node.args["low"]), a, lo)
        le = self.compare(exp.LTE(this=node.this, expression=node.args["high"]), a, hi)
        return _V(BOOL, lambda t, c: pc.and_kleene(ge.ev(t, c), le.ev(t, c)), self.text(node))

    def _string_operand(self, node: exp.Expr, what: str) -> _V:
        v = self.compile(node)
        if not (v.type.is_string or v.type is NULLTYPE):
            raise self.error(f"{what} needs a string operand, got {self.describe(v)}", node)
        return v

    def _pattern(self, node: exp.Expr, what: str) -> str:
        v = self.compile(node)
        if not isinstance(v.const, str):
            raise self.error(f"{what} needs a string constant pattern, got {v.text}", node)
        return v.const

    def like(self, node: exp.Like | exp.ILike) -> _V:
        a = self._string_operand(node.this, "LIKE")
        pattern = self._pattern(node.expression, "LIKE")
        icase = isinstance(node, exp.ILike)

        def ev(t: pa.Table, c: _Ctx) -> Value:
            x = a.ev(t, c)
            if x.type == pa.null():
                return _null(pa.bool_())
            return pc.match_like(_full(x, c.n), pattern, ignore_case=icase)

        return _V(BOOL, ev, self.text(node))

    def regexp(self, node: exp.RegexpLike) -> _V:
        a = self._string_operand(node.this, "MATCH")
        pattern = self._pattern(node.expression, "MATCH")
        try:
            pc.match_substring_regex(pa.array([""]), pattern)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise self.error(f"invalid regular expression {pattern!r}: {e}", node.expression) from None

        def ev(t: pa.Table, c: _Ctx) -> Value:
            x = a.ev(t, c)
            if x.type == pa.null():
                return _null(pa.bool_())
            return pc.match_substring_regex(_full(x, c.n), pattern)

        return _V(BOOL, ev, self.text(node))

    def is_null(self, node: exp.Is) -> _V:
        if not isinstance(node.expression, exp.Null):
            raise self.error(f"unsupported expression {self.text(node)}", node)
        a = self.compile(node.this)
        return _V(BOOL, lambda t, c: pc.is_null(_full(a.ev(t, c), c.n)), self.text(node))

    def case(self, node: exp.Case) -> _V:
        operand = node.this
        conds: list[_V] = []
        values: list[_V] = []
        for branch in node.args.get("ifs") or []:
            if operand is not None:
                cmp = exp.EQ(this=operand, expression=branch.this)
                conds.append(self.compare(cmp, self.compile(operand), self.compile(branch.this)))
            else:
                conds.append(self.as_bool(branch.this))
            values.append(self.compile(branch.args["true"]))
        default = node.args.get("default")
        dv = self.compile(default) if default is not None else None
        rtype = _common_type([v.type for v in values] + ([dv.type] if dv else []))
        if rtype is None:
            kinds = ", ".join(str(v.type) for v in values + ([dv] if dv else []))
            raise self.error(f"CASE branches have incompatible types ({kinds})", node)
        arrow = rtype.arrow

        def ev(t: pa.Table, c: _Ctx) -> Value:
            cs = [pc.fill_null(_full(k.ev(t, c), c.n, pa.bool_()), False) for k in conds]
            vs = [_full(v.ev(t, c), c.n, arrow) for v in values]
            if dv is not None:
                vs.append(_full(dv.ev(t, c), c.n, arrow))
            return pc.case_when(pc.make_struct(*cs, field_names=[str(i) for i in range(len(cs))]), *vs)

        return _V(rtype, ev, self.text(node))

    def cast(self, node: exp.Cast) -> _V:
        a = self.compile(node.this)
        to = node.args["to"]
        kind = to.this.name if hasattr(to.this, "name") else str(to.this)
        params = [p.this for p in to.expressions if isinstance(p, exp.DataTypeParam)]
        length = None
        if params:
            try:
                length = int(params[0].name)
            except (ValueError, AttributeError):
                raise self.error(f"invalid length in CAST to {self.text(to)}", node) from None
        try:
            if kind in ("VARCHAR", "BINARY", "CHAR", "VARBINARY", "TEXT"):
                if length is None:
                    raise TypeError_(f"CAST to {kind} needs a length, e.g. {kind}(64)")
                target = varchar(length)
            elif kind == "NCHAR":
                if length is None:
                    raise TypeError_("CAST to NCHAR needs a length, e.g. NCHAR(64)")
                target = nchar(length)
            elif kind in _CAST_TYPES:
                target = _CAST_TYPES[kind]
            else:
                raise TypeError_(f"cannot CAST to {self.text(to)}")
        except TypeError_ as e:
            raise self.error(str(e), node) from None
        src = a.type
        if not (src.is_numeric or src.is_bool or src.is_string or src.is_timestamp or src is NULLTYPE):
            raise self.error(f"cannot CAST {self.describe(a)}", node)

        def ev(t: pa.Table, c: _Ctx) -> Value:
            x = a.ev(t, c)
            if x.type == pa.null():
                return _null(target.arrow)
            x = _full(x, c.n)
            if target.is_string:
                if src.is_timestamp:
                    s = pc.strftime(pc.cast(x, pa.timestamp("ms")), format="%Y-%m-%d %H:%M:%S")
                elif src.is_bool:
                    s = pc.if_else(x, pa.scalar("true"), pa.scalar("false"))
                else:
                    s = pc.cast(x, pa.string())
                return pc.utf8_slice_codeunits(s, 0, target.length)
            if src.is_string:
                if target.is_bool:
                    low = pc.utf8_lower(pc.utf8_trim_whitespace(x))
                    num = self._numbers(x)
                    return pc.if_else(
                        pc.equal(low, "true"),
                        pa.scalar(True),
                        pc.if_else(pc.equal(low, "false"), pa.scalar(False), pc.not_equal(num, 0.0)),
                    )
                if target.is_timestamp:
                    try:
                        return pc.cast(pc.cast(x, pa.timestamp("ms")), pa.int64())
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                        parsed = pc.strptime(x, format="%Y-%m-%d %H:%M:%S", unit="ms", error_is_null=True)
                        return pc.cast(parsed, pa.int64())
                return pc.cast(self._numbers(x), target.arrow, safe=False)
            if target.is_bool:
                return pc.not_equal(pc.cast(x, pa.float64()), 0.0)
            return pc.cast(x, target.arrow, safe=False)

        return _V(target, ev, self.text(node))

    @staticmethod
    def _numbers(x: pa.Array) -> pa.Array:
        """Strings → float64; strings that are not numbers become NULL."""
        ok = pc.match_substring_regex(x, _NUMERIC_RE)
        return pc.cast(pc.if_else(ok, pc.utf8_trim_whitespace(x), _null(pa.string())), pa.float64())

    # -- functions --

    def function(self, node: exp.Func) -> _V:
        if isinstance(node, exp.Anonymous):
            fname = str(node.name).upper()
            args = list(node.expressions)
        else:
            fname = node.sql_name().upper()
            args = [a for a in node.args.values() if isinstance(a, exp.Expression)]
        if isinstance(node, exp.AggFunc) or fname in AGGREGATE_FUNCTIONS:
            raise self.error(f"not allowed in a topic: aggregate function {fname}", node)
        if fname in ("NOW", "CURRENT_TIMESTAMP") or isinstance(node, exp.CurrentTimestamp):
            return self.now(node)
        if fname == "TODAY":
            return self.now(node, day=True)
        text = self.text(node)
        if isinstance(node, exp.Abs | exp.Ceil | exp.Floor | exp.Round):
            return self.math_same(node, fname, text)
        unary = {
            "SQRT": pc.sqrt,
            "EXP": pc.exp,
            "SIN": pc.sin,
            "COS": pc.cos,
            "TAN": pc.tan,
            "ASIN": pc.asin,
            "ACOS": pc.acos,
            "ATAN": pc.atan,
            "LN": pc.ln,
        }
        if fname in unary:
            self.arity(node, fname, args, 1, 1)
            a = self.numeric_arg(args[0], fname)
            fn = unary[fname]
            return _V(DOUBLE, lambda t, c: fn(_cast(a.ev(t, c), pa.float64())), text)
        if isinstance(node, exp.Log) or fname == "LOG":
            x = node.this if isinstance(node, exp.Log) else args[0] if args else None
            base = node.expression if isinstance(node, exp.Log) else args[1] if len(args) > 1 else None
            if x is None:
                raise self.error("LOG needs an argument", node)
            a = self.numeric_arg(x, "LOG")
            if base is None:
                return _V(DOUBLE, lambda t, c: pc.ln(_cast(a.ev(t, c), pa.float64())), text)
            b = self.numeric_arg(base, "LOG")
            return _V(
                DOUBLE,
                lambda t, c: pc.logb(_cast(a.ev(t, c), pa.float64()), _cast(b.ev(t, c), pa.float64())),
                text,
            )
        if isinstance(node, exp.Pow) or fname in ("POW", "POWER"):
            x, y = (node.this, node.expression) if isinstance(node, exp.Pow) else (args + [None, None])[:2]
            if x is None or y is None:
                raise self.error("POW needs two arguments", node)
            a, b = self.numeric_arg(x, "POW"), self.numeric_arg(y, "POW")
            return _V(
                DOUBLE,
                lambda t, c: pc.power(_cast(a.ev(t, c), pa.float64()), _cast(b.ev(t, c), pa.float64())),
                text,
            )
        if isinstance(node, exp.Lower | exp.Upper):
            a = self.string_arg(node.this, fname)
            fn = pc.utf8_lower if isinstance(node, exp.Lower) else pc.utf8_upper
            return _V(a.type if a.type.is_string else varchar(1), self._str_fn(a, fn), text)
        if isinstance(node, exp.Length) or fname in ("LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH"):
            x = node.this if isinstance(node, exp.Length) else args[0] if args else None
            if x is None:
                raise self.error(f"{fname} needs an argument", node)
            binary = fname == "LENGTH" and (not isinstance(node, exp.Length) or bool(node.args.get("binary")))
            a = self.string_arg(x, "LENGTH" if binary else "CHAR_LENGTH")
            fn = pc.binary_length if binary else pc.utf8_length

            def length(t: pa.Table, c: _Ctx) -> Value:
                v = a.ev(t, c)
                if v.type == pa.null():
                    return _null(pa.int64())
                return pc.cast(fn(_full(v, c.n)), pa.int64())

            return _V(BIGINT, length, text)
        if isinstance(node, exp.Concat | exp.ConcatWs):
            return self.concat(node, text)
        if isinstance(node, exp.Substring) or fname in ("SUBSTR", "SUBSTRING"):
            return self.substr(node, args, text)
        if isinstance(node, exp.Trim) or fname in ("LTRIM", "RTRIM", "TRIM"):
            return self.trim(node, fname, args, text)
        raise self.error(f"unknown function {fname}", node)

    def arity(self, node: exp.Expr, fname: str, args: list[Any], lo: int, hi: int) -> None:
        if not lo <= len(args) <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise self.error(f"function {fname} takes {want} arguments, got {len(args)}", node)

    def numeric_arg(self, node: exp.Expr, fname: str) -> _V:
        v = self.compile(node)
        if not (v.type.is_numeric or v.type is NULLTYPE):
            raise self.error(f"function {fname} needs a numeric argument, got {self.describe(v)}", node)
        return v

    def string_arg(self, node: exp.Expr, fname: str) -> _V:
        v = self.compile(node)
        if not (v.type.is_string or v.type is NULLTYPE):
            raise self.error(f"function {fname} needs a string argument, got {self.describe(v)}", node)
        return v

    @staticmethod
    def _str_fn(a: _V, fn: Callable[..., Value], **kw: Any) -> Evaluator:
        def ev(t: pa.Table, c: _Ctx) -> Value:
            v = a.ev(t, c)
            if v.type == pa.null():
                return _null(pa.string())
            return fn(_full(v, c.n), **kw)

        return ev

    def math_same(self, node: exp.Func, fname: str, text: str | _Text) -> _V:
        a = self.numeric_arg(node.this, fname)
        rtype = a.type if a.type is not NULLTYPE else DOUBLE
        ndigits = 0
        if isinstance(node, exp.Round) and node.args.get("decimals") is not None:
            d = self.compile(node.args["decimals"])
            if not isinstance(d.const, int):
                raise self.error("ROUND needs an integer constant for its digits", node.args["decimals"])
            ndigits = d.const
        arrow = rtype.arrow

        def ev(t: pa.Table, c: _Ctx) -> Value:
            x = a.ev(t, c)
            if x.type == pa.null():
                return _null(arrow)
            if isinstance(node, exp.Abs):
                return x if rtype.is_unsigned else pc.abs(x)
            if rtype.is_integer:
                if isinstance(node, exp.Round) and ndigits < 0:
                    r = pc.round(
                        pc.cast(x, pa.float64()), ndigits=ndigits, round_mode="half_towards_infinity"
                    )
                    return pc.cast(r, arrow, safe=False)
                return x
            if isinstance(node, exp.Ceil):
                return pc.ceil(x)
            if isinstance(node, exp.Floor):
                return pc.floor(x)
            return pc.round(x, ndigits=ndigits, round_mode="half_towards_infinity")

        return _V(rtype, ev, text)

    def concat(self, node: exp.Concat | exp.ConcatWs, text: str | _Text) -> _V:
        parts = list(node.expressions)
        ws = isinstance(node, exp.ConcatWs)
        fname = "CONCAT_WS" if ws else "CONCAT"
        self.arity(node, fname, parts, 3 if ws else 2, 9 if ws else 8)
        vals = [self.string_arg(p, fname) for p in parts]
        strs = vals[1:] if ws else vals
        n = sum(v.type.length or 0 for v in strs)
        if ws:
            n += (vals[0].type.length or 0) * (len(strs) - 1)
        n = max(n, 1)
        rtype = nchar(min(n, 16379)) if any(v.type.name == "NCHAR" for v in vals) else varchar(min(n, 65517))

        def ev(t: pa.Table, c: _Ctx) -> Value:
            arrays = [_full(v.ev(t, c), c.n, pa.string()) for v in vals]
            if ws:
                return pc.binary_join_element_wise(*arrays[1:], arrays[0], null_handling="skip")
            return pc.binary_join_element_wise(*arrays, pa.scalar(""), null_handling="emit_null")

        return _V(rtype, ev, text)

    def _int_const(self, node: exp.Expr, what: str) -> int:
        v = self.compile(node)
        if not isinstance(v.const, int) or isinstance(v.const, bool):
            raise self.error(f"{what} must be an integer constant", node)
        return v.const

    def substr(self, node: exp.Func, args: list[exp.Expr], text: str | _Text) -> _V:
        if isinstance(node, exp.Substring):
            x, start, length = node.this, node.args.get("start"), node.args.get("length")
        else:
            self.arity(node, "SUBSTR", args, 2, 3)
            x, start, length = args[0], args[1], args[2] if len(args) > 2 else None
        a = self.string_arg(x, "SUBSTR")
        if start is None:
            raise self.error("SUBSTR needs a start position", node)
        pos = self._int_const(start, "SUBSTR's position")
        n = self._int_const(length, "SUBSTR's length") if length is not None else None
        if length is not None and n is not None and n < 0:
            raise self.error("SUBSTR's length must not be negative", length)
        if pos > 0:
            lo: int | None = pos - 1
            hi = None if n is None else pos - 1 + n
        elif pos < 0:
            lo = pos
            hi = None if n is None or pos + n >= 0 else pos + n
        else:
            lo, hi = 0, 0  # position 0 selects nothing
        rtype = a.type if a.type.is_string else varchar(1)
        return _V(rtype, self._str_fn(a, pc.utf8_slice_codeunits, start=lo, stop=hi), text)

    def trim(self, node: exp.Func, fname: str, args: list[exp.Expr], text: str | _Text) -> _V:
        chars = " "
        if isinstance(node, exp.Trim):
            x = node.this
            position = str(node.args.get("position") or "BOTH").upper()
            if node.expression is not None:
                ch = self.compile(node.expression)
                if not isinstance(ch.const, str):
                    raise self.error("TRIM needs a string constant to remove", node.expression)
                chars = ch.const
        else:
            self.arity(node, fname, args, 1, 1)
            x = args[0]
            position = {"LTRIM": "LEADING", "RTRIM": "TRAILING"}.get(fname, "BOTH")
        a = self.string_arg(x, fname)
        if not chars:
            return a
        fn = {"LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}.get(position, pc.utf8_trim)
        rtype = a.type if a.type.is_string else varchar(1)
        if len(chars) > 1:  # TRIM('ab' FROM x) removes the string 'ab', not the characters a, b
            return _V(rtype, self._trim_string(a, chars, position), text)
        return _V(rtype, self._str_fn(a, fn, characters=chars), text)

    @staticmethod
    def _trim_string(a: _V, s: str, position: str) -> Evaluator:
        import re

        esc = re.escape(s)
        pattern = {"LEADING": f"^({esc})+", "TRAILING": f"({esc})+$"}.get(position, f"^({esc})+|({esc})+$")

        def ev(t: pa.Table, c: _Ctx) -> Value:
            v = a.ev(t, c)
            if v.type == pa.null():
                return _null(pa.string())
            return pc.replace_substring_regex(_full(v, c.n), pattern, "")

        return ev


# --- public API -------------------------------------------------------------------------


def _run(fn: Callable[[], pa.Array], what: str) -> pa.Array:
    """Evaluate; an Arrow failure on odd data becomes a SqlError naming the expression."""
    try:
        return fn()
    except (pa.ArrowException, ValueError, TypeError) as e:
        raise SqlError(f"cannot evaluate {what}: {e}") from None


def _now(now_ms: int | None) -> int:
    return now_ms if now_ms is not None else clock.now_ms()


@dataclass
class Filter:
    """A compiled WHERE: `mask(table)` is true where a row passes (NULL counts as false)."""

    sql: str
    columns: list[str]  # the schema names it reads (tbname included when used)
    _ev: _V = field(repr=False)

    def mask(self, table: pa.Table, *, now_ms: int | None = None) -> pa.BooleanArray:
        ctx = _Ctx(table.num_rows, _now(now_ms))
        r = _run(lambda: _full(self._ev.ev(table, ctx), ctx.n, pa.bool_()), self.sql)
        return pc.fill_null(r, False)

    def apply(self, table: pa.Table, *, now_ms: int | None = None) -> pa.Table:
        return table.filter(self.mask(table, now_ms=now_ms))


@dataclass
class Projection:
    """A compiled select list (+ its WHERE as `where`); `evaluate` projects every row given,
    `apply` filters by `where` first."""

    names: list[str]
    types: list[TDType]
    columns: list[str]  # the schema names it reads, WHERE included
    where: Filter | None
    _evs: list[_V] = field(repr=False)

    def evaluate(self, table: pa.Table, *, now_ms: int | None = None) -> pa.Table:
        ctx = _Ctx(table.num_rows, _now(now_ms))
        arrays = [
            _run(lambda v=v, t=t: _full(v.ev(table, ctx), ctx.n, t.arrow), name)  # type: ignore[misc]
            for v, t, name in zip(self._evs, self.types, self.names, strict=True)
        ]
        return pa.Table.from_arrays(arrays, names=list(self.names))

    def apply(self, table: pa.Table, *, now_ms: int | None = None) -> pa.Table:
        now = _now(now_ms)
        if self.where is not None:
            table = table.filter(self.where.mask(table, now_ms=now))
        return self.evaluate(table, now_ms=now)


_T = TypeVar("_T")


def _guard(fn: Callable[[], _T]) -> _T:
    try:
        return fn()
    except SqlError:
        raise
    except RecursionError:
        raise SqlError("expression is nested too deeply") from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise SqlError(f"unsupported expression: {e}") from None
    except Exception as e:  # an odd tree must still come back as a SqlError
        raise SqlError(f"cannot compile expression: {type(e).__name__}: {e}") from None


def compile_filter(expr: exp.Expr, schema: StableSchema, *, tags_only: bool = False) -> Filter:
    """Compile a WHERE condition (a sqlglot expression or Where node) against a supertable.

    `tags_only` is for `CREATE TOPIC … AS STABLE st WHERE …`, which may read only tags and tbname.
    """
    node = expr.this if isinstance(expr, exp.Where) else expr

    def go() -> Filter:
        comp = _Compiler(schema, node.root(), tags_only)
        v = comp.as_bool(node)
        return Filter(str(comp.text(node)), comp.used, v)

    return _guard(go)


def _output_name(comp: _Compiler, node: exp.Expr, raw: str | None, v: _V) -> str:
    if isinstance(node, exp.Alias):
        return node.alias
    label = str(v.text)
    if isinstance(node, exp.Column) and (label == "tbname" or comp.schema.find(label) is not None):
        return label  # a plain column is named as the schema names it
    name = raw if raw is not None else str(comp.text(node))
    return name.strip()[:64]


def compile_projection(select: exp.Select, schema: StableSchema) -> Projection:
    """Compile a SELECT's list (and WHERE) against a supertable.

    Output names are TDengine's: the alias, else the column's name for a plain column, else
    the expression text as written (at most 64 characters). `*` expands to the columns then
    the tags, as TDengine does for a supertable.
    """

    def go() -> Projection:
        comp = _Compiler(schema, select.root())
        texts = select.meta.get("tmq_texts")
        names: list[str] = []
        evs: list[_V] = []
        for k, node in enumerate(select.expressions):
            raw = texts[k][0] if texts and k < len(texts) else None
            target = node.this if isinstance(node, exp.Alias) else node
            if isinstance(target, exp.Star) or (
                isinstance(target, exp.Column) and isinstance(target.this, exp.Star)
            ):
                if isinstance(node, exp.Alias):
                    raise comp.error("* cannot have an alias", node)
                if isinstance(target, exp.Column) and target.table.lower() != schema.name.lower():
                    raise comp.error(f"unknown table {target.table!r}", node)
                for col in (*schema.columns, *schema.tags):
                    v = comp.column(exp.column(col.name, quoted=True))
                    names.append(col.name)
                    evs.append(v)
                continue
            v = comp.compile(target)
            names.append(_output_name(comp, node, raw, v))
            evs.append(v)
        where_node = select.args.get("where")
        where = None
        if where_node is not None:
            wv = comp.as_bool(where_node.this)
            where = Filter(str(comp.text(where_node.this)), list(comp.used), wv)
        types = [v.type for v in evs]
        return Projection(names, types, list(comp.used), where, evs)

    return _guard(go)
