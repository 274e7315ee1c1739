"""What the request log costs each request at the default level (INFO, slow_request_ms 1000):
the two clock reads, the comparison and the DEBUG check the server's loop adds (issue 13).

    python -m bench.log_overhead
"""

from __future__ import annotations

import logging
import time
import timeit


def main() -> None:
    request_log = logging.getLogger("tmqgate.request")
    logging.getLogger().setLevel(logging.INFO)
    slow_ms = 1000
    ns: dict[str, object] = {"time": time, "logging": logging, "request_log": request_log, "slow_ms": slow_ms}
    added = ("started = time.monotonic()\n"
             "elapsed_ms = (time.monotonic() - started) * 1000\n"
             "if elapsed_ms >= slow_ms or request_log.isEnabledFor(logging.DEBUG):\n"
             "    pass\n")
    n = 1_000_000
    best = min(timeit.repeat(added, globals=ns, number=n, repeat=5)) / n
    print(f"per request at INFO: {best * 1e9:.0f} ns")


if __name__ == "__main__":
    main()
