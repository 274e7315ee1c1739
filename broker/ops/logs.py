"""Log set-up of `tmqgate serve`: text lines, or one JSON object per line (`--log-format json`).

A JSON line has `time` (ISO 8601, UTC, milliseconds), `level`, `logger`, `message`, then every
extra field the call gave (`log.info("...", extra={"topic": "t"})`), and `exception` when the
line carries a traceback. Lines are formatted only when their level is enabled (the logging
module checks the level before it builds a record), so a DEBUG call on a hot path costs one
comparison at INFO.

Untrusted text (issue 25): group and transactional ids, client ids, principals, topic names
and SQL come from clients and are logged as arguments (`log.info("group %s ...", group_id)`).
`EscapeControl`, on the one handler, writes their control characters — C0 (newline, carriage
return, ESC...), DEL and C1 — as `\n`, `\r`, `\x1b`: a newline cannot forge a line
("... authenticated User:admin") nor an ANSI sequence recolour a terminal. Only the
arguments: the broker's own message texts and tracebacks keep their lines.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Mapping

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The attributes every LogRecord has: anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_control(text: str) -> str:
    """`text` with its C0, DEL and C1 control characters written as `\\n`, `\\r`, `\\t`, `\\xNN`."""
    return _CONTROL.sub(lambda m: _NAMED.get(m[0]) or f"\\x{ord(m[0]):02x}", text)


class _Escaped:
    """An argument whose str() held control characters: %s writes it escaped, %r as repr()
    (which escapes a string's already), escaped too for any other object."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __str__(self) -> str:
        return escape_control(str(self.value))

    def __repr__(self) -> str:
        return escape_control(repr(self.value))


def _escaped(arg: object) -> object:
    if arg is None or isinstance(arg, int | float | _Escaped):  # %d / %f need the number itself
        return arg
    return _Escaped(arg) if _CONTROL.search(arg if isinstance(arg, str) else str(arg)) else arg


class EscapeControl(logging.Filter):
    """Escapes the control characters of every record's arguments (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(_escaped(a) for a in args)
        elif isinstance(args, Mapping):  # log.info("%(name)s", {"name": ...})
            record.args = {k: _escaped(v) for k, v in args.items()}
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, for log shippers (Fluent Bit, Vector, Loki's promtail...)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        line: dict[str, object] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def event_line(fmt: str, logger: str, message: str, **fields: object) -> str:
    """A line the CLI prints to stdout (`tmqgate ready: ...`): `message` itself as text, or under
    `--log-format json` one JSON object as the log's lines are (level INFO, `logger`, `message`,
    then `fields`), so that everything the broker writes under json is JSON."""
    if fmt != "json":
        return message
    record = logging.LogRecord(logger, logging.INFO, __file__, 0, message, None, None)
    record.__dict__.update(fields)
    return JsonFormatter().format(record)


def setup_logging(level: str, fmt: str = "text") -> None:
    """Send log lines of `level` and above to stderr, as text or JSON."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(EscapeControl())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
