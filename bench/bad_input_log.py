"""Log volume under bad input: N malformed frames (each on its own connection, as the broker
closes it) sent to a `tmqgate serve`, then the size of its log and the time taken.

    python -m bench.bad_input_log [--inputs 100000]

Issue 11 measured 27 MB of log per 100k bad inputs (an unthrottled WARNING each); the rate
limit (log_rate_limit_messages per log_rate_limit_interval_ms) bounds it.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

# An unknown api key: Kafka closes the connection without an answer.
BAD = struct.pack(">i", 10) + struct.pack(">hhih", 9999, 0, 7, 0)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bad_input_log", description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from compat_tests.brokers import TmqgateProcess

    with tempfile.TemporaryDirectory() as tmp:
        proc = TmqgateProcess(Path(tmp))
        proc.start()
        try:
            base = proc.log_path.stat().st_size
            t0 = time.perf_counter()
            for _ in range(args.inputs):
                with socket.create_connection(("127.0.0.1", proc.port)) as s:
                    s.sendall(BAD)
                    s.recv(16)  # returns b"" when the broker hangs up
            elapsed = time.perf_counter() - t0
        finally:
            proc.stop()
        size = proc.log_path.stat().st_size - base
        lines = proc.log_path.read_text().splitlines()
        closing = sum("closing" in line for line in lines)
        suppressed = [line for line in lines if "suppressed" in line]
    print(f"{args.inputs} bad inputs in {elapsed:.1f} s ({args.inputs / elapsed:.0f}/s): log grew {size} bytes, "
          f"{closing} 'closing' lines, {len(suppressed)} 'suppressed' lines")
    for line in suppressed[-3:]:
        print("  ", line)


if __name__ == "__main__":
    main()
