"""Long SQL texts are parsed in a worker process (issue 11: CPU-heavy work never blocks the
Kafka listener for more than a few ms).

The tokenizer and sqlglot are pure Python and hold the GIL, so a thread does not free the
event loop (1 MiB of SQL parses for seconds); a process does. Rules:

- One worker process (pebble's ProcessPool, `max_workers=1`, the `spawn` context so it shares
  nothing with the broker's threads, LevelDB handles or sockets), started on the first long
  text, parses one text at a time; others wait their turn in its queue.
- A parse that runs longer than `timeout_s` is stopped: pebble kills the worker and starts a
  new one; the caller gets `ParseTimeout`.
- A worker that dies (kill -9, out of memory) is replaced by pebble, and the text it had (or
  was about to get) is parsed again by the new one; a text on which the worker dies twice is
  answered `ParseWorkerDied`. The broker is not affected.
- pebble gives up a pool whose idle worker died ("All workers expired"); a text scheduled in
  the instant before the pool noticed is then left in the dead pool's queue, its future never
  settled (a CI run waited 120 s on it). So a pending text whose pool is no longer active is
  taken back (checked every `POOL_CHECK_S`) and sent to a new pool, as a death would.
- The statements come back cheap to take in on the event loop: the worker pickles them in
  pieces (an INSERT's rows in chunks of `ROWS_PER_PIECE`) and `parse` unpickles them piece by
  piece, yielding to the loop between pieces. A `SqlError` (with its position and code) comes
  back as itself.
- `close()` stops the worker with the broker.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from typing import Any

from pebble import ProcessExpired, ProcessPool

from tmqgate.broker.sql import ast
from tmqgate.broker.sql.parser import parse_script

#: An INSERT's rows travel back (and are unpickled on the loop) in chunks of this many.
ROWS_PER_PIECE = 500

#: How often a pending parse looks whether its pool is still alive.
POOL_CHECK_S = 0.25

# A piece: ("stmt", pickled statement) or ("rows", index of the VALUES clause in the last
# statement, pickled list of rows) — an Insert comes with empty VALUES, its rows follow.
Piece = tuple[str, int, bytes]


class ParseTimeout(Exception):
    """The parse took longer than the worker's timeout; the worker was replaced."""


class ParseWorkerDied(Exception):
    """The worker process died while parsing (it is replaced for the next text)."""


def parse_pieces(text: str) -> list[Piece]:
    """In the worker: `parse_script(text)` as pickled pieces (raises SqlError)."""
    pieces: list[Piece] = []
    for stmt in parse_script(text):
        if isinstance(stmt, ast.Insert):
            bare = replace(stmt, tables=[replace(rows, values=[]) for rows in stmt.tables])
            pieces.append(("stmt", 0, pickle.dumps(bare, pickle.HIGHEST_PROTOCOL)))
            for i, rows in enumerate(stmt.tables):
                for start in range(0, len(rows.values), ROWS_PER_PIECE):
                    chunk = rows.values[start:start + ROWS_PER_PIECE]
                    pieces.append(("rows", i, pickle.dumps(chunk, pickle.HIGHEST_PROTOCOL)))
        else:
            pieces.append(("stmt", 0, pickle.dumps(stmt, pickle.HIGHEST_PROTOCOL)))
    return pieces


async def assemble(pieces: list[Piece]) -> list[ast.Statement]:
    """On the loop: the statements of `parse_pieces`, one piece unpickled at a time."""
    statements: list[ast.Statement] = []
    for kind, index, data in pieces:
        if kind == "stmt":
            statements.append(pickle.loads(data))
        else:
            last = statements[-1]
            assert isinstance(last, ast.Insert)
            last.tables[index].values.extend(pickle.loads(data))
        await asyncio.sleep(0)
    return statements


def _warm() -> None:
    """The worker's initializer: the parser is imported before the first task's clock starts.
    (The worker keeps the broker's CPU priority: at nice +10 a host busy with other work
    starved it, a ~3 s parse running past the 30 s timeout.)"""
    import tmqgate.broker.sql.parser  # noqa: F401


class ParseWorker:
    """The broker's SQL parsing process (see the module docstring)."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._pool: ProcessPool | None = None

    def _get_pool(self) -> ProcessPool:
        if self._pool is None or not self._pool.active:
            self._pool = ProcessPool(max_workers=1, initializer=_warm,
                                     context=multiprocessing.get_context("spawn"))
        return self._pool

    async def parse(self, text: str) -> list[ast.Statement]:
        """`parse_script(text)` done in the worker; raises SqlError, ParseTimeout, ParseWorkerDied."""
        pieces: list[Piece] = await self.run(parse_pieces, text)
        return await assemble(pieces)

    async def run(self, fn: Any, *args: Any) -> Any:
        """`fn(*args)` (picklable) in the worker, under the timeout; raises what `fn` raises,
        ParseTimeout or ParseWorkerDied. (`parse` uses it; tests ask the worker's pid.)"""
        died = ""
        for _attempt in (1, 2):
            pool = self._get_pool()
            future = pool.schedule(fn, args=args, timeout=self.timeout_s)
            try:
                return await _settled(pool, future)
            except FutureTimeout:
                raise ParseTimeout(f"parsing took over {self.timeout_s * 1000:.0f} ms; stopped") from None
            except ProcessExpired as exc:
                # The worker died while on this text: once more on a new worker; a second
                # death is this text's answer.
                died = f"{exc}, exit code {exc.exitcode}"
            except BrokenProcessPool as exc:
                # pebble gives up its pool when the worker dies with tasks queued and none
                # running (killed while idle, before the pool noticed): a new pool.
                if self._pool is pool:
                    self._pool = None
                await asyncio.to_thread(_stop, pool)
                died = str(exc)
        raise ParseWorkerDied(f"the SQL parser process died twice on this text ({died})")

    async def pid(self) -> int:
        """The worker's process id (starting it if need be)."""
        pid: int = await self.run(os.getpid)
        return pid

    def close(self) -> None:
        """Stop the worker (waits up to 5 s for pebble's threads)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            _stop(pool)


async def _settled(pool: ProcessPool, future: Any) -> Any:
    """The future's result; BrokenProcessPool when its pool died with it still pending."""
    waiting = asyncio.wrap_future(future)
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=POOL_CHECK_S)
        if done:
            return waiting.result()
        if not pool.active:
            waiting.cancel()
            raise BrokenProcessPool("the pool stopped with this text still pending")


def _stop(pool: ProcessPool) -> None:
    pool.stop()  # type: ignore[no-untyped-call]  # pebble's stop has no annotations
    pool.join(timeout=5)
