"""What the design `serve --workers N` did not take would cost (issue 28): one port for all
workers, with the worker that accepted a connection handing each request for a partition led
by another worker over to it, and its answer back. `python -m bench.handoff_bench [--seconds 5]`.

It times that hand-off alone, without any broker work: a "front" process sends Kafka-framed
requests (a 4-byte size, then the bytes) over a Unix socket to an "owner" process, which reads
each whole and answers a 64-byte frame, as a Produce answer is; the front waits for answers
with up to `--in-flight` requests outstanding (a client's pipeline). For each request size
(a 1 KiB record alone, and batches of 16 KiB and 128 KiB — librdkafka's batch.size as the
benchmarks set it): requests/s, MiB/s and the CPU seconds of both processes per request, so
per 1 KiB record. Set against the broker's own cost per record (bench/workers_results.json:
7–9 µs of CPU per 1 KiB record at acks=1), that is the share of a core the hand-off would add
for the requests that reach the wrong worker — (N-1)/N of them with N workers. Results:
`handoff_results.json` beside this file. Nothing asserts timings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
SIZES = (1024, 16 * 1024, 128 * 1024)
ANSWER = b"\x00" * 64


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


async def _owner_loop(sock: socket.socket) -> None:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    frame = struct.pack(">i", len(ANSWER)) + ANSWER
    try:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            writer.write(frame)
    except asyncio.IncompleteReadError:
        pass


def _owner(sock: socket.socket, other: socket.socket, out: Any) -> None:
    other.close()  # the front's end, inherited: the owner sees EOF once the front closes it
    start = _cpu()
    asyncio.run(_owner_loop(sock))
    out.put(_cpu() - start)


async def _front(sock: socket.socket, size: int, seconds: float, in_flight: int) -> tuple[int, float]:
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    request = struct.pack(">i", size) + os.urandom(size)
    sent = done = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        while sent - done < in_flight:
            writer.write(request)
            sent += 1
        await writer.drain()
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(length)
        done += 1
    while done < sent:
        (length,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(length)
        done += 1
    writer.close()
    return done, time.monotonic() - (deadline - seconds)


def measure(size: int, seconds: float, in_flight: int) -> dict[str, float]:
    front_sock, owner_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    out: Any = multiprocessing.get_context("fork").Queue()
    owner = multiprocessing.get_context("fork").Process(target=_owner, args=(owner_sock, front_sock, out))
    owner.start()
    owner_sock.close()
    start = _cpu()
    requests, elapsed = asyncio.run(_front(front_sock, size, seconds, in_flight))
    front_cpu = _cpu() - start
    front_sock.close()
    owner_cpu = out.get(timeout=30)
    owner.join(30)
    per_request_us = (front_cpu + owner_cpu) / requests * 1e6
    return {"request_bytes": size, "requests_per_s": round(requests / elapsed), "mib_per_s":
            round(requests * size / elapsed / 2**20, 1), "cpu_us_per_request": round(per_request_us, 2),
            "cpu_us_per_kib_record": round(per_request_us / (size / 1024), 3),
            "front_cpu_s": round(front_cpu, 2), "owner_cpu_s": round(owner_cpu, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--in-flight", type=int, default=5)
    args = parser.parse_args()
    rows = [measure(size, args.seconds, args.in_flight) for size in SIZES]
    for row in rows:
        print(json.dumps(row))
    (BENCH_DIR / "handoff_results.json").write_text(json.dumps(
        {"seconds": args.seconds, "in_flight": args.in_flight, "cores": os.cpu_count(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
