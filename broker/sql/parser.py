"""TDengine SQL text → statement objects (`broker.sql.ast`).

DDL, INSERT, SHOW and DROP go through a small tokenizer and a recursive-descent grammar;
SELECT queries (topics, ad-hoc) and a stable topic's WHERE go to sqlglot with a dialect made
from MySQL's (back-quoted names, double-quoted strings, like TDengine) plus MATCH/NMATCH.
Every failure is a `SqlError` carrying a 0-based offset into the text.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.tokens import TokenType

from tmqgate.broker.sql.ast import (
    AlterDatabase,
    AlterStableAddColumn,
    AlterStableAddTag,
    AlterStableChange,
    CreateDatabase,
    CreateStable,
    CreateTable,
    CreateTables,
    CreateTopic,
    Describe,
    DropConsumerGroup,
    DropDatabase,
    DropStable,
    DropTable,
    DropTopic,
    Fill,
    Grant,
    Insert,
    InsertRows,
    NowValue,
    Select,
    Show,
    SqlError,
    Statement,
    UseDatabase,
    UserPassword,
    Window,
)
from tmqgate.broker.tsdb.limits import MAX_COLUMNS, MAX_TAGS, too_many_columns, too_many_tags
from tmqgate.broker.tsdb.names import INVALID_IDENTIFIER, MAX_LENGTH, Kind, name_problem
from tmqgate.broker.tsdb.types import Column, TypeError_, duration_ms, type_from_name

__all__ = ["parse", "parse_script", "parse_expression", "check_topic_query", "SqlError", "DIALECT", "MAX_NAME"]

MAX_DB_NAME = MAX_LENGTH["database"]
MAX_TABLE_NAME = MAX_LENGTH["table"]
MAX_COLUMN_NAME = MAX_LENGTH["column"]
MAX_TOPIC_NAME = MAX_LENGTH["topic"]
MAX_NAME = {
    "database": MAX_DB_NAME,
    "table": MAX_TABLE_NAME,
    "column": MAX_COLUMN_NAME,
    "topic": MAX_TOPIC_NAME,
    "user": 23,  # TDengine's TSDB_USER_LEN - 1
}
# A query (a topic's SELECT or WHERE, an ad-hoc SELECT) of more sqlglot nodes than this is
# refused (tmqgate's own bound; TDengine has none below its 1 MiB SQL length): a tree is
# compiled, and a long text's tree is carried back from the parsing process and rebuilt, on
# the event loop, at ~10 µs a node. Real topic queries have tens of nodes.
MAX_QUERY_NODES = 1000

# --- the sqlglot dialect ----------------------------------------------------------------


def _parse_match(self: Any, this: exp.Expr | None) -> exp.Expr | None:
    """`a MATCH 're'` / `a NMATCH 're'` (TDengine's regex operators) as REGEXP_LIKE [negated]."""
    negate = self._prev.text.upper() == "NMATCH"
    node = self.expression(exp.RegexpLike(this=this, expression=self._parse_bitwise()))
    return exp.Not(this=node) if negate else node


class TDengine(MySQL):
    """MySQL's dialect with TDengine's MATCH/NMATCH regex operators."""

    class Tokenizer(MySQL.Tokenizer):
        KEYWORDS = {**MySQL.Tokenizer.KEYWORDS, "MATCH": TokenType.RLIKE, "NMATCH": TokenType.RLIKE}

    class Parser(MySQL.Parser):  # type: ignore[valid-type,misc]  # (sqlglot types it as a variable)
        RANGE_PARSERS = {**MySQL.Parser.RANGE_PARSERS, TokenType.RLIKE: _parse_match}


DIALECT = TDengine

# --- tokens -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tok:
    kind: str  # word, qident, string, number, duration, op, eof
    text: str  # source text (for strings/qidents: the decoded value)
    pos: int
    end: int

    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


_OPS2 = ("<=", ">=", "<>", "!=", "==", "->", "||", "&&")
_OPS1 = set("(),.;*+-/%=<>&|~!?:^")
_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "0": "\0",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "%": "\\%",
    "_": "\\_",
}


def _is_word_start(c: str) -> bool:
    return c == "_" or c.isalpha()


def _is_word_char(c: str) -> bool:
    return c == "_" or c.isalnum()


# Per-character scanner kept inlined, past C901's limit: a call per token costs measurable throughput.
def tokenize(text: str) -> list[Tok]:  # noqa: C901
    """Split SQL text into tokens; raises SqlError on an unterminated string or a stray character."""
    toks: list[Tok] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if text.startswith("--", i) or c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise SqlError(f"unterminated comment at position {i}", i)
            i = j + 2
            continue
        if c in "'\"":
            buf: list[str] = []
            j = i + 1
            while True:
                if j >= n:
                    raise SqlError(f"unterminated string starting at position {i}", i)
                d = text[j]
                if d == "\\" and j + 1 < n:
                    buf.append(_ESCAPES.get(text[j + 1], text[j + 1]))
                    j += 2
                elif d == c:
                    if j + 1 < n and text[j + 1] == c:
                        buf.append(c)
                        j += 2
                    else:
                        break
                else:
                    buf.append(d)
                    j += 1
            toks.append(Tok("string", "".join(buf), i, j + 1))
            i = j + 1
            continue
        if c == "`":
            j = i + 1
            buf = []
            while True:
                if j >= n:
                    raise SqlError(f"unterminated quoted name starting at position {i}", i)
                if text[j] == "`":
                    if j + 1 < n and text[j + 1] == "`":
                        buf.append("`")
                        j += 2
                        continue
                    break
                buf.append(text[j])
                j += 1
            toks.append(Tok("qident", "".join(buf), i, j + 1))
            i = j + 1
            continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            m = re.compile(r"0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?").match(text, i)
            assert m is not None
            j = m.end()
            if j < n and _is_word_start(text[j]):
                k = j
                while k < n and _is_word_char(text[k]):
                    k += 1
                if re.fullmatch(r"\d+", m.group()) and k == j + 1:
                    toks.append(Tok("duration", text[i:k], i, k))
                    i = k
                    continue
                raise SqlError(f"syntax error near {text[i:k]!r} at position {i}: invalid number", i)
            toks.append(Tok("number", m.group(), i, j))
            i = j
            continue
        if _is_word_start(c):
            j = i + 1
            while j < n and _is_word_char(text[j]):
                j += 1
            toks.append(Tok("word", text[i:j], i, j))
            i = j
            continue
        two = text[i : i + 2]
        if two in _OPS2:
            toks.append(Tok("op", two, i, i + 2))
            i += 2
            continue
        if c in _OPS1:
            toks.append(Tok("op", c, i, i + 1))
            i += 1
            continue
        raise SqlError(f"syntax error: unexpected character {c!r} at position {i}", i)
    toks.append(Tok("eof", "", n, n))
    return toks


# --- statement parser -------------------------------------------------------------------

_DB_OPTIONS = {
    "VGROUPS", "PRECISION", "REPLICA", "BUFFER", "PAGES", "PAGESIZE", "CACHEMODEL", "CACHESIZE",
    "COMP", "DURATION", "MAXROWS", "MINROWS", "KEEP", "KEEP_TIME_OFFSET", "STT_TRIGGER",
    "SINGLE_STABLE", "TABLE_PREFIX", "TABLE_SUFFIX", "DNODES", "TSDB_PAGESIZE", "WAL_LEVEL",
    "WAL_FSYNC_PERIOD", "WAL_RETENTION_PERIOD", "WAL_RETENTION_SIZE", "WAL_ROLL_PERIOD",
    "WAL_SEGMENT_SIZE", "STRICT", "RETENTIONS", "S3_CHUNKPAGES", "S3_KEEPLOCAL", "S3_COMPACT",
    "SS_CHUNKPAGES", "SS_KEEPLOCAL", "SS_COMPACT", "ENCRYPT_ALGORITHM", "COMPACT_INTERVAL",
    "COMPACT_TIME_RANGE", "COMPACT_TIME_OFFSET",
}  # fmt: skip

_SHOW_KINDS = {"DATABASES", "STABLES", "TABLES", "TOPICS", "CONSUMERS", "SUBSCRIPTIONS", "DNODES", "VGROUPS"}
_WINDOW_WORDS = {"INTERVAL", "SESSION", "STATE_WINDOW", "EVENT_WINDOW", "COUNT_WINDOW", "SLIDING", "FILL"}
#: Standard clauses that may follow TDengine's own in a SELECT (and so end them).
_CLAUSE_ENDS = {"GROUP", "HAVING", "ORDER", "LIMIT", "WHERE", "UNION", "INTERSECT", "EXCEPT", "MINUS"}


@dataclass
class _Clauses:
    """What `_Parser.tdengine_clauses` takes out of an ad-hoc SELECT."""

    partition: list[exp.Expr] = field(default_factory=list)
    window: Window | None = None
    fill: Fill | None = None
    slimit: int | None = None
    soffset: int = 0
    sliding: int = 0
    sliding_pos: int = 0
    fill_pos: int = 0


def _describe(tok: Tok) -> str:
    if tok.kind == "eof":
        return "end of input"
    if tok.kind == "string":
        return repr(tok.text)
    return repr(tok.text if tok.kind != "qident" else f"`{tok.text}`")


class _Parser:
    def __init__(self, text: str, toks: list[Tok]) -> None:
        self.text = text
        self.toks = toks
        self.i = 0

    # -- token helpers --

    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def advance(self) -> Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def error(self, expected: str, tok: Tok | None = None) -> SqlError:
        t = tok or self.tok
        if t.kind == "eof":
            return SqlError(f"syntax error at end of input (position {t.pos}): expected {expected}", t.pos)
        return SqlError(f"syntax error near {_describe(t)} at position {t.pos}: expected {expected}", t.pos)

    def at_kw(self, *words: str) -> bool:
        return self.tok.kind == "word" and self.tok.text.upper() in words

    def accept_kw(self, *words: str) -> bool:
        if self.at_kw(*words):
            self.advance()
            return True
        return False

    def expect_kw(self, *words: str) -> Tok:
        if not self.at_kw(*words):
            raise self.error(" or ".join(words))
        return self.advance()

    def accept_op(self, op: str) -> bool:
        if self.tok.kind == "op" and self.tok.text == op:
            self.advance()
            return True
        return False

    def expect_op(self, op: str) -> Tok:
        if not (self.tok.kind == "op" and self.tok.text == op):
            raise self.error(repr(op))
        return self.advance()

    def expect_end(self) -> None:
        if self.tok.kind != "eof":
            raise self.error("end of statement")

    def if_not_exists(self) -> bool:
        if self.at_kw("IF"):
            self.advance()
            self.expect_kw("NOT")
            self.expect_kw("EXISTS")
            return True
        return False

    def if_exists(self) -> bool:
        if self.at_kw("IF"):
            self.advance()
            self.expect_kw("EXISTS")
            return True
        return False

    def ident(self, what: str = "table", new: Kind | None = None) -> str:
        """A name: unquoted names are lower-cased (TDengine is case-insensitive), `quoted` kept.
        `new`: the statement makes a `new` of that name, so it must pass `tsdb.names`' rule."""
        t = self.tok
        if t.kind == "word":
            name = t.text.lower()
        elif t.kind == "qident":
            name = t.text
        else:
            raise self.error(f"a {what} name")
        if new is not None:
            problem = name_problem(name, new, quoted=t.kind == "qident")
            if problem is not None:
                raise SqlError(f"{problem} at position {t.pos}", t.pos, INVALID_IDENTIFIER)
        if not name:
            raise SqlError(f"Invalid identifier name: empty {what} name at position {t.pos}", t.pos,
                           INVALID_IDENTIFIER)
        limit = MAX_NAME[what]
        if len(name) > limit:
            shown = name if len(name) <= 80 else name[:80] + "..."
            raise SqlError(
                f"Invalid identifier name: {what} name {shown!r} is too long (at most {limit} bytes) "
                f"at position {t.pos}", t.pos, INVALID_IDENTIFIER,
            )
        self.advance()
        return name

    def qualified(self, what: str = "table", new: Kind | None = None) -> tuple[str | None, str]:
        """[db.]name; `new` (see `ident`) applies to the name, not to the database."""
        if self.peek().text == "." and self.peek().kind == "op":
            first = self.ident("database")
            self.advance()
            return first, self.ident(what, new)
        return None, self.ident(what, new)

    # -- literals --

    def literal(self) -> Any:
        """A literal value of INSERT/TAGS: number, string, NULL, TRUE/FALSE, NOW [± duration]."""
        t = self.tok
        sign = 1
        if t.kind == "op" and t.text in "+-":
            sign = -1 if t.text == "-" else 1
            self.advance()
            if self.tok.kind != "number":
                raise self.error("a number")
        t = self.tok
        if t.kind == "number":
            self.advance()
            return sign * _number(t.text)
        if sign != 1 or t.kind == "op" and t.text == "+":
            raise self.error("a number")
        if t.kind == "string":
            self.advance()
            return t.text
        if t.kind == "word":
            w = t.text.upper()
            if w == "NULL":
                self.advance()
                return None
            if w in ("TRUE", "FALSE"):
                self.advance()
                return w == "TRUE"
            if w in ("NOW", "TODAY"):
                self.advance()
                if self.accept_op("("):
                    self.expect_op(")")
                elif w == "TODAY":
                    raise self.error("'('")
                offset = 0
                while self.tok.kind == "op" and self.tok.text in "+-":
                    op = self.advance().text
                    ms = self.duration_token("a duration such as 1h")
                    offset += ms if op == "+" else -ms
                return NowValue(offset, day=w == "TODAY")
        raise self.error("a literal value")

    def literal_list(self) -> list[Any]:
        self.expect_op("(")
        vals = [self.literal()]
        while self.accept_op(","):
            vals.append(self.literal())
        self.expect_op(")")
        return vals

    def name_list(self, what: str) -> list[str]:
        self.expect_op("(")
        start = self.tok
        names = [self.ident(what)]
        while self.accept_op(","):
            start = self.tok
            names.append(self.ident(what))
            if names[-1].lower() in (n.lower() for n in names[:-1]):
                raise SqlError(f"duplicate {what} name {names[-1]!r} at position {start.pos}", start.pos)
        self.expect_op(")")
        return names

    # -- statements --

    def statement(self) -> Statement:
        t = self.tok
        w = t.upper()
        if w == "CREATE":
            self.advance()
            return self.create()
        if w == "DROP":
            self.advance()
            return self.drop()
        if w == "USE":
            self.advance()
            name = self.ident("database")
            self.expect_end()
            return UseDatabase(name)
        if w == "ALTER":
            self.advance()
            return self.alter()
        if w == "INSERT":
            self.advance()
            return self.insert()
        if w == "SHOW":
            self.advance()
            return self.show()
        if w in ("DESCRIBE", "DESC"):
            self.advance()
            db, name = self.qualified()
            self.expect_end()
            return Describe(db, name)
        if w == "SELECT":
            return self.select_stmt()
        if w in ("GRANT", "REVOKE"):
            self.advance()
            return self.grant(revoke=w == "REVOKE")
        raise self.error("CREATE, DROP, USE, ALTER, INSERT, SHOW, DESCRIBE, SELECT, GRANT or REVOKE")

    def grant(self, revoke: bool) -> Grant:
        """{READ | WRITE | ALL} ON db.* {TO | FROM} user (after GRANT / REVOKE)."""
        privilege = self.expect_kw("READ", "WRITE", "ALL").text.lower()
        self.expect_kw("ON")
        db = self.ident("database")
        self.expect_op(".")
        self.expect_op("*")
        self.expect_kw("FROM" if revoke else "TO")
        user = self.ident("user")
        self.expect_end()
        return Grant(privilege, db, user, revoke)  # type: ignore[arg-type]

    def user_password(self, create: bool) -> UserPassword:
        """name PASS 'password' (after CREATE USER / ALTER USER)."""
        user = self.ident("user")
        self.expect_kw("PASS")
        t = self.tok
        if t.kind != "string":
            raise self.error("a quoted password")
        self.advance()
        self.expect_end()
        return UserPassword(user, t.text, create)

    def create(self) -> Statement:
        if self.accept_kw("DATABASE"):
            return self.create_database()
        if self.accept_kw("STABLE"):
            ine = self.if_not_exists()
            db, name = self.qualified(new="table")
            return self.stable_body(db, name, ine, need_tags=True)
        if self.accept_kw("TABLE"):
            return self.create_table()
        if self.accept_kw("TOPIC"):
            return self.create_topic()
        if self.accept_kw("USER"):
            return self.user_password(create=True)
        raise self.error("DATABASE, STABLE, TABLE, TOPIC or USER")

    def create_database(self) -> CreateDatabase:
        ine = self.if_not_exists()
        stmt = CreateDatabase(self.ident("database", new="database"), if_not_exists=ine)
        seen: set[str] = set()
        while self.tok.kind != "eof":
            t = self.tok
            if t.kind != "word":
                raise self.error("a database option")
            key = t.text.upper()
            if key not in _DB_OPTIONS:
                raise SqlError(f"unknown database option {t.text!r} at position {t.pos}", t.pos)
            if key in seen:
                raise SqlError(f"database option {key} given twice at position {t.pos}", t.pos)
            seen.add(key)
            self.advance()
            vt = self.tok
            value = self.option_value()
            if key in ("VGROUPS", "WAL_RETENTION_PERIOD", "WAL_RETENTION_SIZE"):
                if not isinstance(value, int) or isinstance(value, bool):
                    raise SqlError(f"{key} needs an integer at position {vt.pos}", vt.pos)
                lo = 1 if key == "VGROUPS" else -1
                hi = 1024 if key == "VGROUPS" else 2**31 - 1
                if not lo <= value <= hi:
                    raise SqlError(f"{key} {value} out of range [{lo}, {hi}] at position {vt.pos}", vt.pos)
                setattr(stmt, key.lower(), value)
            elif key == "REPLICA":  # TDengine's range; how many nodes hold each vnode
                if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 3:
                    raise SqlError(f"REPLICA needs 1, 2 or 3, got {value!r} at position {vt.pos}", vt.pos)
                stmt.options["replica"] = value
            elif key == "PRECISION":
                if value != "ms":
                    raise SqlError(
                        f"only PRECISION 'ms' is supported, got {value!r} at position {vt.pos}", vt.pos
                    )
                stmt.precision = "ms"
            else:
                stmt.options[key.lower()] = value
        return stmt

    def option_value(self) -> Any:
        def one() -> Any:
            t = self.tok
            if t.kind == "duration":
                self.advance()
                return t.text
            if t.kind == "word":
                self.advance()
                return t.text
            return self.literal()

        first = one()
        if not (self.tok.kind == "op" and self.tok.text == ","):
            return first
        vals = [first]
        while self.accept_op(","):
            vals.append(one())
        return vals

    def column_defs(self, what: str) -> list[tuple[Column, int]]:
        self.expect_op("(")
        cols: list[tuple[Column, int]] = []
        while True:
            t = self.tok
            name = self.ident("column", new="tag" if what == "tag" else "column")
            cols.append((Column(name, self.data_type()), t.pos))
            # optional column attributes TDengine accepts: ENCODE/COMPRESS/LEVEL 'x', COMMENT 'x'
            while self.at_kw("ENCODE", "COMPRESS", "LEVEL", "COMMENT"):
                self.advance()
                if self.tok.kind != "string":
                    raise self.error("a string")
                self.advance()
            if self.accept_op(","):
                continue
            self.expect_op(")")
            return cols

    def data_type(self) -> Any:
        t = self.tok
        if t.kind != "word":
            raise self.error("a data type")
        self.advance()
        name = t.text
        if self.at_kw("UNSIGNED"):
            name += " " + self.advance().text
        length = None
        if self.accept_op("("):
            lt = self.tok
            if lt.kind != "number" or not lt.text.isdigit():
                raise self.error("a length")
            self.advance()
            length = int(lt.text)
            self.expect_op(")")
        try:
            return type_from_name(name, length)
        except TypeError_ as e:
            raise SqlError(f"{e} at position {t.pos}", t.pos) from None

    def stable_body(self, db: str | None, name: str, ine: bool, need_tags: bool) -> CreateStable:
        name_tok = self.toks[self.i - 1]
        cols = self.column_defs("column")
        if not self.at_kw("TAGS"):
            if need_tags:
                raise self.error("TAGS (a supertable needs at least one tag)")
            raise SqlError(
                f"normal tables are not supported; use a supertable (CREATE STABLE {name} (...) TAGS (...)) "
                f"at position {name_tok.pos}",
                name_tok.pos,
            )
        self.advance()
        tags = self.column_defs("tag")
        while self.at_kw("COMMENT", "TTL", "SMA", "WATERMARK", "MAX_DELAY", "ROLLUP", "DELETE_MARK"):
            kw = self.advance()
            if kw.text.upper() == "COMMENT":
                if self.tok.kind != "string":
                    raise self.error("a string")
                self.advance()
            else:
                raise SqlError(
                    f"table option {kw.text.upper()} is not supported at position {kw.pos}", kw.pos
                )
        self.expect_end()
        first, first_pos = cols[0]
        if not first.type.is_timestamp:
            raise SqlError(
                f"the first column must be TIMESTAMP, got {first.type} for {first.name!r} at position {first_pos}",
                first_pos,
            )
        # TDengine's limits (tsdb/limits.py; the byte lengths are checked where the schema is
        # written): tags first, then columns and tags together, as its parser checks them
        if len(tags) > MAX_TAGS:
            problem = too_many_tags(len(tags))
            raise SqlError(f"{problem.message} at position {tags[MAX_TAGS][1]}", tags[MAX_TAGS][1], problem.code)
        if len(cols) + len(tags) > MAX_COLUMNS:
            problem, pos = too_many_columns(len(cols) + len(tags)), (*cols, *tags)[MAX_COLUMNS][1]
            raise SqlError(f"{problem.message} at position {pos}", pos, problem.code)
        seen: set[str] = set()
        for col, pos in (*cols, *tags):
            low = col.name.lower()
            if low == "tbname":
                raise SqlError(
                    f"{col.name!r} is reserved and cannot name a column or tag at position {pos}", pos
                )
            if low in seen:
                raise SqlError(f"duplicate column or tag name {col.name!r} at position {pos}", pos)
            seen.add(low)
        return CreateStable(db, name, [c for c, _ in cols], [t for t, _ in tags], if_not_exists=ine)

    def create_table(self) -> Statement:
        tables: list[CreateTable] = []
        while True:
            ine = self.if_not_exists()
            t = self.tok
            db, name = self.qualified(new="table")
            if not tables and self.tok.kind == "op" and self.tok.text == "(":
                return self.stable_body(db, name, ine, need_tags=False)
            if not self.at_kw("USING"):
                raise self.error("USING (or a column list)")
            self.advance()
            sdb, stable = self.qualified()
            if db is not None and sdb is not None and db != sdb:
                raise SqlError(
                    f"child table {name!r} and supertable {stable!r} must be in the same database at position {t.pos}",
                    t.pos,
                )
            tag_names = self.name_list("column") if self.tok.kind == "op" and self.tok.text == "(" else None
            self.expect_kw("TAGS")
            vt = self.tok
            tags = self.literal_list()
            if tag_names is not None and len(tag_names) != len(tags):
                raise SqlError(
                    f"{len(tag_names)} tag names but {len(tags)} tag values at position {vt.pos}", vt.pos
                )
            while self.at_kw("TTL", "COMMENT"):
                self.advance()
                self.literal()
            tables.append(CreateTable(db or sdb, name, stable, tags, ine, tag_names))
            if self.tok.kind == "eof":
                break
        return tables[0] if len(tables) == 1 else CreateTables(tables)

    def create_topic(self) -> CreateTopic:
        ine = self.if_not_exists()
        name = self.ident("topic", new="topic")
        meta: Literal["with", "only"] | None = None
        meta_pos = self.tok.pos
        if self.accept_kw("WITH"):
            self.expect_kw("META")
            meta = "with"
        elif self.at_kw("ONLY"):
            self.advance()
            self.expect_kw("META")
            meta = "only"
        self.expect_kw("AS")
        statement = self.text[self.toks[0].pos : self.toks[-1].pos].strip()
        db: str | None
        if self.accept_kw("DATABASE"):
            db = self.ident("database")
            self.expect_end()
            return CreateTopic(name, ine, meta, "database", db=db, statement=statement)
        if self.accept_kw("STABLE"):
            db, stable = self.qualified()
            where = None
            sql = None
            if self.accept_kw("WHERE"):
                if self.tok.kind == "eof":
                    raise self.error("a condition")
                start = self.tok.pos
                end = self.toks[-1].pos
                sql = self.text[start:end].strip()
                self.check_no_windows(self.i, len(self.toks) - 1, topic=True)
                where = parse_expression(self.text, start, end)
                self.i = len(self.toks) - 1
            return CreateTopic(
                name, ine, meta, "stable", db=db, stable=stable, where=where, sql=sql, statement=statement
            )
        if self.at_kw("SELECT"):
            if meta is not None:
                raise SqlError(
                    f"{meta.upper()} META is only for database and supertable topics at position {meta_pos}",
                    meta_pos,
                )
            sel = self.select_stmt(topic=True)
            check_topic_query(sel.select)
            return CreateTopic(
                name,
                ine,
                None,
                "select",
                db=sel.db,
                stable=sel.table,
                select=sel.select,
                sql=sel.sql,
                statement=statement,
            )
        if self.tok.kind == "op" and self.tok.text == "(":
            raise SqlError(
                f"write the topic's query without parentheses at position {self.tok.pos}", self.tok.pos
            )
        raise self.error("DATABASE, STABLE or SELECT")

    def check_no_windows(self, lo: int, hi: int, topic: bool) -> None:
        """Refuse TDengine's window / partition clauses (no topic may aggregate) before sqlglot sees them."""
        depth = 0
        for k in range(lo, hi):
            t = self.toks[k]
            if t.kind == "op" and t.text == "(":
                depth += 1
            elif t.kind == "op" and t.text == ")":
                depth -= 1
            elif t.kind == "word" and depth == 0:
                w = t.text.upper()
                what = None
                if w in _WINDOW_WORDS and self.toks[k + 1].text == "(":
                    what = f"window clause {w}"
                elif w == "PARTITION" and self.toks[k + 1].upper() == "BY":
                    what = "PARTITION BY"
                elif w in ("SLIMIT", "SOFFSET", "UNION", "INTERSECT", "EXCEPT", "MINUS"):
                    what = w
                if what:
                    prefix = "not allowed in a topic" if topic else "not supported"
                    raise SqlError(f"{prefix}: {what} at position {t.pos}", t.pos)

    def select_stmt(self, topic: bool = False) -> Select:
        lo = self.i
        hi = len(self.toks) - 1
        clauses = _Clauses()
        if topic:
            self.check_no_windows(lo, hi, topic)
        self.check_from(lo, hi)
        start = self.tok.pos
        end = self.toks[hi].pos
        sql = self.text[start:end].strip()
        text = self.text
        if not topic:
            text = self.tdengine_clauses(lo, hi, clauses)
        tree = parse_query(text, start, end)
        # output names as written: split the select list at top-level commas
        items = self.select_items(lo + 1, hi)
        if items is not None and len(items) == len(tree.expressions):
            tree.meta["tmq_texts"] = items
        from_ = tree.args.get("from_") or tree.args.get("from")
        if from_ is None:
            raise SqlError(f"the query needs FROM a supertable at position {start}", start)
        table = from_.this
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            pos = self.find_kw(lo, hi, "FROM", after=True) or start
            raise SqlError(
                f"not allowed in a topic: subquery in FROM at position {pos}"
                if topic
                else f"subqueries are not supported at position {pos}",
                pos,
            )
        if tree.args.get("joins"):
            found = self.find_kw(lo, hi, "JOIN", "CROSS", "INNER", "LEFT", "RIGHT", "FULL", "NATURAL", ",")
            pos = found if found is not None else start
            raise SqlError(
                f"{'not allowed in a topic' if topic else 'not supported'}: JOIN at position {pos}", pos
            )
        db = _ident_name(table.args.get("db"))
        name = _ident_name(table.this)
        assert name is not None
        if table.args.get("catalog"):
            pos = _node_pos(table, tree) or start
            raise SqlError(f"invalid table name {table.sql(dialect=DIALECT)} at position {pos}", pos)
        self.i = hi
        return Select(db, name, tree, sql, clauses.partition, clauses.window, clauses.fill, clauses.slimit,
                      clauses.soffset)

    def tdengine_clauses(self, lo: int, hi: int, out: _Clauses) -> str:
        """Take an ad-hoc SELECT's TDengine clauses (PARTITION BY, INTERVAL / SLIDING / FILL,
        STATE_WINDOW, SESSION, SLIMIT / SOFFSET) into `out`; the text with them blanked out
        (same length, so sqlglot's positions stay those of the text) for sqlglot to read."""
        starts: list[tuple[int, str]] = []  # (token index, clause word) at depth 0 after FROM
        depth = 0
        seen_from = False
        for k in range(lo + 1, hi):
            t = self.toks[k]
            if t.kind == "op" and t.text in "()":
                depth += 1 if t.text == "(" else -1
                continue
            if depth or t.kind != "word":
                continue
            w = t.upper()
            seen_from = seen_from or w == "FROM"
            if not seen_from:
                continue
            nxt = self.toks[k + 1]
            if w in _WINDOW_WORDS and nxt.text == "(" or w in ("SLIMIT", "SOFFSET") or (
                    w == "PARTITION" and nxt.upper() == "BY"):
                if w in ("EVENT_WINDOW", "COUNT_WINDOW"):
                    raise SqlError(f"not supported: window clause {w} at position {t.pos}", t.pos)
                starts.append((k, w))
            elif w in _CLAUSE_ENDS and starts:
                starts.append((k, ""))  # a standard clause ends the TDengine one before it
        blanked = list(self.text)
        for n, (k, w) in enumerate(starts):
            if not w:
                continue
            stop = starts[n + 1][0] if n + 1 < len(starts) else hi
            self._clause(w, k, stop, out)
            a, b = self.toks[k].pos, self.toks[stop - 1].end
            blanked[a:b] = " " * (b - a)
        if out.fill is not None and (out.window is None or out.window.kind != "interval"):
            raise SqlError("FILL needs INTERVAL", out.fill_pos)
        if out.sliding and (out.window is None or out.window.kind != "interval"):
            raise SqlError("SLIDING needs INTERVAL", out.sliding_pos)
        if out.window is not None and out.window.kind == "interval" and out.sliding:
            if out.sliding > out.window.interval:
                raise SqlError("sliding value no larger than the interval value", out.sliding_pos)
            out.window = dataclasses.replace(out.window, sliding=out.sliding)
        return "".join(blanked)

    def _clause(self, word: str, k: int, stop: int, out: _Clauses) -> None:
        """One TDengine clause, tokens k..stop-1, into `out`."""
        t = self.toks[k]
        self.i = k + 1
        if word == "PARTITION":
            self.i += 1  # BY
            out.partition = [parse_expression(self.text, a, b) for a, b in self._items(self.i, stop, "PARTITION BY")]
            return
        if word in ("SLIMIT", "SOFFSET"):
            first = self._count(word)
            if word == "SLIMIT":
                out.slimit = first
                if self.accept_op(","):  # SLIMIT offset, count
                    out.soffset, out.slimit = first, self._count(word)
            else:
                out.soffset = first
        elif word == "FILL":
            out.fill_pos = t.pos
            out.fill = self._fill()
        else:
            self.expect_op("(")
            if word == "INTERVAL":
                interval = self._duration()
                offset = self._duration() if self.accept_op(",") else 0
                if offset >= interval:
                    raise SqlError(f"the offset must be smaller than the interval at position {t.pos}", t.pos)
                self._window(out, Window("interval", interval=interval, offset=offset, sliding=interval,
                                             pos=t.pos))
            elif word == "SLIDING":
                out.sliding, out.sliding_pos = self._duration(), t.pos
            elif word == "SESSION":
                self.ident("column")
                self.expect_op(",")
                self._window(out, Window("session", gap=self._duration(), pos=t.pos))
            else:  # STATE_WINDOW
                close = self._closing(self.i - 1)
                expr = parse_expression(self.text, self.tok.pos, self.toks[close].pos)
                self.i = close
                self._window(out, Window("state", expr=expr, pos=t.pos))
            self.expect_op(")")
        if self.i != stop:
            raise self.error("the end of the clause", self.tok)

    def _window(self, out: _Clauses, window: Window) -> None:
        if out.window is not None:
            raise SqlError(f"only one window clause is allowed at position {window.pos}", window.pos)
        out.window = window

    def _items(self, lo: int, hi: int, what: str) -> list[tuple[int, int]]:
        """The text spans of a comma-separated list in tokens lo..hi-1 (top-level commas)."""
        spans: list[tuple[int, int]] = []
        depth, first = 0, lo
        for k in range(lo, hi + 1):
            t = self.toks[k]
            if k == hi or depth == 0 and t.kind == "op" and t.text == ",":
                if first == k:
                    raise self.error(f"an expression in {what}", t)
                spans.append((self.toks[first].pos, self.toks[k - 1].end))
                first = k + 1
            elif t.kind == "op" and t.text in "()":
                depth += 1 if t.text == "(" else -1
        return spans

    def _closing(self, k: int) -> int:
        """Index of the ')' closing the '(' at token k."""
        depth = 0
        for j in range(k, len(self.toks)):
            t = self.toks[j]
            if t.kind == "op" and t.text in "()":
                depth += 1 if t.text == "(" else -1
                if depth == 0:
                    return j
        raise self.error("')'", self.toks[-1])

    def _count(self, word: str) -> int:
        t = self.tok
        if t.kind != "number" or not re.fullmatch(r"\d+", t.text):
            raise self.error(f"a row count after {word}")
        self.advance()
        return int(t.text)

    def duration_token(self, expected: str) -> int:
        """A duration literal (10m, 1h) in ms; `expected` names it in the error otherwise."""
        t = self.tok
        if t.kind != "duration":
            raise self.error(expected)
        self.advance()
        try:
            return duration_ms(t.text)
        except TypeError_ as e:
            raise SqlError(f"{e} at position {t.pos}", t.pos) from None

    def _duration(self) -> int:
        """A window's duration: positive."""
        t = self.tok
        ms = self.duration_token("a duration such as 10m")
        if ms <= 0:
            raise SqlError(f"the duration must be positive at position {t.pos}", t.pos)
        return ms

    def _fill(self) -> Fill:
        self.expect_op("(")
        t = self.tok
        mode = t.upper()
        mode = {"NULL_F": "NULL", "VALUE_F": "VALUE"}.get(mode, mode)
        if t.kind != "word" or mode not in ("NONE", "NULL", "VALUE", "PREV", "NEXT", "LINEAR"):
            raise self.error("NONE, NULL, VALUE, PREV, NEXT or LINEAR")
        self.advance()
        values: list[Any] = []
        if mode == "VALUE":
            while self.accept_op(","):
                values.append(self.literal())
            if not values:
                raise self.error("',' and the values to fill with")
        self.expect_op(")")
        return Fill(mode.lower(), tuple(values))  # type: ignore[arg-type]

    def find_kw(self, lo: int, hi: int, *words: str, after: bool = False) -> int | None:
        """Position of the first top-level token in `words` from FROM on (or of the token after it)."""
        depth = 0
        seen_from = False
        for k in range(lo + 1, hi):
            t = self.toks[k]
            if depth == 0:
                word = t.upper() or (t.text if t.kind == "op" else "")
                seen_from = seen_from or word == "FROM"
                if seen_from and word in words:
                    return self.toks[k + 1].pos if after else t.pos
            if t.kind == "op" and t.text in "()":
                depth += 1 if t.text == "(" else -1
        return None

    def check_from(self, lo: int, hi: int) -> None:
        """A SELECT without a top-level FROM: point at the word that was probably meant to be FROM."""
        depth = 0
        words: list[Tok] = []
        for k in range(lo + 1, hi):
            t = self.toks[k]
            if t.kind == "op" and t.text in "()":
                depth += 1 if t.text == "(" else -1
            elif depth == 0 and t.kind == "word":
                if t.upper() == "FROM":
                    return
                words.append(t)
        guess = difflib.get_close_matches("FROM", [w.text.upper() for w in words], n=1, cutoff=0.6)
        bad = next((w for w in words if guess and w.text.upper() == guess[0]), self.toks[hi])
        raise self.error("FROM", bad)

    def select_items(self, lo: int, hi: int) -> list[tuple[str, int]] | None:
        k = lo
        if self.toks[k].upper() in ("DISTINCT", "ALL"):
            k += 1
        items: list[tuple[str, int]] = []
        depth = 0
        first = k
        while k < hi:
            t = self.toks[k]
            if t.kind == "op" and t.text == "(":
                depth += 1
            elif t.kind == "op" and t.text == ")":
                depth -= 1
            elif depth == 0 and (t.kind == "op" and t.text == "," or t.upper() == "FROM"):
                if first == k:
                    return None
                items.append((self.text[self.toks[first].pos : self.toks[k - 1].end], self.toks[first].pos))
                first = k + 1
                if t.upper() == "FROM":
                    return items
            k += 1
        return None

    def drop(self) -> Statement:
        if self.accept_kw("DATABASE"):
            ie = self.if_exists()
            name = self.ident("database")
            self.expect_end()
            return DropDatabase(name, ie)
        if self.accept_kw("STABLE"):
            ie = self.if_exists()
            db, name = self.qualified()
            self.expect_end()
            return DropStable(db, name, ie)
        if self.accept_kw("TABLE"):
            ie = self.if_exists()
            db, name = self.qualified()
            if self.tok.kind == "op" and self.tok.text == ",":
                raise SqlError(f"drop one table per statement at position {self.tok.pos}", self.tok.pos)
            self.expect_end()
            return DropTable(db, name, ie)
        if self.accept_kw("TOPIC"):
            ie = self.if_exists()
            force = False
            if self.at_kw("FORCE") and self.peek().kind in ("word", "qident"):
                self.advance()
                force = True
            name = self.ident("topic")
            if self.accept_kw("FORCE"):
                force = True
            self.expect_end()
            return DropTopic(name, force, ie)
        if self.accept_kw("CONSUMER"):
            self.expect_kw("GROUP")
            ie = self.if_exists()
            force = False
            if self.at_kw("FORCE") and self.peek().kind in ("word", "qident") and self.peek().upper() != "ON":
                self.advance()
                force = True
            group = self.ident("topic")
            self.expect_kw("ON")
            topic = self.ident("topic")
            self.expect_end()
            return DropConsumerGroup(group, topic, ie, force)
        raise self.error("DATABASE, STABLE, TABLE, TOPIC or CONSUMER GROUP")

    def alter(self) -> Statement:
        if self.accept_kw("USER"):
            return self.user_password(create=False)
        if self.accept_kw("DATABASE"):
            return self.alter_database()
        self.expect_kw("STABLE")
        db, name = self.qualified()
        if not self.at_kw("ADD"):
            t = self.tok
            if t.kind == "word" and t.upper() in ("DROP", "MODIFY", "RENAME"):
                return self.alter_stable_change(db, name)
            if t.kind == "word" and t.upper() in ("SET", "COMMENT", "TTL"):
                raise SqlError(f"ALTER STABLE ... {t.upper()} is not supported at position {t.pos}", t.pos)
            raise self.error("ADD, DROP, MODIFY or RENAME")
        self.advance()
        kind = self.expect_kw("COLUMN", "TAG").text.upper()
        t = self.tok
        col = Column(self.ident("column", new="tag" if kind == "TAG" else "column"), self.data_type())
        self.expect_end()
        if col.name.lower() == "tbname":
            raise SqlError(
                f"{col.name!r} is reserved and cannot name a column or tag at position {t.pos}", t.pos
            )
        if kind == "COLUMN":
            return AlterStableAddColumn(db, name, col)
        return AlterStableAddTag(db, name, col)

    def alter_database(self) -> AlterDatabase:
        stmt = AlterDatabase(self.ident("database"))
        while self.tok.kind != "eof":
            t = self.tok
            key = t.upper()
            if t.kind != "word" or key not in ("WAL_RETENTION_PERIOD", "WAL_RETENTION_SIZE"):
                if t.kind == "word" and key in _DB_OPTIONS:
                    raise SqlError(f"ALTER DATABASE ... {key} is not supported at position {t.pos}", t.pos)
                raise self.error("WAL_RETENTION_PERIOD or WAL_RETENTION_SIZE")
            if key.lower() in stmt.options:
                raise SqlError(f"database option {key} given twice at position {t.pos}", t.pos)
            self.advance()
            vt = self.tok
            value = self.option_value()
            if not isinstance(value, int) or isinstance(value, bool) or not -1 <= value <= 2**31 - 1:
                raise SqlError(f"{key} needs an integer in [-1, {2**31 - 1}] at position {vt.pos}", vt.pos)
            stmt.options[key.lower()] = value
        if not stmt.options:
            raise self.error("WAL_RETENTION_PERIOD or WAL_RETENTION_SIZE")
        return stmt

    def alter_stable_change(self, db: str | None, stable: str) -> AlterStableChange:
        verb = self.advance().upper()
        what = self.expect_kw("COLUMN", "TAG").text.upper()
        t = self.tok
        name = self.ident("column")
        if name.lower() == "tbname":
            raise SqlError(f"'tbname' is not a column or tag to change at position {t.pos}", t.pos)
        if verb == "DROP":
            self.expect_end()
            return AlterStableChange(db, stable, "drop_column" if what == "COLUMN" else "drop_tag", name)
        if verb == "MODIFY":
            if what != "COLUMN":
                raise SqlError(f"ALTER STABLE ... MODIFY TAG is not supported at position {t.pos}", t.pos)
            col = Column(name, self.data_type())
            self.expect_end()
            return AlterStableChange(db, stable, "modify_column", name, column=col)
        if what != "TAG":
            raise SqlError(f"ALTER STABLE ... RENAME COLUMN is not supported at position {t.pos}", t.pos)
        new = self.ident("column", new="tag")
        self.expect_end()
        return AlterStableChange(db, stable, "rename_tag", name, new_name=new)

    def insert(self) -> Insert:
        self.expect_kw("INTO")
        tables: list[InsertRows] = []
        while True:
            db, name = self.qualified()
            name_tok = self.toks[self.i - 1]
            rows = InsertRows(db, name)
            if self.accept_kw("USING"):
                # the child table may be created here: its name must be one CREATE TABLE accepts
                problem = name_problem(name, "table", quoted=name_tok.kind == "qident")
                if problem is not None:
                    raise SqlError(f"{problem} at position {name_tok.pos}", name_tok.pos, INVALID_IDENTIFIER)
                sdb, stable = self.qualified()
                if db is not None and sdb is not None and db != sdb:
                    raise SqlError(
                        f"{name!r} and {stable!r} must be in the same database", self.toks[self.i - 1].pos
                    )
                rows.db = db or sdb
                rows.stable = stable
                if self.tok.kind == "op" and self.tok.text == "(":
                    rows.tag_names = self.name_list("column")
                self.expect_kw("TAGS")
                vt = self.tok
                rows.tags = self.literal_list()
                if rows.tag_names is not None and len(rows.tag_names) != len(rows.tags):
                    raise SqlError(
                        f"{len(rows.tag_names)} tag names but {len(rows.tags)} tag values at position {vt.pos}",
                        vt.pos,
                    )
            if self.tok.kind == "op" and self.tok.text == "(":
                rows.columns = self.name_list("column")
            if self.at_kw("FILE"):
                raise SqlError(f"INSERT ... FILE is not supported at position {self.tok.pos}", self.tok.pos)
            self.expect_kw("VALUES")
            while True:
                rt = self.tok
                if not (rt.kind == "op" and rt.text == "("):
                    if rows.values:
                        break
                    raise self.error("'(' and a row of values")
                row = self.literal_list()
                if rows.columns is not None and len(row) != len(rows.columns):
                    raise SqlError(
                        f"row has {len(row)} values but {len(rows.columns)} columns are named at position {rt.pos}",
                        rt.pos,
                    )
                rows.values.append(row)
                self.accept_op(",")
            tables.append(rows)
            if self.tok.kind == "eof":
                return Insert(tables)
            if self.tok.kind not in ("word", "qident"):
                raise self.error("a table name or end of statement")

    def show(self) -> Show:
        db = None
        if self.tok.kind in ("word", "qident") and self.peek().kind == "op" and self.peek().text == ".":
            db = self.ident("database")
            self.advance()
            kt = self.expect_kw("STABLES", "TABLES", "VGROUPS")
        else:
            kt = self.expect_kw(*sorted(_SHOW_KINDS))
        like = None
        if self.accept_kw("LIKE"):
            if self.tok.kind != "string":
                raise self.error("a pattern string")
            like = self.advance().text
        self.expect_end()
        return Show(kt.text.lower(), db, like)  # type: ignore[arg-type]


def _number(text: str) -> int | float:
    if text.lower().startswith("0x"):
        return int(text, 16)
    if re.fullmatch(r"\d+", text):
        return int(text)
    return float(text)


def _ident_name(node: Any) -> str | None:
    if node is None:
        return None
    if isinstance(node, exp.Identifier):
        name = str(node.this)
        return name if node.quoted else name.lower()
    return str(node.name).lower()


# --- sqlglot glue -----------------------------------------------------------------------


class _PosMap:
    """Maps offsets in the text handed to sqlglot back to offsets in the original SQL."""

    def __init__(self, base: int, edits: list[tuple[int, int, int]]) -> None:
        self.base = base
        self.edits = edits  # (new_start, new_len, old_len) in the rewritten text

    def __call__(self, p: int) -> int:
        shift = 0
        for new_start, new_len, old_len in self.edits:
            if p >= new_start + new_len:
                shift += old_len - new_len
            elif p >= new_start:
                return self.base + new_start + shift
        return self.base + p + shift


def _rewrite(text: str, start: int, end: int) -> tuple[str, _PosMap]:
    """The slice text[start:end] with TDengine durations (1h, 10s) turned into millisecond
    integers, so sqlglot can read `ts > now - 1h`."""
    toks = tokenize(text[start:end])
    out: list[str] = []
    edits: list[tuple[int, int, int]] = []
    last = 0
    length = 0
    src = text[start:end]
    for t in toks:
        if t.kind != "duration":
            continue
        try:
            ms = str(duration_ms(t.text))
        except TypeError_ as e:
            raise SqlError(f"{e} at position {start + t.pos}", start + t.pos) from None
        out.append(src[last : t.pos])
        length += t.pos - last
        edits.append((length, len(ms), t.end - t.pos))
        out.append(ms)
        length += len(ms)
        last = t.end
    out.append(src[last:])
    return "".join(out), _PosMap(start, edits)


def _sqlglot_error(e: Exception, sub: str, pos: _PosMap) -> SqlError:
    errors = getattr(e, "errors", None)
    if errors:
        info = errors[0]
        line, col = info.get("line") or 1, info.get("col") or 1
        highlight = info.get("highlight") or ""
        line_start = 0
        for _ in range(line - 1):
            nl = sub.find("\n", line_start)
            if nl < 0:
                break
            line_start = nl + 1
        p = max(0, min(len(sub), line_start + col - len(highlight)))
        where = pos(p)
        desc = info.get("description") or "invalid query"
        near = f"near {highlight!r} " if highlight else ""
        return SqlError(f"syntax error {near}at position {where}: {desc}", where)
    return SqlError(
        f"syntax error in query at position {pos(0)}: {str(e).splitlines()[0] if str(e) else e!r}", pos(0)
    )


def _parse_sqlglot(text: str, start: int, end: int) -> tuple[exp.Expr, _PosMap]:
    sub, pmap = _rewrite(text, start, end)
    try:
        tree = sqlglot.parse_one(sub, dialect=DIALECT)
    except SqlError:
        raise
    except Exception as e:  # sqlglot raises ParseError, TokenError and, on odd input, others
        raise _sqlglot_error(e, sub, pmap) from None
    if tree is None:
        raise SqlError(f"syntax error at position {start}: empty query", start)
    if next(itertools.islice(tree.walk(), MAX_QUERY_NODES, None), None) is not None:
        raise SqlError(f"query too complex at position {start}: more than {MAX_QUERY_NODES} "
                       "expression nodes", start)
    tree.meta["tmq_pos"] = pmap
    tree.meta["tmq_text"] = text
    return tree, pmap


def parse_query(text: str, start: int = 0, end: int | None = None) -> exp.Select:
    """The SELECT in text[start:end] as a sqlglot Select; raises SqlError."""
    end = len(text) if end is None else end
    tree, _ = _parse_sqlglot(text, start, end)
    if not isinstance(tree, exp.Select):
        kind = type(tree).__name__.upper()
        raise SqlError(f"not supported: {kind} (only a single SELECT) at position {start}", start)
    return tree


def parse_expression(text: str, start: int = 0, end: int | None = None) -> exp.Expr:
    """A boolean condition or expression in text[start:end] (e.g. a topic's WHERE) via sqlglot."""
    end = len(text) if end is None else end
    tree, _ = _parse_sqlglot(text, start, end)
    if isinstance(tree, exp.Query | exp.Command | exp.DDL | exp.DML) or isinstance(tree, exp.Alias):
        raise SqlError(f"syntax error at position {start}: expected a condition", start)
    return tree


_LEADING_KEYWORD = {exp.Case: "case", exp.Cast: "cast", exp.TryCast: "try_cast", exp.Select: "select",
                    exp.Subquery: "select", exp.Exists: "exists"}  # fmt: skip


def _node_pos(node: Any, root: exp.Expr) -> int | None:
    """Best-effort original position of a sqlglot node: its leftmost token that carries a
    position, moved back to the keyword that opens a CASE/CAST/SELECT."""
    pmap = root.meta.get("tmq_pos")
    if pmap is None or not isinstance(node, exp.Expression):
        return None
    starts = [n.meta["start"] for n in node.walk() if n.meta and n.meta.get("start") is not None]
    if not starts:
        return None
    p = pmap(min(starts))
    kw = _LEADING_KEYWORD.get(type(node))
    text = root.meta.get("tmq_text")
    if kw and isinstance(text, str):
        k = text.lower().rfind(kw, pmap.base, p + 1)
        if k >= 0:
            p = k
    return int(p)


node_position = _node_pos


# --- query topics ------------------------------------------------------------------------

AGGREGATE_FUNCTIONS = frozenset(
    """AVG SUM COUNT MAX MIN FIRST LAST LAST_ROW SPREAD STDDEV STDDEV_POP VARIANCE VAR_POP TWA IRATE
    APERCENTILE PERCENTILE LEASTSQUARES HYPERLOGLOG HISTOGRAM ELAPSED MODE TOP BOTTOM SAMPLE TAIL
    UNIQUE DIFF DERIVATIVE CSUM MAVG STATECOUNT STATEDURATION INTERP GROUP_CONCAT COUNT_IF
    FORECAST""".split()
)


def check_topic_query(select: exp.Expr) -> None:
    """Refuse what a query topic may not hold (TDengine allows only projection and filter)."""
    comp_root = select.root() if isinstance(select, exp.Expression) else select

    def fail(what: str, node: exp.Expr) -> SqlError:
        p = node_position(node, comp_root)
        return SqlError(f"not allowed in a topic: {what}" + (f" at position {p}" if p is not None else ""), p)

    if not isinstance(select, exp.Select):
        raise SqlError(f"not allowed in a topic: {type(select).__name__.upper()} (only a single SELECT)")
    for key, what in (
        ("distinct", "DISTINCT"),
        ("group", "GROUP BY"),
        ("having", "HAVING"),
        ("order", "ORDER BY"),
        ("limit", "LIMIT"),
        ("offset", "OFFSET"),
        ("joins", "JOIN"),
        ("laterals", "LATERAL"),
        ("windows", "WINDOW"),
        ("qualify", "QUALIFY"),
        ("into", "INTO"),
        ("with_", "WITH"),
        ("with", "WITH"),
    ):
        val = select.args.get(key)
        if val:
            node = val[0] if isinstance(val, list) else val
            raise fail(what, node if isinstance(node, exp.Expression) else select)
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        raise SqlError("not allowed in a topic: a query without FROM")
    if not isinstance(from_.this, exp.Table):
        raise fail("subquery in FROM", from_.this)
    for node in select.walk():
        if node is select:
            continue
        if isinstance(node, exp.Select | exp.Subquery | exp.Exists):
            raise fail("subquery", node)
        if isinstance(node, exp.Window):
            raise fail("window function", node)
        if isinstance(node, exp.AggFunc):
            raise fail(f"aggregate function {node.sql_name().upper()}", node)
        if isinstance(node, exp.Anonymous) and str(node.name).upper() in AGGREGATE_FUNCTIONS:
            raise fail(f"aggregate function {str(node.name).upper()}", node)


# --- entry points -----------------------------------------------------------------------


def _split(text: str, toks: list[Tok]) -> list[list[Tok]]:
    groups: list[list[Tok]] = []
    cur: list[Tok] = []
    for t in toks:
        if t.kind == "eof" or (t.kind == "op" and t.text == ";"):
            if cur:
                cur.append(Tok("eof", "", t.pos, t.pos))
                groups.append(cur)
            cur = []
        else:
            cur.append(t)
    return groups


def _run(text: str, toks: list[Tok]) -> Statement:
    p = _Parser(text, toks)
    stmt = p.statement()
    p.expect_end()
    return stmt


_T = TypeVar("_T")


def _guard(fn: Callable[[], _T], text: str) -> _T:
    try:
        return fn()
    except SqlError:
        raise
    except RecursionError:
        raise SqlError("statement is nested too deeply", 0) from None
    except Exception as e:  # never let a parser bug escape as anything but SqlError
        raise SqlError(f"cannot parse statement: {type(e).__name__}: {e}", 0) from None


def parse(text: str) -> Statement:
    """Parse one statement (a trailing ';' is allowed); raises SqlError."""

    def go() -> Statement:
        groups = _split(text, tokenize(text))
        if not groups:
            raise SqlError("empty statement at position 0", 0)
        if len(groups) > 1:
            pos = groups[1][0].pos
            raise SqlError(f"more than one statement (use parse_script) at position {pos}", pos)
        return _run(text, groups[0])

    return _guard(go, text)


def parse_script(text: str) -> list[Statement]:
    """Parse semicolon-separated statements; empty statements are skipped."""
    return _guard(lambda: [_run(text, g) for g in _split(text, tokenize(text))], text)
