"""Log set-up of `tmqgate serve`: text lines, or one JSON object per line (`--log-format json`).

A JSON line has `time` (ISO 8601, UTC, milliseconds), `level`, `logger`, `message`, then every
extra field the call gave (`log.info("...", extra={"topic": "t"})`), and `exception` when the
line carries a traceback. Lines are formatted only when their level is enabled (the logging
module checks the level before it builds a record), so a DEBUG call on a hot path costs one
comparison at INFO.
"""

from __future__ import annotations

import json
import logging
import sys
import time

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The attributes every LogRecord has: anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


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
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
