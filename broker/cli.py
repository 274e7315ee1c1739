"""`tmqgate` command line: `tmqgate serve` runs the broker until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from broker.config import BrokerConfig


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tmqgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--listen", help="Kafka listener HOST:PORT (default 127.0.0.1:9092)")
    serve.add_argument("--http", help="HTTP listener HOST:PORT (default 127.0.0.1:6041)")
    serve.add_argument("--data-dir", help="data directory (default ./data)")
    serve.add_argument("--config", help="TOML file of broker settings")
    serve.add_argument("--log-level", default="INFO")
    return parser


async def _serve(config: BrokerConfig) -> None:
    from broker.http import start_http
    from broker.server import Broker

    broker = Broker(config)
    await broker.start()
    runner = await start_http(broker)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"tmqgate ready: kafka {broker.advertised[0]}:{broker.port}, http {config.http}", flush=True)
    await stop.wait()
    logging.getLogger("tmqgate").info("shutting down")
    await runner.cleanup()
    await broker.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        config = BrokerConfig.load(args.config, listen=args.listen, http=args.http, data_dir=args.data_dir)
        asyncio.run(_serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
