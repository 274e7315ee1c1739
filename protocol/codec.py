"""Compiled ``construct`` codecs for Kafka message bodies, built from the JSON schemas.

Every Kafka wire type is a small :class:`construct.Construct` subclass (:class:`KPrim`,
:class:`KString`, :class:`KBytes`, :class:`KArray`, :class:`KStruct`).  Each one can emit
straight-line Python for construct's compiler (``_emitparse`` / ``_emitbuild``), so
``KStruct(...).compile()`` turns a whole message version into one generated module with no
per-field interpretation left: consecutive fixed-size fields are read/written with a single
``struct.Struct``, arrays of ints with a single ``unpack``, and ``records`` are passed through
as one ``bytes`` slice.  Uncompiled use (``KString(...).parse(b)``) also works: ``_parse`` /
``_build`` delegate to a compiled copy of the same construct, so there is one implementation.

Decoded messages are plain ``dict``\\s keyed by the snake_case field names; see
docs/ARCHITECTURE.md for the value conventions (defaults on encode, ``_unknown_tags``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from functools import cache
from io import BytesIO
from typing import Any

from construct import Construct, SizeofError
from construct.core import CodeGen

from .bodies import ZERO_UUID
from .schemas import SCHEMAS, FieldSpec, MessageSpec, in_versions, load_messages

__all__ = [
    "Chunk",
    "Codec",
    "DecodeError",
    "EncodeError",
    "KArray",
    "KBytes",
    "KPrim",
    "KString",
    "KStruct",
    "ViewIO",
    "build_struct",
    "codec_for",
    "default_value",
    "iter_precompile",
    "Message",
]

#: A decoded message or struct: snake_case field names to values.
Message = dict[str, Any]
#: One buffer of an encoded message.
Chunk = bytes | bytearray | memoryview
#: ``io.write`` of the buffer a message is encoded into.
_Write = Callable[[Chunk], object]


class DecodeError(ValueError):
    """The bytes are not a valid encoding (truncated, bad length, bad UTF-8, ...)."""


class EncodeError(ValueError):
    """The value cannot be encoded (wrong type, out of range, null in a non-nullable field)."""


# ---------------------------------------------------------------------------------------------
# Runtime helpers called by the generated code (imported into the compiled module by name).
# ---------------------------------------------------------------------------------------------

_UV = tuple(bytes([i]) for i in range(128))
_st_h = struct.Struct(">h")
_st_i = struct.Struct(">i")
_unpack_h = _st_h.unpack
_unpack_i = _st_i.unpack
_pack_h = _st_h.pack
_pack_i = _st_i.pack
_MAX_STRING = 0x7FFF
_MISSING = object()


def _uv_read(io: BytesIO) -> int:
    """Unsigned varint (at most 5 bytes, as Kafka's ``readUnsignedVarint``)."""
    b = io.read(1)
    if not b:
        raise DecodeError("truncated varint")
    v = b[0]
    if v < 0x80:
        return v
    result = v & 0x7F
    shift = 7
    while True:
        b = io.read(1)
        if not b:
            raise DecodeError("truncated varint")
        v = b[0]
        result |= (v & 0x7F) << shift
        if v < 0x80:
            return result
        shift += 7
        if shift > 28:
            raise DecodeError("varint too long")


def _uv_bytes(n: int) -> bytes:
    if n < 0x80:
        if n < 0:
            raise EncodeError(f"negative varint {n}")
        return _UV[n]
    if n > 0xFFFFFFFF:
        raise EncodeError(f"varint {n} out of range")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _remaining(io: BytesIO) -> int:
    p = io.tell()
    end = io.seek(0, 2)
    io.seek(p)
    return end - p


def _read_exact(io: BytesIO, n: int) -> bytes:
    b = io.read(n)
    if len(b) != n:
        raise DecodeError(f"truncated: wanted {n} bytes, got {len(b)}")
    return b


def _uv_cont(io: BytesIO, first: int) -> int:
    """Rest of a varint whose first byte (>= 0x80) was already read inline."""
    result = first & 0x7F
    shift = 7
    while True:
        v = io.read(1)[0]
        result |= (v & 0x7F) << shift
        if v < 0x80:
            return result
        shift += 7
        if shift > 28:
            raise DecodeError("varint too long")


# The readers below may raise IndexError / struct.error on truncated input; Codec.decode_from
# turns every exception into DecodeError, which keeps the hot path free of extra checks.


def _r_str(io: BytesIO) -> str:
    (n,) = _unpack_h(io.read(2))
    if n < 0:
        raise DecodeError("null in a non-nullable string")
    b = io.read(n)
    if len(b) != n:
        raise DecodeError("truncated string")
    return b.decode()


def _r_nstr(io: BytesIO) -> str | None:
    (n,) = _unpack_h(io.read(2))
    if n < 0:
        return None
    b = io.read(n)
    if len(b) != n:
        raise DecodeError("truncated string")
    return b.decode()


def _r_cstr(io: BytesIO) -> str:
    n = io.read(1)[0]
    if n > 127:
        n = _uv_cont(io, n)
        if n > _MAX_STRING + 1:
            raise DecodeError(f"string length {n - 1} too long")
    elif n == 0:
        raise DecodeError("null in a non-nullable string")
    n -= 1
    b = io.read(n)
    if len(b) != n:
        raise DecodeError("truncated string")
    return b.decode()


def _r_cnstr(io: BytesIO) -> str | None:
    n = io.read(1)[0]
    if n > 127:
        n = _uv_cont(io, n)
        if n > _MAX_STRING + 1:
            raise DecodeError(f"string length {n - 1} too long")
    elif n == 0:
        return None
    n -= 1
    b = io.read(n)
    if len(b) != n:
        raise DecodeError("truncated string")
    return b.decode()


def _r_bytes(io: BytesIO) -> bytes:
    (n,) = _unpack_i(io.read(4))
    if n < 0:
        raise DecodeError("null in non-nullable bytes")
    return _read_exact(io, n)


def _r_nbytes(io: BytesIO) -> bytes | None:
    (n,) = _unpack_i(io.read(4))
    if n < 0:
        return None
    return _read_exact(io, n)


def _r_cbytes(io: BytesIO) -> bytes:
    n = _uv_read(io) - 1
    if n < 0:
        raise DecodeError("null in non-nullable bytes")
    return _read_exact(io, n)


def _r_cnbytes(io: BytesIO) -> bytes | None:
    n = _uv_read(io) - 1
    if n < 0:
        return None
    return _read_exact(io, n)


class ViewIO(BytesIO):
    """A ``BytesIO`` that also keeps a ``memoryview`` of its data: ``records`` read through it are
    zero-copy ``memoryview`` slices instead of ``bytes`` (opt-in, see ``Codec.decode``)."""

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        super().__init__(buf)
        self.view = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)


def _records_tail(io: BytesIO, n: int) -> bytes | memoryview:
    view: memoryview | None = getattr(io, "view", None)
    if view is None:
        return _read_exact(io, n)
    p = io.tell()
    if p + n > len(view):
        raise DecodeError("truncated records")
    io.seek(p + n)
    return view[p:p + n]


def _r_records(io: BytesIO) -> bytes | memoryview:
    (n,) = _unpack_i(io.read(4))
    if n < 0:
        raise DecodeError("null in non-nullable records")
    return _records_tail(io, n)


def _r_nrecords(io: BytesIO) -> bytes | memoryview | None:
    (n,) = _unpack_i(io.read(4))
    if n < 0:
        return None
    return _records_tail(io, n)


def _r_crecords(io: BytesIO) -> bytes | memoryview:
    n = _uv_read(io) - 1
    if n < 0:
        raise DecodeError("null in non-nullable records")
    return _records_tail(io, n)


def _r_cnrecords(io: BytesIO) -> bytes | memoryview | None:
    n = _uv_read(io) - 1
    if n < 0:
        return None
    return _records_tail(io, n)


def _w_str(w: _Write, s: str) -> None:
    b = s.encode()
    n = len(b)
    if n > _MAX_STRING:
        raise EncodeError(f"string of {n} bytes is too long")
    w(_pack_h(n))
    w(b)


def _w_nstr(w: _Write, s: str | None) -> None:
    if s is None:
        w(b"\xff\xff")
    else:
        _w_str(w, s)


def _w_cstr(w: _Write, s: str) -> None:
    b = s.encode()
    n = len(b)
    if n < 127:
        w(_UV[n + 1])
    elif n > _MAX_STRING:
        raise EncodeError(f"string of {n} bytes is too long")
    else:
        w(_uv_bytes(n + 1))
    w(b)


def _w_cnstr(w: _Write, s: str | None) -> None:
    if s is None:
        w(b"\x00")
    else:
        _w_cstr(w, s)


def _w_bytes(w: _Write, b: bytes) -> None:
    w(_pack_i(len(b)))
    w(b)


def _w_nbytes(w: _Write, b: bytes | None) -> None:
    if b is None:
        w(b"\xff\xff\xff\xff")
    else:
        w(_pack_i(len(b)))
        w(b)


def _w_cbytes(w: _Write, b: bytes) -> None:
    n = len(b)
    w(_UV[n + 1] if n < 127 else _uv_bytes(n + 1))
    w(b)


def _w_cnbytes(w: _Write, b: bytes | None) -> None:
    if b is None:
        w(b"\x00")
    else:
        _w_cbytes(w, b)


def _not_null(what: str) -> None:
    raise EncodeError(f"null given for non-nullable {what}")


def _w_tags(w: _Write, items: list[tuple[int, Any]]) -> None:
    """Write a tagged-fields section from ``(tag, encoded_bytes)`` pairs, sorted by tag."""
    items.sort(key=_first)
    w(_uv_bytes(len(items)))
    for tag, data in items:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise EncodeError(f"unknown tag {tag}: value must be bytes")
        w(_uv_bytes(tag))
        w(_uv_bytes(len(data)))
        w(data)


def _eq_default(v: Any, d: Any) -> bool:
    """Whether a tagged field's value encodes like its default (so Kafka would omit it); a
    struct given as a partial dict counts as its filled-in form."""
    if isinstance(d, dict) and isinstance(v, dict):
        if v.get("_unknown_tags"):
            return False
        return all(_eq_default(v.get(k, dv), dv) for k, dv in d.items())
    return bool(v == d)


def _first(item: tuple[Any, ...]) -> Any:
    return item[0]


_HELPERS = (
    "_uv_read _uv_bytes _remaining _read_exact _UV _MISSING DecodeError EncodeError "
    "_uv_cont _r_str _r_nstr _r_cstr _r_cnstr _r_bytes _r_nbytes _r_cbytes _r_cnbytes "
    "_r_records _r_nrecords _r_crecords _r_cnrecords "
    "_w_str _w_nstr _w_cstr _w_cnstr _w_bytes _w_nbytes _w_cbytes _w_cnbytes _w_tags _not_null "
    "_eq_default"
)


# ---------------------------------------------------------------------------------------------
# Code generation support
# ---------------------------------------------------------------------------------------------


class _Gen:
    """Per-``CodeGen`` state: emitted struct functions and shared ``struct.Struct`` constants."""

    def __init__(self, code: CodeGen) -> None:
        self.code = code
        self.structs: dict[int, tuple[str, str]] = {}
        self.fmts: dict[str, str] = {}
        code.append(f"from tmqgate.protocol.codec import ({', '.join(_HELPERS.split())})")

    @staticmethod
    def of(code: CodeGen) -> _Gen:
        gen = getattr(code, "_kafka_gen", None)
        if gen is None:
            gen = _Gen(code)
            code._kafka_gen = gen
        return gen

    def uid(self) -> int:
        return int(self.code.allocateId())

    def tmp(self, prefix: str) -> str:
        return f"{prefix}{self.uid()}"

    def fmt(self, fmt: str) -> str:
        """Name of a module-level ``struct.Struct('>' + fmt)``."""
        name = self.fmts.get(fmt)
        if name is None:
            name = self.fmts[fmt] = f"_st{self.uid()}"
            self.code.append(f"{name} = struct.Struct({'>' + fmt!r})")
        return name

    def const(self, value: Any) -> str:
        name = f"_k{self.uid()}"
        self.code.append(f"{name} = {value!r}")
        return name


class KType(Construct):  # type: ignore[misc]  # construct has no type information
    """Base of our Kafka wire types: emits inline code, parses/builds via its compiled self."""

    #: struct format of a fixed-size value, or None
    fixed: str | None = None

    def emit_read(self, g: _Gen, var: str, ind: str) -> list[str]:
        raise NotImplementedError

    def emit_write(self, g: _Gen, val: str, ind: str) -> list[str]:
        """Lines writing the value held in variable ``val`` with ``w`` (and ``wr`` for records)."""
        raise NotImplementedError

    # -- construct protocol ---------------------------------------------------------------
    def _emitparse(self, code: CodeGen) -> str:
        g = _Gen.of(code)
        fname = f"_kparse{g.uid()}"
        lines = [f"def {fname}(io, this):", *self.emit_read(g, "v", "    "), "    return v"]
        code.append("\n".join(lines))
        return f"{fname}(io, this)"

    def _emitbuild(self, code: CodeGen) -> str:
        g = _Gen.of(code)
        fname = f"_kbuild{g.uid()}"
        lines = [f"def {fname}(obj, io, this):", "    w = wr = io.write",
                 *self.emit_write(g, "obj", "    "), "    return obj"]
        code.append("\n".join(lines))
        return f"{fname}(obj, io, this)"

    def _compiled_self(self) -> Construct:
        c = self.__dict__.get("_compiled_cache")
        if c is None:
            c = self.__dict__["_compiled_cache"] = self.compile()
        return c

    def _parse(self, stream: Any, context: Any, path: Any) -> Any:
        return self._compiled_self().parsefunc(stream, context)

    def _build(self, obj: Any, stream: Any, context: Any, path: Any) -> Any:
        self._compiled_self().buildfunc(obj, stream, context)
        return obj

    def _sizeof(self, context: Any, path: Any) -> int:
        if self.fixed is not None:
            return struct.calcsize(">" + self.fixed)
        raise SizeofError(path=path)


class KPrim(KType):
    """Fixed-size primitive: bool, int8/16/32/64, uint16/32, float64, uuid (16 bytes)."""

    FORMATS = {"bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i",
               "uint32": "I", "int64": "q", "float64": "d", "uuid": "16s"}

    fixed: str  # always fixed-size

    def __init__(self, type_name: str) -> None:
        super().__init__()
        self.type_name = type_name
        self.fixed = self.FORMATS[type_name]
        self.size = struct.calcsize(">" + self.fixed)

    def emit_read(self, g: _Gen, var: str, ind: str) -> list[str]:
        return [f"{ind}{var}, = {g.fmt(self.fixed)}.unpack(io.read({self.size}))"]

    def emit_write(self, g: _Gen, val: str, ind: str) -> list[str]:
        lines = []
        if self.type_name == "uuid":
            lines.append(f"{ind}if len({val}) != 16: raise EncodeError('uuid must be 16 bytes')")
        return [*lines, f"{ind}w({g.fmt(self.fixed)}.pack({val}))"]


class KString(KType):
    """UTF-8 string: int16 length (or compact uvarint length+1); -1 / 0 means null if nullable."""

    def __init__(self, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.compact, self.nullable = compact, nullable
        self.suffix = ("c" if compact else "") + ("n" if nullable else "") + "str"

    def emit_read(self, g: _Gen, var: str, ind: str) -> list[str]:
        return [f"{ind}{var} = _r_{self.suffix}(io)"]

    def emit_write(self, g: _Gen, val: str, ind: str) -> list[str]:
        return [f"{ind}_w_{self.suffix}(w, {val})"]


class KBytes(KType):
    """Bytes (int32 or compact length).  ``records`` is this with the payload written via ``wr``
    so :meth:`Codec.encode_parts` can hand record data to the transport without copying it; a
    ``records`` value may also be a list of buffers, encoded exactly as their concatenation."""

    def __init__(self, compact: bool, nullable: bool, records: bool = False) -> None:
        super().__init__()
        self.compact, self.nullable, self.records = compact, nullable, records
        self.suffix = ("c" if compact else "") + ("n" if nullable else "") + "bytes"

    def emit_read(self, g: _Gen, var: str, ind: str) -> list[str]:
        suffix = self.suffix.replace("bytes", "records") if self.records else self.suffix
        return [f"{ind}{var} = _r_{suffix}(io)"]

    def emit_write(self, g: _Gen, val: str, ind: str) -> list[str]:
        if not self.records:
            return [f"{ind}_w_{self.suffix}(w, {val})"]
        n = g.tmp("n")
        if self.compact:
            length = f"w(_UV[{n} + 1] if {n} < 127 else _uv_bytes({n} + 1))"
            null = "w(b'\\x00')"
        else:
            length = f"w(_st_i_pack({n}))"
            null = "w(b'\\xff\\xff\\xff\\xff')"
        g.code.append("_st_i_pack = struct.Struct('>i').pack")
        # A list is the record data in parts (e.g. stored batches, unjoined): one length prefix
        # for their sum, then each part through ``wr``, so none is copied to make the field.
        part = g.tmp("p")
        body = [f"{ind}    if {val}.__class__ is list:",
                f"{ind}        {n} = sum(map(len, {val}))",
                f"{ind}        {length}",
                f"{ind}        for {part} in {val}: wr({part})",
                f"{ind}    else:",
                f"{ind}        {n} = len({val})",
                f"{ind}        {length}",
                f"{ind}        wr({val})"]
        return [f"{ind}if {val} is None:",
                f"{ind}    {null}" if self.nullable else f"{ind}    _not_null('records')",
                f"{ind}else:", *body]


class KArray(KType):
    """Array: int32 count (or compact uvarint count+1); -1 / 0 means null if nullable."""

    def __init__(self, elem: KType, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.elem, self.compact, self.nullable = elem, compact, nullable

    def emit_read(self, g: _Gen, var: str, ind: str) -> list[str]:
        n = g.tmp("n")
        if self.compact:
            lines = [f"{ind}{n} = io.read(1)[0]", f"{ind}if {n} > 127: {n} = _uv_cont(io, {n})",
                     f"{ind}{n} -= 1"]
        else:
            lines = [f"{ind}{n}, = {g.fmt('i')}.unpack(io.read(4))"]
        lines.append(f"{ind}if {n} < 0:")
        if self.nullable:
            lines.append(f"{ind}    {var} = None")
        else:
            lines.append(f"{ind}    raise DecodeError('null in a non-nullable array')")
        lines.append(f"{ind}else:")
        i2 = ind + "    "
        fx = self.elem.fixed
        if fx is not None and fx != "16s":
            size = struct.calcsize(">" + fx)
            d = g.tmp("d")
            lines += [
                f"{i2}{d} = io.read({n} * {size})",
                f"{i2}if len({d}) != {n} * {size}: raise DecodeError('truncated array')",
                f"{i2}{var} = list(struct.unpack('>%d{fx}' % {n}, {d})) if {n} else []",
            ]
        else:
            app, e = g.tmp("app"), g.tmp("e")
            lines += [
                f"{i2}if {n} > _remaining(io): raise DecodeError('array count exceeds the data')",
                f"{i2}{var} = []",
                f"{i2}{app} = {var}.append",
                f"{i2}for _ in range({n}):",
                *self.elem.emit_read(g, e, i2 + "    "),
                f"{i2}    {app}({e})",
            ]
        return lines

    def emit_write(self, g: _Gen, val: str, ind: str) -> list[str]:
        null = "w(b'\\x00')" if self.compact else "w(b'\\xff\\xff\\xff\\xff')"
        lines = [f"{ind}if {val} is None:",
                 f"{ind}    {null}" if self.nullable else f"{ind}    _not_null('array')",
                 f"{ind}else:"]
        i2 = ind + "    "
        n = g.tmp("n")
        lines.append(f"{i2}{n} = len({val})")
        if self.compact:
            lines.append(f"{i2}w(_UV[{n} + 1] if {n} < 127 else _uv_bytes({n} + 1))")
        else:
            lines.append(f"{i2}w({g.fmt('i')}.pack({n}))")
        fx = self.elem.fixed
        if fx is not None and fx != "16s":
            lines.append(f"{i2}w(struct.pack('>%d{fx}' % {n}, *{val}))")
        else:
            e = g.tmp("e")
            lines += [f"{i2}for {e} in {val}:", *self.elem.emit_write(g, e, i2 + "    ")]
        return lines


class KStruct(KType):
    """A struct (or a whole message body).

    ``fields`` are ``(key, type, default)`` in wire order; ``tagged`` are
    ``(tag, key, type, default)`` written in the trailing tagged-fields section, present when
    ``flexible``.  ``nullable`` adds KIP-893's int8 presence prefix (-1 = null).  Defaults are
    what a missing key encodes as, and what an absent tagged field decodes as.
    """

    def __init__(self, name: str, fields: Iterable[tuple[str, KType, Any]],
                 tagged: Iterable[tuple[int, str, KType, Any]] = (), flexible: bool = False,
                 nullable: bool = False, order: list[str] | None = None) -> None:
        super().__init__()
        self.name = name
        self.kfields = list(fields)
        self.ktagged = sorted(tagged, key=_first)
        self.flexible = flexible
        self.nullable = nullable
        #: key order of decoded dicts (schema order, tagged fields in place)
        self.order = order or [k for k, _, _ in self.kfields] + [k for _, k, _, _ in self.ktagged]

    def _functions(self, g: _Gen) -> tuple[str, str]:
        names = g.structs.get(id(self))
        if names is None:
            uid = g.uid()
            names = g.structs[id(self)] = (f"_kp_{self.name}_{uid}", f"_kb_{self.name}_{uid}")
            g.code.append(self._gen_parse(g, names[0]))
            g.code.append(self._gen_build(g, names[1]))
        return names

    # -- parse -------------------------------------------------------------------------------
    def _gen_parse(self, g: _Gen, fname: str) -> str:
        ind = "    "
        lines = [f"def {fname}(io):"]
        var: dict[str, str] = {}
        group: list[tuple[str, KType]] = []

        def flush() -> None:
            if not group:
                return
            fmt = "".join(t.fixed or "" for _, t in group)
            size = struct.calcsize(">" + fmt)
            names = ", ".join(var[k] for k, _ in group)
            lines.append(f"{ind}{names}, = {g.fmt(fmt)}.unpack(io.read({size}))")
            group.clear()

        for i, (key, t, _d) in enumerate(self.kfields):
            var[key] = f"f{i}"
            if t.fixed is not None:
                group.append((key, t))
                continue
            flush()
            lines += t.emit_read(g, var[key], ind)
        flush()
        if self.flexible:
            for j, (_tag, key, _t, d) in enumerate(self.ktagged):
                var[key] = f"t{j}"
                lines.append(f"{ind}t{j} = {d!r}")
            # tag count read inline: almost always the single byte 0
            lines += [f"{ind}unk = None", f"{ind}nt = io.read(1)[0]",
                      f"{ind}if nt > 127: nt = _uv_cont(io, nt)",
                      f"{ind}for _ in range(nt):",
                      f"{ind}    tag = _uv_read(io)", f"{ind}    size = _uv_read(io)"]
            kw = "if"
            for j, (tag, _key, t, _d) in enumerate(self.ktagged):
                lines += [f"{ind}    {kw} tag == {tag}:", f"{ind}        end = io.tell() + size",
                          *t.emit_read(g, f"t{j}", ind + "        "),
                          f"{ind}        if io.tell() != end: raise DecodeError('tagged field size mismatch')"]
                kw = "elif"
            body = [f"{ind}        if unk is None: unk = {{}}", f"{ind}        unk[tag] = _read_exact(io, size)"]
            if self.ktagged:
                lines += [f"{ind}    else:", *body]
            else:
                lines += [s[4:] for s in body]
        items = ", ".join(f"{k!r}: {var[k]}" for k in self.order if k in var)
        lines.append(f"{ind}r = {{{items}}}")
        if self.flexible:
            lines.append(f"{ind}if unk: r['_unknown_tags'] = unk")
        lines.append(f"{ind}return r")
        return "\n".join(lines)

    def emit_read(self, g: _Gen, var: str, ind: str) -> list[str]:
        p, _ = self._functions(g)
        if self.nullable:
            return [f"{ind}if _read_exact(io, 1)[0] >= 128:", f"{ind}    {var} = None",
                    f"{ind}else:", f"{ind}    {var} = {p}(io)"]
        return [f"{ind}{var} = {p}(io)"]

    # -- build -------------------------------------------------------------------------------
    @staticmethod
    def _build_default(t: KType, d: Any) -> Any:
        """Fallback for a missing key when encoding: cheap stand-ins that encode identically."""
        if isinstance(t, KStruct) and d is not None:
            return {}
        if isinstance(t, KArray) and d is not None:
            return ()
        return d

    def _gen_build(self, g: _Gen, fname: str) -> str:
        ind = "    "
        lines = [f"def {fname}(o, w, wr):", f"{ind}g = o.get"]
        group: list[tuple[str, KType, Any]] = []

        def flush() -> None:
            if not group:
                return
            fmt = "".join(t.fixed or "" for _, t, _ in group)
            for k, t, d in group:
                if t.fixed == "16s":
                    lines.append(f"{ind}if len(g({k!r}, {d!r})) != 16: raise EncodeError('{k}: uuid must be 16 bytes')")
            args = ", ".join(f"g({k!r}, {d!r})" for k, _, d in group)
            lines.append(f"{ind}w({g.fmt(fmt)}.pack({args}))")
            group.clear()

        for key, t, d in self.kfields:
            if t.fixed is not None:
                group.append((key, t, d))
                continue
            flush()
            lines.append(f"{ind}v = g({key!r}, {self._build_default(t, d)!r})")
            lines += t.emit_write(g, "v", ind)
        flush()
        if self.flexible:
            if not self.ktagged:
                lines += [f"{ind}u = g('_unknown_tags')", f"{ind}if u: _w_tags(w, list(u.items()))",
                          f"{ind}else: w(b'\\x00')"]
            else:
                lines.append(f"{ind}tg = []")
                for tag, key, t, d in self.ktagged:
                    tf = self._tag_writer(g, t)
                    dname = g.const(d)
                    lines += [f"{ind}v = g({key!r}, _MISSING)",
                              f"{ind}if v is not _MISSING and not _eq_default(v, {dname}): tg.append(({tag}, {tf}(v)))"]
                known = g.const(frozenset(tag for tag, _, _, _ in self.ktagged))
                lines += [f"{ind}u = g('_unknown_tags')",
                          f"{ind}if u and not {known}.isdisjoint(u): "
                          "raise EncodeError('_unknown_tags uses the tag of a known field')",
                          f"{ind}if u: tg.extend(u.items())",
                          f"{ind}if tg: _w_tags(w, tg)", f"{ind}else: w(b'\\x00')"]
        return "\n".join(lines)

    @staticmethod
    def _tag_writer(g: _Gen, t: KType) -> str:
        fname = g.tmp("_ktag")
        lines = [f"def {fname}(v):", "    b = BytesIO()", "    w = wr = b.write",
                 *t.emit_write(g, "v", "    "), "    return b.getvalue()"]
        g.code.append("\n".join(lines))
        return fname

    def emit_write(self, g: _Gen, val: str, ind: str) -> list[str]:
        _, b = self._functions(g)
        if self.nullable:
            return [f"{ind}if {val} is None:", f"{ind}    w(b'\\xff')", f"{ind}else:",
                    f"{ind}    w(b'\\x01')", f"{ind}    {b}({val}, w, wr)"]
        return [f"{ind}{b}({val}, w, wr)"]

    def _emitparse(self, code: CodeGen) -> str:
        g = _Gen.of(code)
        p, b = self._functions(g)
        code.append(f"_kafka_gen_names = ({p!r}, {b!r})")
        return super()._emitparse(code)


# ---------------------------------------------------------------------------------------------
# Schema → construct
# ---------------------------------------------------------------------------------------------

_INT_TYPES = frozenset({"int8", "int16", "uint16", "int32", "uint32", "int64"})


def default_value(f: FieldSpec, v: int) -> Any:
    """The value a field takes when absent (architecture rule: JSON ``default``, else the zero
    value of its type; a nullable field with no ``default`` is null)."""
    nullable = f.nullable(v)
    d = f.default
    if (f.has_default and d == "null") or (not f.has_default and nullable):
        if nullable:
            return None
    if f.is_array:
        return []
    if f.fields is not None:  # a struct
        return {s.key: default_value(s, v) for s in f.fields if s.present(v)}
    t = f.type
    if t in _INT_TYPES:
        if not f.has_default or d == "":
            return 0
        if isinstance(d, str):
            s = d.strip().lower()
            return int(s, 16) if s.startswith(("0x", "-0x")) else int(s)
        return int(d)
    if t == "bool":
        if isinstance(d, str):
            return d.strip().lower() == "true"
        return bool(d)
    if t == "float64":
        return float(d) if f.has_default and d != "" else 0.0
    if t == "string":
        return d if f.has_default and isinstance(d, str) and d != "null" else ""
    if t in ("bytes", "records"):
        return b""
    if t == "uuid":
        return ZERO_UUID
    raise ValueError(f"no default for type {t}")


def _field_type(f: FieldSpec, v: int, flexible: bool, path: str) -> KType:
    compact = flexible and (f.flexible_versions is None or in_versions(f.flexible_versions, v))
    nullable = f.nullable(v)
    if f.fields is not None:  # a struct
        elem: KType = build_struct(f.fields, v, flexible, name=f"{path}_{f.name}",
                                   nullable=nullable and not f.is_array)
    elif f.type == "string":
        elem = KString(compact, nullable and not f.is_array)
    elif f.type in ("bytes", "records"):
        elem = KBytes(compact, nullable and not f.is_array, records=f.type == "records")
    else:
        elem = KPrim(f.type)
    if f.is_array:
        return KArray(elem, compact, nullable)
    return elem


def build_struct(fields: tuple[FieldSpec, ...], v: int, flexible: bool, name: str = "msg",
                 nullable: bool = False) -> KStruct:
    """The :class:`KStruct` for ``fields`` at version ``v``."""
    plain: list[tuple[str, KType, Any]] = []
    tagged: list[tuple[int, str, KType, Any]] = []
    order: list[str] = []
    for f in fields:
        if not f.present(v):
            continue
        order.append(f.key)
        t = _field_type(f, v, flexible, name)
        if flexible and f.tag is not None and f.tagged(v):
            tagged.append((f.tag, f.key, t, default_value(f, v)))
        else:
            plain.append((f.key, t, default_value(f, v)))
    return KStruct(name, plain, tagged, flexible=flexible, nullable=nullable, order=order)


class Codec:
    """Encoder/decoder of one message body: ``(api_key, version, kind)``."""

    __slots__ = ("api_key", "version", "kind", "spec", "construct", "compiled", "_parse", "_build")

    def __init__(self, spec: MessageSpec, api_key: int, version: int, kind: str) -> None:
        self.api_key, self.version, self.kind, self.spec = api_key, version, kind, spec
        self.construct = build_struct(spec.fields, version, spec.flexible(version), name=spec.name)
        self.compiled = self.construct._compiled_self()
        p, b = self.compiled.module.__dict__["_kafka_gen_names"]
        self._parse: Callable[[BytesIO], Message] = self.compiled.module.__dict__[p]
        self._build: Callable[[Message, _Write, _Write], object] = self.compiled.module.__dict__[b]

    def __repr__(self) -> str:
        return f"<Codec {self.spec.name} v{self.version}>"

    def decode(self, buf: bytes | bytearray | memoryview, records_view: bool = False) -> Message:
        """Decode a body; trailing bytes are ignored (as Kafka does).  With ``records_view``
        the ``records`` fields are zero-copy ``memoryview`` slices of ``buf`` instead of bytes."""
        return self.decode_from(ViewIO(buf) if records_view else BytesIO(buf))

    def decode_from(self, io: BytesIO) -> Message:
        try:
            return self._parse(io)
        except DecodeError:
            raise
        except Exception as exc:  # any malformed input must surface as DecodeError
            raise DecodeError(f"{self.spec.name} v{self.version}: {exc!r}") from exc

    def encode(self, msg: Message) -> bytes:
        io = BytesIO()
        self.encode_into(msg, io)
        return io.getvalue()

    def encode_into(self, msg: Message, io: BytesIO) -> None:
        w = io.write
        try:
            self._build(msg, w, w)
        except EncodeError as exc:
            raise EncodeError(f"{self.spec.name} v{self.version}: {exc}") from exc
        except Exception as exc:
            raise EncodeError(f"{self.spec.name} v{self.version}: {exc!r}") from exc

    def encode_parts(self, msg: Message, io: BytesIO | None = None, threshold: int = 4096) -> list[Chunk]:
        """Encode as a list of buffers where ``records`` payloads of ``threshold`` bytes or more are
        the caller's own objects (not copied), as is each such part of a ``records`` list; the
        buffers joined are exactly :meth:`encode`'s bytes."""
        io = io if io is not None else BytesIO()
        w = io.write
        refs: list[tuple[int, Chunk]] = []
        tell = io.tell

        def wr(data: Chunk) -> None:
            if len(data) < threshold:
                w(data)
            else:
                refs.append((tell(), data))

        try:
            self._build(msg, w, wr)
        except Exception as exc:
            raise EncodeError(f"{self.spec.name} v{self.version}: {exc!r}") from exc
        head = io.getvalue()
        if not refs:
            return [head]
        parts: list[Chunk] = []
        prev = 0
        for pos, data in refs:
            if pos > prev:
                parts.append(head[prev:pos])
            parts.append(data)
            prev = pos
        if prev < len(head):
            parts.append(head[prev:])
        return parts


def iter_precompile(versions: Iterable[tuple[int, int]] | None = None) -> Iterator[Codec]:
    """Build the request and response codecs of ``versions`` (api key, version pairs; default:
    every version of every API, newest first) ahead of their first request, about 3 ms each,
    one per step so a server can let other work run in between."""
    if versions is None:
        versions = ((key, v) for key, s in SCHEMAS.items() for v in range(s.max_version, s.min_version - 1, -1))
    for key, v in versions:
        for kind in ("request", "response"):
            yield codec_for(key, v, kind)


@cache
def codec_for(api_key: int, version: int, kind: str) -> Codec:
    """Compiled codec for a request or response body.  Raises ``KeyError`` for an unknown api key
    and ``ValueError`` for a version outside the schema's ``validVersions``."""
    schema = SCHEMAS[api_key]
    if not schema.min_version <= version <= schema.max_version:
        raise ValueError(f"{schema.name} has no version {version}")
    return Codec(schema.spec(kind), api_key, version, kind)


@cache
def data_codec(name: str, version: int) -> Codec:
    """Codec for a versioned data schema that is not an API message (e.g. the consumer
    protocol's Subscription and Assignment, which travel as bytes inside group messages).
    The encoded form starts with its int16 version, as Kafka's ConsumerProtocol writes it."""
    spec = _data_specs()[name]
    return Codec(spec, -1, version, "data")


def decode_versioned(name: str, data: bytes) -> Message:
    """Decode `int16 version` + body of a data schema (newer versions read as our newest)."""
    if len(data) < 2:
        raise DecodeError(f"{name}: {len(data)} bytes is too short")
    version = int.from_bytes(data[:2], "big", signed=True)
    valid = _data_specs()[name].valid_versions
    if valid is None:
        raise DecodeError(f"{name} has no versions")
    newest = valid[1]
    return data_codec(name, min(max(version, 0), newest)).decode(data[2:])


@cache
def _data_specs() -> dict[str, MessageSpec]:
    return load_messages()
