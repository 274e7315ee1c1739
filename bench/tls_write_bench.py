"""What it costs the broker's event loop to send a Fetch response over TLS, by write strategy:
`python -m bench.tls_write_bench [--mib 256] [--rounds 3]`.

An asyncio server with the broker's TLS context (TLS 1.3, ECDSA P-256, as compat_tests/certs.py
makes) sends Fetch-shaped responses — per partition a small header part then stored batches
of ~64 KiB, 4 partitions, ~4 MiB a response, as kafka-consumer-perf-test gets them — to a
client that reads and discards in a thread. Measured: the server thread's CPU seconds per GiB
sent (time.thread_time around the writes and drains), for each strategy of
`broker/network/connection.py: write_parts` with no plain socket (fd -1):

- `per-part`: each part its own transport.write (what write_parts did before)
- `joined`: the whole response joined into one write
- `coalesced`: small neighbouring parts joined up to 64 KiB, large ones as they are
- `writelines`: one transport.writelines (the SSL transport encrypts every part, then reads
  its BIO once and makes one socket write)
- `write_parts`: whatever write_parts does now
- `plaintext`: for reference, write_parts over a plain socket (gathered writev, no copies)

Nothing asserts timings; the figures go in RESULTS.md's "Over TLS / SASL_SSL" section.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compat_tests.certs import make_certs
from tmqgate.broker.network.connection import write_parts

PARTITIONS = 4
BATCHES_PER_PARTITION = 16
BATCH = 64 * 1024 - 37


def response(seed: int) -> list[bytes]:
    parts: list[bytes] = [os.urandom(40)]
    for p in range(PARTITIONS):
        parts.append(os.urandom(60) + bytes([seed & 255, p]))
        parts += [os.urandom(BATCH) for _ in range(BATCHES_PER_PARTITION)]
    return parts


def per_part(transport: Any, parts: list[bytes]) -> None:
    for part in parts:
        transport.write(part)


def joined(transport: Any, parts: list[bytes]) -> None:
    transport.write(b"".join(parts))


def coalesced(transport: Any, parts: list[bytes], limit: int = 64 * 1024) -> None:
    pending: list[bytes] = []
    size = 0
    for part in parts:
        if pending and size + len(part) > limit:
            transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
            pending, size = [], 0
        pending.append(part)
        size += len(part)
    if pending:
        transport.write(pending[0] if len(pending) == 1 else b"".join(pending))


def writelines(transport: Any, parts: list[bytes]) -> None:
    transport.writelines(parts)


def current(transport: Any, parts: list[bytes]) -> None:
    write_parts(transport, -1, parts)


def plaintext(transport: Any, parts: list[bytes]) -> None:
    write_parts(transport, transport.get_extra_info("socket").fileno(), parts)


STRATEGIES: dict[str, Callable[[Any, list[bytes]], None]] = {
    "per-part": per_part, "joined": joined, "coalesced": coalesced, "writelines": writelines,
    "write_parts": current,
    "plaintext": plaintext}


def _drain_client(port: int, cafile: str | None, total: int, done: threading.Event) -> None:
    with socket.create_connection(("127.0.0.1", port)) as raw:
        s = ssl.create_default_context(cafile=cafile).wrap_socket(raw, server_hostname="localhost") if cafile else raw
        got = 0
        buf = bytearray(1 << 20)
        while got < total:
            n = s.recv_into(buf)
            if not n:
                break
            got += n
    done.set()


async def one_run(strategy: Callable[[Any, list[bytes]], None], server_ctx: ssl.SSLContext | None,
                  cafile: str | None,
                  responses: list[list[bytes]], repeat: int) -> float:
    """Server thread CPU seconds to send `responses` `repeat` times."""
    total = sum(len(p) for r in responses for p in r) * repeat
    result: dict[str, float] = {}
    finished = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        t0 = time.thread_time()
        for _ in range(repeat):
            for parts in responses:
                strategy(writer.transport, parts)
                await writer.drain()
        result["cpu"] = time.thread_time() - t0
        finished.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx, limit=64 * 1024)
    port = server.sockets[0].getsockname()[1]
    done = threading.Event()
    client = threading.Thread(target=_drain_client, args=(port, cafile, total, done), daemon=True)
    client.start()
    await finished.wait()
    await asyncio.get_running_loop().run_in_executor(None, done.wait)
    server.close()
    await server.wait_closed()
    return result["cpu"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_write_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB sent per strategy and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    certs = make_certs(Path(tempfile.mkdtemp(prefix="tls-write-bench-")))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    server_ctx.load_cert_chain(certs.cert("server"), certs.key("server"))
    responses = [response(i) for i in range(4)]
    size = sum(len(p) for r in responses for p in r)
    repeat = max(1, args.mib * 2**20 // size)
    sent_gib = size * repeat / 2**30
    cpu: dict[str, list[float]] = {name: [] for name in STRATEGIES}
    for _ in range(args.rounds):  # interleaved, so load changes hit every strategy alike
        for name, fn in STRATEGIES.items():
            tls = name != "plaintext"
            cpu[name].append(asyncio.run(one_run(fn, server_ctx if tls else None, certs.ca if tls else None,
                                                 responses, repeat)) / sent_gib)
    print(f"{sent_gib * 1024:.0f} MiB per run, responses of {size / len(responses) / 2**20:.1f} MiB "
          f"({len(responses[0])} parts), median of {args.rounds}; load {os.getloadavg()[0]:.1f}")
    print("| strategy | server CPU s per GiB (median) | runs |")
    print("|---|---|---|")
    for name, values in cpu.items():
        print(f"| {name} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
