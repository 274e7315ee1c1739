"""A TDengine SELECT as one DuckDB query over a supertable's rows (issue 29).

Rules:
- The rows come to DuckDB as the relation ``rows`` (tbname, then the supertable's columns;
  TIMESTAMP as BIGINT ms) and, when the query names a tag or selects ``*``, ``tags`` (tbname
  and the tags, one row per child table), joined on tbname. A child table's query is the
  supertable's restricted to its tbname.
- Every name is checked against the schema here (TDengine's "invalid column name" with its
  position) and written quoted in the schema's spelling; timestamps compared with strings
  are read as TDengine does (UTC when no offset), NOW and TODAY() are this query's instant.
- TDengine's functions become DuckDB's: FIRST/LAST skip NULLs, LAST_ROW does not, SPREAD is
  max - min, STDDEV the population's, PERCENTILE exact (linear between ranks),
  APERCENTILE DuckDB's approximate quantile.
- PARTITION BY groups every aggregate, window, LIMIT / OFFSET (per partition, as TDengine's)
  and SLIMIT / SOFFSET (partitions in the order of their keys).
- INTERVAL windows are aligned to the epoch plus the offset: [start, start + interval);
  _wend = _wstart + interval, _wduration = interval. STATE_WINDOW and SESSION windows span
  their first to last row (_wend is the last row's ts). Results are in ascending _wstart
  within a partition unless ORDER BY says otherwise.
- FILL fills the windows with no row between the WHERE's time bounds (else between the first
  and last window with rows), at most MAX_FILL_WINDOWS of them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from tmqgate.broker.sql.ast import Select, SqlError, Window
from tmqgate.broker.sql.parser import AGGREGATE_FUNCTIONS, node_position
from tmqgate.broker.tsdb.rows import TBNAME
from tmqgate.broker.tsdb.types import (
    BIGINT,
    DOUBLE,
    TIMESTAMP,
    UBIGINT,
    StableSchema,
    TDType,
    TypeError_,
    parse_timestamp,
    varchar,
)

#: FILL produces at most this many windows (TDengine's bound too).
MAX_FILL_WINDOWS = 10_000_000
TBNAME_TYPE = varchar(192)
PSEUDO = ("_wstart", "_wend", "_wduration")
#: TDengine functions this translation runs (others of AGGREGATE_FUNCTIONS are refused).
_AGGREGATES = {"COUNT", "SUM", "AVG", "MIN", "MAX", "FIRST", "LAST", "LAST_ROW", "SPREAD", "STDDEV",
               "STDDEV_POP", "PERCENTILE", "APERCENTILE"}
_DOUBLE_RESULT = {"AVG", "SPREAD", "STDDEV", "STDDEV_POP", "PERCENTILE", "APERCENTILE"}
_SAME_TYPE = {"MIN", "MAX", "FIRST", "LAST", "LAST_ROW"}


@dataclass
class Plan:
    """What runs: `sql` over ``rows`` (and ``tags`` when `needs_tags`), its output columns
    (name, TDengine type or None: read from the result), and the time range outside which
    the scan skips entries."""

    sql: str
    names: list[str]
    types: list[TDType | None]
    needs_tags: bool
    ts_low: int | None = None  # rows with ts below / above these cannot match
    ts_high: int | None = None


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _fname(node: exp.Expr) -> str:
    """A function call's TDengine name (STDDEV for sqlglot's reading of it)."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).upper()
    if isinstance(node, exp.StddevPop | exp.Stddev):
        return "STDDEV"
    return str(node.sql_name()).upper() if isinstance(node, exp.Func) else type(node).__name__.upper()


def is_aggregate(node: exp.Expr) -> bool:
    return isinstance(node, exp.AggFunc) or (isinstance(node, exp.Anonymous)
                                            and str(node.name).upper() in AGGREGATE_FUNCTIONS)


def _has_aggregate(node: exp.Expr) -> bool:
    return any(is_aggregate(n) for n in node.walk())


class Translator:
    """One SELECT against one supertable's schema (`child`: the child table it names, if any)."""

    def __init__(self, stmt: Select, schema: StableSchema, child: str | None, now_ms: int | None = None) -> None:
        self.stmt = stmt
        self.schema = schema
        self.child = child
        self.root = stmt.select
        self.now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self.ts = schema.columns[0].name
        self.tags = {t.name for t in schema.tags}
        self.window = stmt.window
        self.needs_tags = child is None and any(isinstance(i, exp.Star) for i in self.root.expressions)
        for tree in (self.root, *stmt.partition, *([stmt.window.expr] if stmt.window and stmt.window.expr else [])):
            for n in tree.walk():
                if isinstance(n, exp.Column) and schema.is_tag(n.name):
                    self.needs_tags = True
        self.partition = [self.scalar(p, "PARTITION BY") for p in stmt.partition]
        # a partition key's text → the column `_p<i>` it is computed into
        self.key_columns = {p.sql(dialect="mysql").lower(): f"_p{i}" for i, p in enumerate(stmt.partition)}

    # -- expressions -------------------------------------------------------------------------

    def error(self, message: str, node: exp.Expr) -> SqlError:
        p = node_position(node, self.root)
        return SqlError(message + (f" at position {p}" if p is not None else ""), p)

    def resolve(self, name: str, node: exp.Expr) -> str:
        """A column, tag or tbname in the schema's spelling; refused when there is none."""
        if name.lower() == TBNAME:
            return TBNAME
        if name.lower() in ("_rowts", "_c0"):
            return self.ts
        col = self.schema.find(name)
        if col is None:
            raise self.error(f"invalid column name {name}", node)
        if col.name in self.tags:
            self.needs_tags = True
        return col.name

    def type_of(self, node: exp.Expr) -> TDType | None:
        """The TDengine type of an output expression where TDengine fixes it (else None)."""
        if isinstance(node, exp.Alias):
            return self.type_of(node.this)
        if isinstance(node, exp.Paren):
            return self.type_of(node.this)
        if isinstance(node, exp.Column):
            name = node.name.lower()
            if name in ("_wstart", "_wend"):
                return TIMESTAMP
            if name == "_wduration":
                return BIGINT
            if name == TBNAME:
                return TBNAME_TYPE
            if name in ("_rowts", "_c0"):
                return TIMESTAMP
            col = self.schema.find(node.name)
            return col.type if col is not None else None
        if isinstance(node, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod):
            return DOUBLE  # TDengine's arithmetic is in DOUBLE
        if isinstance(node, exp.Literal) and not node.is_string:
            return BIGINT if str(node.this).lstrip("-").isdigit() else DOUBLE
        if is_aggregate(node):
            fn = _fname(node)
            if fn == "COUNT":
                return BIGINT
            if fn in _DOUBLE_RESULT:
                return DOUBLE
            arg = self.type_of(node.this) if isinstance(node.this, exp.Expr) else None
            if fn == "SUM":
                if arg is not None and arg.is_integer:
                    return UBIGINT if arg.is_unsigned else BIGINT
                return DOUBLE
            if fn in _SAME_TYPE:
                return arg
        return None

    def is_timestamp(self, node: exp.Expr) -> bool:
        t = self.type_of(node)
        return t is not None and t.is_timestamp

    def ts_value(self, node: exp.Expr) -> exp.Expr:
        """A string literal compared with a timestamp, as epoch ms (TDengine reads it so)."""
        if isinstance(node, exp.Literal) and node.is_string:
            try:
                return exp.Literal.number(parse_timestamp(node.this))
            except TypeError_ as e:
                raise self.error(str(e), node) from None
        return node

    def scalar(self, node: exp.Expr, where: str) -> str:
        """A row-level expression (no aggregate) as DuckDB SQL."""
        if _has_aggregate(node):
            raise self.error(f"aggregate functions are not allowed in {where}", node)
        return self.sql(node)

    def sql(self, node: exp.Expr, pseudo: dict[str, str] | None = None) -> str:
        """`node` rewritten for DuckDB and printed; `pseudo`: what _wstart / _wend /
        _wduration stand for here (absent: not allowed)."""
        return self.rewrite(node.copy(), pseudo).sql(dialect="duckdb")

    def rewrite(self, node: exp.Expr, pseudo: dict[str, str] | None) -> exp.Expr:  # noqa: C901
        def fix(n: exp.Expr) -> exp.Expr:
            if n.meta.get("tmq_internal"):
                return n
            if isinstance(n, exp.Column):
                name = n.name
                low = name.lower()
                if low in PSEUDO:
                    if pseudo is None or low not in pseudo:
                        raise self.error(f"{name} is only allowed with a window clause", n)
                    return _internal(exp.maybe_parse(pseudo[low], dialect="duckdb"))
                if low == "now" and not n.args.get("table") and not n.this.quoted:
                    return exp.Literal.number(self.now_ms)
                table = n.args.get("table")
                if table is not None and table.name.lower() not in (self.stmt.table.lower(),):
                    raise self.error(f"invalid column name {n.sql()}", n)
                return exp.column(self.resolve(name, n), quoted=True)
            if isinstance(n, exp.Anonymous):
                fn = str(n.name).upper()
                if fn == "NOW" and not n.expressions:
                    return exp.Literal.number(self.now_ms)
                if fn == "TODAY" and not n.expressions:
                    return exp.Literal.number(self.now_ms - self.now_ms % 86_400_000)
            if isinstance(n, exp.Binary) and isinstance(n, exp.EQ | exp.NEQ | exp.GT | exp.GTE | exp.LT | exp.LTE):
                if self.is_timestamp(n.this):
                    n.set("expression", self.ts_value(n.expression))
                elif self.is_timestamp(n.expression):
                    n.set("this", self.ts_value(n.this))
            if isinstance(n, exp.Between) and self.is_timestamp(n.this):
                n.set("low", self.ts_value(n.args["low"]))
                n.set("high", self.ts_value(n.args["high"]))
            if isinstance(n, exp.In) and self.is_timestamp(n.this):
                n.set("expressions", [self.ts_value(e) for e in n.expressions])
            if isinstance(n, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod):
                # TDengine's arithmetic is DOUBLE, and a division by zero is NULL
                a: exp.Expr = exp.cast(n.this, "DOUBLE")
                b: exp.Expr = exp.cast(n.expression, "DOUBLE")
                if isinstance(n, exp.Div | exp.Mod):
                    b = exp.Nullif(this=b, expression=exp.Literal.number(0))
                n.set("this", a)
                n.set("expression", b)
                return n
            if is_aggregate(n):
                return self.aggregate(n)
            return n

        return node.transform(fix, copy=False)

    def aggregate(self, n: exp.Expr) -> exp.Expr:
        fn = _fname(n)
        if fn not in _AGGREGATES:
            raise self.error(f"function {fn} is not supported", n)
        args = [n.this] if not isinstance(n, exp.Anonymous) else list(n.expressions)
        if isinstance(n, exp.Anonymous) or fn in ("FIRST", "LAST"):
            args = list(n.expressions) if isinstance(n, exp.Anonymous) else [n.this]
        for a in args:
            if isinstance(a, exp.Expr) and any(is_aggregate(x) for x in a.walk()):
                raise self.error(f"aggregate functions cannot be nested in {fn}", n)
        if fn == "COUNT":
            return n
        if fn in ("SUM", "AVG", "MIN", "MAX", "STDDEV", "STDDEV_POP"):
            arg = n.this
            if fn == "STDDEV" or fn == "STDDEV_POP":
                return exp.Anonymous(this="stddev_pop", expressions=[arg])
            if fn == "SUM":
                t = self.type_of(arg) if isinstance(arg, exp.Column) else None
                cast = ("UBIGINT" if t.is_unsigned else "BIGINT") if t is not None and t.is_integer else "DOUBLE"
                return exp.cast(exp.Anonymous(this="sum", expressions=[arg]), cast)
            return n
        if len(args) < 1 or (fn in ("FIRST", "LAST", "LAST_ROW", "SPREAD") and len(args) != 1):
            raise self.error(f"invalid number of arguments to {fn}", n)
        arg = args[0]
        ts = exp.column(self.ts, quoted=True)
        if fn in ("FIRST", "LAST"):
            inner = exp.Anonymous(this="arg_min" if fn == "FIRST" else "arg_max", expressions=[arg, ts])
            return exp.Filter(this=inner, expression=exp.Where(this=exp.Not(this=exp.Is(this=arg.copy(),
                                                                                       expression=exp.Null()))))
        if fn == "LAST_ROW":
            return exp.Anonymous(this="arg_max_null", expressions=[arg, ts])
        if fn == "SPREAD":
            return exp.cast(exp.Sub(this=exp.Anonymous(this="max", expressions=[arg]),
                                    expression=exp.Anonymous(this="min", expressions=[arg.copy()])), "DOUBLE")
        # PERCENTILE / APERCENTILE (value, p[, algorithm])
        if len(args) < 2 or (fn == "PERCENTILE" and len(args) != 2) or len(args) > 3:
            raise self.error(f"invalid number of arguments to {fn}", n)
        p = args[1]
        if not (isinstance(p, exp.Literal) and not p.is_string) or not 0 <= float(p.this) <= 100:
            raise self.error(f"{fn} takes a percentile between 0 and 100", p)
        q = exp.Literal.number(float(p.this) / 100)
        name = "quantile_cont" if fn == "PERCENTILE" else "approx_quantile"
        return exp.cast(exp.Anonymous(this=name, expressions=[exp.cast(arg, "DOUBLE"), q]), "DOUBLE")

    # -- the query -------------------------------------------------------------------------

    def items(self) -> tuple[list[exp.Expr], list[str]]:
        """The select list with * expanded, and each item's output name (as written)."""
        texts = self.root.meta.get("tmq_texts")
        out: list[exp.Expr] = []
        names: list[str] = []
        for i, item in enumerate(self.root.expressions):
            if isinstance(item, exp.Star):
                cols = [c.name for c in self.schema.columns]
                if self.child is None:
                    cols += [t.name for t in self.schema.tags]
                for c in cols:
                    out.append(exp.column(c, quoted=True))
                    names.append(c)
                continue
            out.append(item)
            if isinstance(item, exp.Alias):
                names.append(item.alias)
            elif texts is not None and i < len(texts):
                names.append(texts[i][0].strip())
            else:
                names.append(item.sql(dialect="mysql"))
        return out, names

    def translate(self) -> Plan:
        sel = self.root
        for key in ("joins", "laterals", "with_", "with", "into"):
            if sel.args.get(key):
                raise SqlError(f"not supported: {key.rstrip('_').upper()}")
        items, names = self.items()
        types = [self.type_of(i) for i in items]
        where = sel.args.get("where")
        conds = [self.scalar(where.this, "WHERE")] if where is not None else []
        if self.child is not None:
            conds.append(f"{_q(TBNAME)} = '{self.child.replace(chr(39), chr(39) * 2)}'")
        low, high = self.time_bounds(where.this if where is not None else None)
        aggregated = any(_has_aggregate(i) for i in items) or bool(sel.args.get("group"))
        if self.window is not None and not aggregated:
            raise self.error("a window clause needs an aggregate function in the select list", sel)
        if self.window is None and self.stmt.fill is not None:
            raise SqlError("FILL needs INTERVAL")
        if self.window is not None and sel.args.get("group"):
            raise self.error("a window clause cannot be used with GROUP BY", sel.args["group"])
        parts = [f"{p} AS _p{i}" for i, p in enumerate(self.partition)]
        base_cols = ", ".join(["*", *parts])
        source = "rows"
        if self.needs_tags:
            tag_cols = ", ".join(f"g.{_q(t.name)}" for t in self.schema.tags)
            source = f"(SELECT r.*, {tag_cols} FROM rows r LEFT JOIN tags g ON r.{_q(TBNAME)} = g.{_q(TBNAME)})"
        filt = f"SELECT {base_cols} FROM {source}" + (f" WHERE {' AND '.join(f'({c})' for c in conds)}"
                                                        if conds else "")
        keys = [f"_p{i}" for i in range(len(self.partition))]
        if self.stmt.slimit is not None or self.stmt.soffset:
            if not keys and not sel.args.get("group"):
                raise SqlError("SLIMIT needs PARTITION BY or GROUP BY")
            # the groups SLIMIT counts: the partitions, else GROUP BY's groups, in key order
            ranked = keys or [self.scalar(g, "GROUP BY") for g in sel.args["group"].expressions]
            order = ", ".join(f"{k} NULLS FIRST" for k in ranked)  # as ORDER BY's ascending default
            filt = (f"SELECT * EXCLUDE (_g) FROM (SELECT *, dense_rank() OVER (ORDER BY {order}) AS _g "
                    f"FROM ({filt})) WHERE _g > {self.stmt.soffset}"
                    + (f" AND _g <= {self.stmt.soffset + self.stmt.slimit}" if self.stmt.slimit is not None else ""))
        if self.window is None:
            sql = self.plain(items, keys, filt, aggregated)
        elif self.window.kind == "interval":
            sql = self.interval(items, keys, filt, self.window, low, high)
        else:
            sql = self.event_window(items, keys, filt, self.window)
        return Plan(sql, names, types, self.needs_tags, low, high)

    def _replace_keys(self, node: exp.Expr, extra: dict[str, str] | None = None) -> exp.Expr:
        """Item subtrees equal to a partition key (outside aggregates) as that key's column."""
        keys = {**self.key_columns, **(extra or {})}

        def walk(n: exp.Expr) -> exp.Expr:
            if is_aggregate(n):
                return n
            found = keys.get(n.sql(dialect="mysql").lower()) if not isinstance(n, exp.Literal | exp.Alias) else None
            if found is not None:
                return _internal(exp.maybe_parse(found, dialect="duckdb"))
            for k, v in list(n.args.items()):
                if isinstance(v, exp.Expr):
                    n.set(k, walk(v))
                elif isinstance(v, list):
                    n.set(k, [walk(x) if isinstance(x, exp.Expr) else x for x in v])
            return n

        return walk(node.copy())

    def _item(self, item: exp.Expr, pseudo: dict[str, str] | None, extra: dict[str, str] | None = None) -> str:
        """A select item (its alias dropped) or a HAVING condition as DuckDB SQL over the
        partition keys' columns."""
        node = item.this if isinstance(item, exp.Alias) else item
        return self.sql(self._replace_keys(node, extra), pseudo)

    def _select_list(self, items: list[exp.Expr], pseudo: dict[str, str] | None,
                     extra: dict[str, str] | None = None) -> str:
        return ", ".join(f"{self._item(item, pseudo, extra)} AS _c{i}" for i, item in enumerate(items))

    def _tail(self, pseudo: dict[str, str] | None, keys: list[str], default_order: list[str],
              items: list[exp.Expr], having_done: bool = False) -> str:
        """HAVING (unless `having_done`), ORDER BY and LIMIT / OFFSET (per partition when
        there are keys)."""
        sel = self.root
        having = None if having_done else sel.args.get("having")
        order = sel.args.get("order")
        limit = sel.args.get("limit")
        offset = sel.args.get("offset")
        out = ""
        if having is not None:
            out += f" HAVING {self._item(having.this, pseudo)}"
        order_sql = [f"{o} NULLS FIRST" for o in default_order]  # TDengine's ascending default
        if order is not None:
            order_sql = [self._order_item(o, pseudo, items) for o in order.expressions]
        n = off = None
        if limit is not None:
            n = self._int(limit.expression if limit.expression is not None else limit.this, "LIMIT")
            if limit.args.get("offset") is not None:
                off = self._int(limit.args["offset"], "OFFSET")
        if offset is not None:
            off = self._int(offset.expression if offset.expression is not None else offset.this, "OFFSET")
        if keys and (n is not None or off is not None):
            over = f"PARTITION BY {', '.join(keys)}" + (f" ORDER BY {', '.join(order_sql)}" if order_sql else "")
            lo = off or 0
            cond = f"row_number() OVER ({over}) > {lo}" + (f" AND row_number() OVER ({over}) <= {lo + n}"
                                                             if n is not None else "")
            out += f" QUALIFY {cond}"
            n = off = None
        if order_sql:
            out += f" ORDER BY {', '.join(order_sql)}"
        if n is not None:
            out += f" LIMIT {n}"
        if off:
            out += f" OFFSET {off}"
        return out

    def _order_item(self, o: exp.Expr, pseudo: dict[str, str] | None, items: list[exp.Expr]) -> str:
        node = o.this if isinstance(o, exp.Ordered) else o
        desc = isinstance(o, exp.Ordered) and bool(o.args.get("desc"))
        if isinstance(node, exp.Literal) and not node.is_string:
            k = int(node.this)
            if not 1 <= k <= len(items):
                raise self.error(f"ORDER BY position {k} is not in the select list", node)
            text = f"_c{k - 1}"
        else:
            aliases = {i.alias.lower(): f"_c{j}" for j, i in enumerate(items) if isinstance(i, exp.Alias)}
            if isinstance(node, exp.Column) and node.name.lower() in aliases and not node.args.get("table"):
                text = aliases[node.name.lower()]
            else:
                text = self.sql(self._replace_keys(node), pseudo)
        # TDengine's (and sqlglot's MySQL reading's) default: NULLs first ascending, last descending
        nulls_first = o.args.get("nulls_first") if isinstance(o, exp.Ordered) else None
        if nulls_first is None:
            nulls_first = not desc
        return text + (" DESC" if desc else "") + (" NULLS FIRST" if nulls_first else " NULLS LAST")

    def _int(self, node: Any, what: str) -> int:
        if isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit():
            return int(node.this)
        raise self.error(f"{what} takes a non-negative integer", node if isinstance(node, exp.Expr) else self.root)

    def plain(self, items: list[exp.Expr], keys: list[str], filt: str, aggregated: bool) -> str:
        sel = self.root
        distinct = "DISTINCT " if sel.args.get("distinct") else ""
        group = sel.args.get("group")
        group_sql: list[str] = list(keys)
        if group is not None:
            group_sql += [self.scalar(g, "GROUP BY") for g in group.expressions]
        select_list = self._select_list(items, None)
        sql = f"SELECT {distinct}{select_list} FROM ({filt})"
        if aggregated and group_sql:
            sql += f" GROUP BY {', '.join(group_sql)}"
        elif not aggregated and keys:
            # rows of a partition together, each in time order
            default = [*keys, _q(self.ts)]
            return sql + self._tail(None, keys, default if sel.args.get("order") is None else [], items)
        return sql + self._tail(None, keys if aggregated and group is None else [], [], items)

    def interval(self, items: list[exp.Expr], keys: list[str], filt: str, w: Window,
                 low: int | None, high: int | None) -> str:
        ts = _q(self.ts)
        size, step, off = w.interval, w.sliding or w.interval, w.offset
        start = f"(({ts} - {off}) - ((({ts} - {off}) % {step}) + {step}) % {step} + {off})"
        k = -(-size // step)
        if k == 1:
            windowed = f"SELECT *, {start} AS _wstart FROM ({filt})"
        else:
            windowed = (f"SELECT * FROM (SELECT *, {start} - _i * {step} AS _wstart FROM ({filt}), "
                        f"range({k}) AS _r(_i)) WHERE {ts} < _wstart + {size}")
        pseudo = {"_wstart": "_wstart", "_wend": f"(_wstart + {size})", "_wduration": str(size)}
        group = ", ".join([*keys, "_wstart"])
        fill = self.stmt.fill
        if fill is None or fill.mode == "none":
            sql = f"SELECT {self._select_list(items, pseudo)} FROM ({windowed}) GROUP BY {group}"
            return sql + self._tail(pseudo, keys, [*keys, "_wstart"], items)
        # FILL: aggregates per window, then every window of the range joined to them
        filled = [i for i, item in enumerate(items) if _has_aggregate(item)]
        agg_list = ", ".join([*keys, "_wstart"] + [f"{self._item(items[i], pseudo)} AS _c{i}" for i in filled])
        agg = f"SELECT {agg_list} FROM ({windowed}) GROUP BY {group}"
        having = self.root.args.get("having")
        if having is not None:
            agg += f" HAVING {self._item(having.this, pseudo)}"

        def align(t: int) -> int:
            return (t - off) - (t - off) % step + off

        if low is not None and high is not None:
            first, last = align(low) - (k - 1) * step, align(high)
            if (last - first) // step + 1 > MAX_FILL_WINDOWS:
                raise SqlError(f"FILL would make more than {MAX_FILL_WINDOWS} windows: narrow the time range")
            bounds = f"SELECT {first}::BIGINT AS _lo, {last}::BIGINT AS _hi"
        else:
            bounds = "SELECT min(_wstart) AS _lo, max(_wstart) AS _hi FROM a"
        key_rel = f"(SELECT DISTINCT {', '.join(keys)} FROM a) kk, " if keys else ""
        grid = (f"SELECT {''.join(f'kk.{c}, ' for c in keys)}s._wstart FROM {key_rel}b, "
                f"range(b._lo, b._hi + {step}, {step}) AS s(_wstart)")
        using = ", ".join([*keys, "_wstart"])
        taken = ", ".join(f"a._c{i}" for i in filled) or "NULL AS _none"
        joined = f"SELECT g.*, {taken}, a._wstart IS NOT NULL AS _hit FROM g LEFT JOIN a USING ({using})"
        values = list(fill.values)
        if fill.mode == "value" and len(values) < len(filled):
            raise SqlError(f"FILL(VALUE) needs {len(filled)} values, one for each aggregate; {len(values)} given")
        part = f"PARTITION BY {', '.join(keys)} " if keys else ""
        outer: list[str] = []
        for i, item in enumerate(items):
            if i not in filled:
                outer.append(f"{self._item(item, pseudo)} AS _c{i}")
                continue
            c = f"_c{i}"
            mode = fill.mode
            if mode == "null":
                expr = c
            elif mode == "value":
                v = values[filled.index(i)]
                lit = "NULL" if v is None else (repr(v) if not isinstance(v, str) else "'" + v.replace("'", "''") + "'")
                t = self.type_of(item)
                cast = t.arrow if t is not None else None
                target = _duck_type(t) if cast is not None else None
                expr = f"CASE WHEN _hit THEN {c} ELSE " + (f"CAST({lit} AS {target})" if target else lit) + " END"
            elif mode == "prev":
                expr = (f"CASE WHEN _hit THEN {c} ELSE last_value({c} IGNORE NULLS) OVER ({part}ORDER BY _wstart "
                        "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) END")
            elif mode == "next":
                expr = (f"CASE WHEN _hit THEN {c} ELSE first_value({c} IGNORE NULLS) OVER ({part}ORDER BY _wstart "
                        "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) END")
            else:  # linear
                before = f"({part}ORDER BY _wstart ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
                after = f"({part}ORDER BY _wstart ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)"
                pv = f"last_value({c} IGNORE NULLS) OVER {before}"
                pt = f"last_value(CASE WHEN {c} IS NOT NULL THEN _wstart END IGNORE NULLS) OVER {before}"
                nv = f"first_value({c} IGNORE NULLS) OVER {after}"
                nt = f"first_value(CASE WHEN {c} IS NOT NULL THEN _wstart END IGNORE NULLS) OVER {after}"
                lin = f"({pv} + ({nv} - {pv}) * (_wstart - {pt}) / ({nt} - {pt}))"
                t = self.type_of(item)
                if t is not None and t.is_numeric:
                    lin = f"CAST({lin} AS {_duck_type(t)})"
                expr = f"CASE WHEN _hit THEN {c} ELSE {lin} END"
            outer.append(f"{expr} AS _c{i}")
        sql = (f"WITH a AS ({agg}), b AS ({bounds}), g AS ({grid}), j AS ({joined}) "
               f"SELECT {', '.join(outer)} FROM j")
        return sql + self._tail(pseudo, keys, [*keys, "_wstart"], items, having_done=True)

    def event_window(self, items: list[exp.Expr], keys: list[str], filt: str, w: Window) -> str:
        ts = _q(self.ts)
        part = f"PARTITION BY {', '.join(keys)} " if keys else ""
        if w.kind == "state":
            assert w.expr is not None
            state = self.scalar(w.expr, "STATE_WINDOW")
            marked = (f"SELECT *, CASE WHEN _s IS NOT DISTINCT FROM lag(_s) OVER ({part}ORDER BY {ts}) THEN 0 ELSE 1 "
                      f"END AS _chg FROM (SELECT *, {state} AS _s FROM ({filt})) WHERE _s IS NOT NULL")
            extra = {w.expr.sql(dialect="mysql").lower(): "any_value(_s)"}
        else:
            marked = (f"SELECT *, CASE WHEN {ts} - lag({ts}) OVER ({part}ORDER BY {ts}) <= {w.gap} THEN 0 ELSE 1 "
                      f"END AS _chg FROM ({filt})")
            extra = {}
        windowed = f"SELECT *, sum(_chg) OVER ({part}ORDER BY {ts} ROWS UNBOUNDED PRECEDING) AS _wid FROM ({marked})"
        pseudo = {"_wstart": f"min({ts})", "_wend": f"max({ts})", "_wduration": f"(max({ts}) - min({ts}))"}
        group = ", ".join([*keys, "_wid"])
        sql = f"SELECT {self._select_list(items, pseudo, extra)} FROM ({windowed}) GROUP BY {group}"
        return sql + self._tail(pseudo, keys, [*keys, f"min({ts})"], items)

    # -- pruning -----------------------------------------------------------------------------

    def _conjuncts(self, node: exp.Expr | None) -> list[exp.Expr]:
        if node is None:
            return []
        if isinstance(node, exp.And):
            return self._conjuncts(node.this) + self._conjuncts(node.expression)
        if isinstance(node, exp.Paren):
            return self._conjuncts(node.this)
        return [node]

    def _const_ts(self, node: exp.Expr) -> int | None:
        """A constant timestamp bound: a number, a timestamp string, NOW / TODAY() ± ms."""
        if isinstance(node, exp.Paren):
            return self._const_ts(node.this)
        if isinstance(node, exp.Literal):
            if node.is_string:
                try:
                    return parse_timestamp(node.this)
                except TypeError_:
                    return None
            try:
                return int(float(node.this))
            except ValueError:
                return None
        if isinstance(node, exp.Column) and node.name.lower() == "now" and not node.this.quoted:
            return self.now_ms
        if isinstance(node, exp.Anonymous) and not node.expressions:
            fn = str(node.name).upper()
            if fn == "NOW":
                return self.now_ms
            if fn == "TODAY":
                return self.now_ms - self.now_ms % 86_400_000
        if isinstance(node, exp.Add | exp.Sub):
            a, b = self._const_ts(node.this), self._const_ts(node.expression)
            if a is None or b is None:
                return None
            return a + b if isinstance(node, exp.Add) else a - b
        return None

    def time_bounds(self, where: exp.Expr | None) -> tuple[int | None, int | None]:
        """The [low, high] of the primary timestamp that the WHERE's top-level ANDs imply."""
        low = high = None
        for c in self._conjuncts(where):
            if isinstance(c, exp.Between) and self._is_ts(c.this):
                lo, hi = self._const_ts(c.args["low"]), self._const_ts(c.args["high"])
                if lo is not None:
                    low = lo if low is None else max(low, lo)
                if hi is not None:
                    high = hi if high is None else min(high, hi)
                continue
            if not isinstance(c, exp.GT | exp.GTE | exp.LT | exp.LTE | exp.EQ):
                continue
            a, b = c.this, c.expression
            flipped = False
            if not self._is_ts(a) and self._is_ts(b):
                a, b, flipped = b, a, True
            if not self._is_ts(a):
                continue
            v = self._const_ts(b)
            if v is None:
                continue
            kind: type[exp.Expr] = type(c)
            if flipped:
                flips: dict[type[exp.Expr], type[exp.Expr]] = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT,
                                                              exp.LTE: exp.GTE}
                kind = flips.get(kind, kind)
            if kind in (exp.GT, exp.GTE, exp.EQ):
                v2 = v + 1 if kind is exp.GT else v
                low = v2 if low is None else max(low, v2)
            if kind in (exp.LT, exp.LTE, exp.EQ):
                v2 = v - 1 if kind is exp.LT else v
                high = v2 if high is None else min(high, v2)
        return low, high

    def _is_ts(self, node: exp.Expr) -> bool:
        return isinstance(node, exp.Column) and (node.name == self.ts or node.name.lower() in ("_rowts", "_c0")
                                                 or node.name.lower() == self.ts.lower())


def _internal(node: exp.Expr) -> exp.Expr:
    """Mark a tree the translation made (a partition key's column, a pseudo column's
    expression), so `rewrite` leaves its names alone."""
    for n in node.walk():
        n.meta["tmq_internal"] = True
    return node


def _duck_type(t: TDType | None) -> str:
    if t is None:
        return "DOUBLE"
    return {"TIMESTAMP": "BIGINT", "BOOL": "BOOLEAN", "TINYINT": "TINYINT", "SMALLINT": "SMALLINT",
            "INT": "INTEGER", "BIGINT": "BIGINT", "TINYINT UNSIGNED": "UTINYINT", "SMALLINT UNSIGNED": "USMALLINT",
            "INT UNSIGNED": "UINTEGER", "BIGINT UNSIGNED": "UBIGINT", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE",
            "VARCHAR": "VARCHAR", "NCHAR": "VARCHAR"}.get(t.name, "VARCHAR")


def translate(stmt: Select, schema: StableSchema, child: str | None = None, now_ms: int | None = None) -> Plan:
    """`stmt` (on `schema`'s supertable, or its child table `child`) as one DuckDB query."""
    return Translator(stmt, schema, child, now_ms).translate()
