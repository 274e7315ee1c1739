"""`tmqgate` command line: `tmqgate serve` runs the broker until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import ssl
import sys
import typing
from collections.abc import Callable

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.configs.values import ConfigError

if typing.TYPE_CHECKING:
    from tmqgate.broker.server import Broker

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class StartupError(Exception):
    """A start-up failure the operator can fix: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line (the problem and where the help is), exit status 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    """The installed distribution's version (pyproject.toml's, through its metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tmqgate")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tmqgate", description=__doc__)
    parser.add_argument("--version", action="version", version=f"tmqgate {_version()}",
                        help="print tmqgate's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--listen", help="Kafka listener HOST:PORT (default 127.0.0.1:9092)")
    serve.add_argument("--http", help="HTTP listener HOST:PORT (default 127.0.0.1:6041)")
    serve.add_argument("--http-auth", choices=["none", "basic"],
                       help="the SQL front's authentication (default none; basic: the broker's users)")
    serve.add_argument("--data-dir", help="data directory (default ./data)")
    serve.add_argument("--node-id", type=int, help="this broker's node id (node_id; default 1)")
    serve.add_argument("--cluster", help="etcd://HOST:PORT[,HOST:PORT...]: join the cluster coordinated "
                       "by that etcd; local:PATH: the brokers of this machine sharing that file, no etcd "
                       "(cluster; default: one node)")
    serve.add_argument("--workers", type=int,
                       help="broker processes on this machine, each a broker of its own on the listeners' "
                            "ports + its index (workers; default 0: one per core, broker/workers.py)")
    serve.add_argument("--config", help="TOML file of broker settings")
    serve.add_argument("--log-level", type=str.upper, default="INFO", choices=LOG_LEVELS,
                       help="the least severe log lines written to stderr (default INFO; DEBUG adds "
                            "connections and requests)")
    serve.add_argument("--log-format", default="text", choices=["text", "json"],
                       help="text lines, or one JSON object per line for log shippers (default text)")
    sql = sub.add_parser("sql", help="run SQL statements on a running broker (its HTTP endpoint)")
    sql.add_argument("statement", help="one or more statements separated by ';', or - to read them from stdin "
                                        "(tmqgate sql - < setup.sql)")
    sql.add_argument("--http", default="127.0.0.1:6041",
                     help="the broker's HTTP address HOST:PORT, or https://HOST:PORT (default 127.0.0.1:6041)")
    sql.add_argument("--cafile", help="CA certificates to check an https:// front's certificate with")
    sql.add_argument("--db", help="database for unqualified names (as after USE db)")
    sql.add_argument("--json", action="store_true", help="print the raw JSON answer")
    sql.add_argument("--user", help="HTTP Basic user (password from $TMQGATE_PASSWORD, else prompted for on the "
                                    "terminal)")
    _user_parsers(sub)
    return parser


def _user_parsers(sub: argparse._SubParsersAction[_Parser]) -> None:
    """`tmqgate user add|list|delete`: SCRAM users of a data directory, with no broker running
    (the first admin; online, use kafka-configs --entity-type users)."""
    user = sub.add_parser("user", help="SCRAM users of a data directory (offline: the broker must be stopped)")
    verbs = user.add_subparsers(dest="verb", required=True)
    add = verbs.add_parser("add", help="create or replace a user's credential (password read from stdin)")
    add.add_argument("name")
    add.add_argument("--mechanism", default="SCRAM-SHA-512", choices=["SCRAM-SHA-512", "SCRAM-SHA-256"])
    add.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations, 4096..16384 (default 4096)")
    delete = verbs.add_parser("delete", help="remove a user's credentials (all mechanisms unless --mechanism)")
    delete.add_argument("name")
    delete.add_argument("--mechanism", choices=["SCRAM-SHA-512", "SCRAM-SHA-256"])
    listing = verbs.add_parser("list", help="users and their mechanisms and iterations")
    for p in (add, delete, listing):
        p.add_argument("--data-dir", required=True, help="the broker's data directory")


def _user_data_dir_refused(verb: str, path: str, holds_store: bool) -> str | None:
    """Why `tmqgate user <verb>` refuses the data directory `path` (None: it does not): list and
    delete need a broker's store there; add needs the directory (it may be empty, the store
    made there before the broker's first start), so a misspelt one makes nothing anywhere."""
    import os

    if holds_store:
        return None
    if not os.path.exists(path):
        if verb == "add":
            return (f"the data directory {path} does not exist: create it (mkdir -p {path}) or start the broker "
                    f"once with --data-dir {path}, then add the user")
        return f"the data directory {path} does not exist: give --data-dir the broker's data directory (data_dir)"
    if not os.path.isdir(path):
        return f"the data directory {path} is a file, not a directory: give --data-dir the broker's data directory"
    if verb != "add":
        return (f"{path} is not a tmqgate data directory (no store in it): give --data-dir the broker's data "
                "directory (data_dir)")
    return None


def _user(args: argparse.Namespace) -> int:
    from tmqgate.broker.auth import scram
    from tmqgate.storage import StorageError, Store

    refused = _user_data_dir_refused(args.verb, args.data_dir, Store.exists(args.data_dir))
    if refused:
        print(f"tmqgate user: {refused}", file=sys.stderr)
        return 2
    password = ""
    if args.verb == "add":
        try:
            scram.check_iterations(args.iterations)
        except ValueError as exc:
            print(f"tmqgate user: {exc}", file=sys.stderr)
            return 2
        if sys.stdin.isatty():
            import getpass

            password = getpass.getpass(f"password for {args.name}: ")
        else:
            password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            print("tmqgate user: empty password (give it on stdin)", file=sys.stderr)
            return 2
    try:
        store = Store(args.data_dir)
    except (StorageError, OSError) as exc:
        if "lock" in str(exc).lower():
            print(f"tmqgate user: the data directory {args.data_dir} is in use (a running broker holds its "
                  "lock): stop the broker, or change users online with kafka-configs --entity-type users",
                  file=sys.stderr)
        else:
            print(f"tmqgate user: cannot open the data directory {args.data_dir}: {exc}", file=sys.stderr)
        return 1
    with store:
        joined = store.joined_cluster()
        if joined is not None and args.verb != "list":  # on a cluster, users are the cluster's (etcd's)
            print(f"tmqgate user: this node is a member of cluster {joined}, whose users every broker takes: "
                  + ("this user is offered to the cluster when the broker starts" if args.verb == "add" else
                     "a user deleted offline comes back from the cluster; delete it online (kafka-configs "
                     "--entity-type users --delete-config) so every broker drops it"), file=sys.stderr)
        if args.verb == "add":
            store.users.put_scram(args.name, args.mechanism,
                                  scram.make_credential(args.mechanism, password, args.iterations))
            if joined is not None:
                store.set_joined_cluster(None)  # what it holds is offered again at its next join
            store.sync()
            print(f"user {args.name}: {args.mechanism} credential stored ({args.iterations} iterations)")
        elif args.verb == "delete":
            if args.mechanism:
                n = int(store.users.delete_scram(args.name, args.mechanism))
            else:
                n = store.users.delete_user(args.name)
            store.sync()
            if not n:
                print(f"tmqgate user: no such user credential: {args.name}", file=sys.stderr)
                return 1
            print(f"user {args.name}: {n} credential(s) deleted")
        else:
            for name, creds in store.users.scram_users().items():
                mechs = ",".join(f"{m}=iterations={c.iterations}" for m, c in sorted(creds.items()))
                print(f"{name}\t{mechs}")
    return 0


def _sql(args: argparse.Namespace) -> int:
    """POST the statement to /rest/sql and print the answer as the taos shell does (or the error)."""
    import json
    import ssl
    import urllib.error
    import urllib.request

    statement = sys.stdin.read() if args.statement == "-" else args.statement
    if not statement.strip():
        print("tmqgate sql: no statement" + (" on stdin" if args.statement == "-" else ""), file=sys.stderr)
        return 2
    base = args.http if args.http.startswith(("http://", "https://")) else f"http://{args.http}"
    url = f"{base}/rest/sql" + (f"/{args.db}" if args.db else "")
    request = urllib.request.Request(url, data=statement.encode(), method="POST")
    if args.user:
        import base64
        import os

        password = os.environ.get("TMQGATE_PASSWORD")
        if password is None:
            password = _ask_password(args.user)
        if password is None:
            print(f"tmqgate sql: --user {args.user} needs a password: set TMQGATE_PASSWORD, or run tmqgate sql in a "
                  "terminal to be asked for it", file=sys.stderr)
            return 2
        token = base64.b64encode(f"{args.user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=args.cafile) if url.startswith("https://") else None
    try:
        with urllib.request.urlopen(request, timeout=300, context=context) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            answer = json.loads(body)
        except ValueError:  # not the SQL front's JSON (a proxy, a wrong port, a crash page)
            text = " ".join(body.decode(errors="replace").split())[:500]
            print(f"tmqgate sql: {url} answered HTTP {exc.code} {exc.reason}: {text or '(empty body)'}",
                  file=sys.stderr)
            return 1
        if not isinstance(answer, dict):
            print(f"tmqgate sql: {url} answered HTTP {exc.code} {exc.reason}: {body.decode(errors='replace')[:500]}",
                  file=sys.stderr)
            return 1
    except OSError as exc:
        print(f"tmqgate sql: cannot reach {url}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(answer))
        return 0 if answer.get("code") == 0 else 1
    if answer.get("code") != 0:
        print(f"error {answer.get('code')}: {answer.get('desc')}", file=sys.stderr)
        return 1
    _print_answer(answer, _last_keyword(statement))
    return 0


def _ask_password(user: str) -> str | None:
    """The password typed on the terminal (not echoed); None when there is no terminal to ask
    on (stdin may be the statements, never a password) or nothing was typed before end of file."""
    import getpass
    import os

    try:  # getpass asks on /dev/tty; without one it would read stdin (or fail on its end)
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY))
    except OSError:
        if not sys.stdin.isatty():  # (a system without /dev/tty: its console, if stdin is one)
            return None
    try:
        return getpass.getpass(f"password for {user}: ")
    except EOFError:
        return None


def _last_keyword(text: str) -> str:
    """The first word of the last statement of `text` (statements separated by ';' outside
    quotes; comments skipped), upper-cased: the statement the answer is about."""
    statements: list[str] = []
    current: list[str] = []
    quote = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote is not None:
            quote = None if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            current.append(" ")
            continue
        elif ch == ";":
            statements.append("".join(current))
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    statements.append("".join(current))
    words = [part.split() for part in statements if part.strip()]
    return words[-1][0].upper() if words else ""


#: The statements whose answer is rows, printed as a table even when its one column is
#: named affected_rows (which otherwise marks a DDL or INSERT answer, TDengine's REST shape).
_ROW_STATEMENTS = ("SELECT", "SHOW", "DESCRIBE", "DESC")
#: How the taos shell says what a statement without rows did ("Query OK" for the others).
_DONE = {"CREATE": "Create", "INSERT": "Insert", "DROP": "Drop"}


def _print_answer(answer: dict[str, typing.Any], keyword: str) -> None:
    """As the taos shell prints it: "Create OK, 0 row(s) affected" (Insert, Drop; Query for
    other statements) for an answer that is TDengine's affected_rows, else the rows as a table
    (TIMESTAMP values in local time, YYYY-MM-DD HH:MM:SS.mmm) and "Query OK, N row(s) in set"."""
    meta = [list(c) for c in answer["column_meta"]]
    if meta == [["affected_rows", "INT", 4]] and keyword not in _ROW_STATEMENTS:
        affected = answer["data"][0][0] if answer["data"] else 0
        print(f"{_DONE.get(keyword, 'Query')} OK, {affected} row(s) affected")
        return
    names = [c[0] for c in meta]
    rows = [[_cell(v, c[1]) for v, c in zip(row, meta, strict=True)] for row in answer["data"]]
    widths = [max([len(n)] + [len(r[i]) for r in rows]) for i, n in enumerate(names)]
    print(" | ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    print(f"Query OK, {answer['rows']} row(s) in set")


def _cell(value: object, kind: str) -> str:
    if value is None:
        return "NULL"
    if kind == "TIMESTAMP":
        return _timestamp(value)
    return str(value)


def _timestamp(value: object) -> str:
    """A TIMESTAMP as the taos shell shows it, YYYY-MM-DD HH:MM:SS.mmm in local time, from epoch
    milliseconds (tmqgate's REST answer) or an ISO 8601 / RFC 3339 text (taosAdapter's); anything
    else as it came."""
    import datetime

    try:
        if isinstance(value, int) and not isinstance(value, bool):
            moment = datetime.datetime.fromtimestamp(value // 1000)
            millis = value % 1000
        elif isinstance(value, str):
            moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is not None:
                moment = moment.astimezone()
            millis = moment.microsecond // 1000
        else:
            return str(value)
    except (ValueError, OverflowError, OSError):
        return str(value)
    return f"{moment:%Y-%m-%d %H:%M:%S}.{millis:03d}"


def _preflight(config: BrokerConfig) -> None:
    """What can be checked before anything is created on disk: the data directory is not a file,
    and every port the broker will listen on is free (a port that is taken would otherwise be
    found only after the data directory was made)."""
    import errno
    import os
    import socket

    from tmqgate.broker.network.listeners import ListenerError, parse_listeners

    path = config.data_dir
    if os.path.exists(path) and not os.path.isdir(path):
        raise StartupError(f"the data directory {path} is a file, not a directory: give --data-dir "
                           "(data_dir) a directory, or move the file away")
    try:
        listeners = parse_listeners(config)
    except ListenerError as exc:
        raise StartupError(f"{exc}") from None
    wanted = [(f"Kafka listener {li.name}", li.host, li.port, "--listen (listen / listeners)") for li in listeners]
    wanted.append(("HTTP SQL front", *config.http_address, "--http (http)"))
    for what, host, port, setting in wanted:
        if not port:
            continue
        try:
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise StartupError(f"cannot listen on {host}:{port} ({what}): {exc.strerror}: give {setting} "
                               "an address of this host") from None
        for family, kind, proto, _, address in infos[:1]:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(address)
                except OSError as exc:
                    hint = ("stop what uses it or choose another port" if exc.errno == errno.EADDRINUSE
                            else "give an address of this host")
                    raise StartupError(f"cannot listen on {host}:{port} ({what}): {exc.strerror}: {hint} "
                                       f"with {setting}") from None


def _missing_ancestor(path: str) -> str | None:
    """The topmost folder of `path` that does not exist yet (what start-up would create), or None."""
    import os

    path = os.path.abspath(path)
    top = None
    while not os.path.exists(path):
        top = path
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return top


async def _serve(config: BrokerConfig, log_format: str = "text", siblings: tuple[int, ...] = ()) -> None:
    """Run one broker until SIGTERM or SIGINT; ``siblings``: the other workers' node ids on a
    worker of `serve --workers N`, whose `/metrics` it merges with its own and whose start its
    controller awaits (broker/cluster/membership.py)."""
    from tmqgate.broker.network.http import FrontLimits, make_app, start_http
    from tmqgate.broker.network.limits import (
        RESERVED_DESCRIPTORS,
        accept_error_handler,
        raise_descriptor_limit,
    )
    from tmqgate.broker.network.listeners import advertised_warnings, server_ssl_context
    from tmqgate.broker.ops.logs import event_line
    from tmqgate.broker.server import Broker
    from tmqgate.storage import StorageError

    _preflight(config)
    # descriptors: the Kafka listeners' share, the HTTP front's and the broker's own (broker/network/limits.py)
    _, short = raise_descriptor_limit(config.max_connections + config.http_max_connections + RESERVED_DESCRIPTORS)
    if short is not None:
        logging.getLogger("tmqgate").warning("%s", short)
    created = _missing_ancestor(config.data_dir)
    try:
        broker = Broker(config, siblings)
    except (StorageError, OSError) as exc:
        _remove(created)
        detail = exc.args[-1] if exc.args else exc
        detail = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
        if "IO error: lock " in detail:  # LevelDB's LOCK file: held by another process (or this one)
            raise StartupError(f"the data directory {config.data_dir} is in use by another tmqgate (its LevelDB "
                               "LOCK is held): stop that broker, or give this one another --data-dir") from None
        raise StartupError(f"cannot open the data directory {config.data_dir}: {detail}") from None
    try:
        await broker.start()
    except (OSError, ValueError) as exc:
        await broker.stop()
        _remove(created)
        if config.cluster is not None:
            from tmqgate.broker.cluster.membership import EtcdUnreachable

            if isinstance(exc, EtcdUnreachable):  # its text says which endpoints and why
                raise StartupError(str(exc)) from None
        raise StartupError(f"cannot start the broker: {exc}") from None
    # accept() out of descriptors: one line per interval, not a traceback per try
    asyncio.get_running_loop().set_exception_handler(accept_error_handler(broker.limited_log))
    authenticate = None
    if config.http_auth == "basic":  # HTTP Basic against the SCRAM users, as SASL/PLAIN
        from tmqgate.broker.auth.plain import verify_password_async

        async def authenticate(user: str, password: str) -> bool:  # PBKDF2 off the event loop
            return await verify_password_async(broker.store.users.scram, user, password, asyncio.to_thread)

    try:
        runner = await start_http(make_app(broker.executor, broker.store, broker.topics, config.node_id,
                                           max_body_bytes=config.max_sql_length, served_as=config.http,
                                           allowed_hosts=config.http_allowed_hosts, authenticate=authenticate,
                                           metrics=broker.metrics, metrics_auth=config.metrics_auth,
                                           metrics_acl_filter=config.metrics_acl_filter,
                                           failed_auth_delay_ms=config.connection_failed_authentication_delay_ms,
                                           sibling_fronts=_fronts(broker, siblings) if siblings else None,
                                           sibling_tls=ssl.create_default_context(cafile=config.ssl_cafile)
                                           if siblings and config.http_tls else None, sync=broker.membership),
                                  config.http_address,
                                  server_ssl_context(config) if config.http_tls else None,
                                  FrontLimits(config.http_max_connections, config.http_header_timeout_ms / 1000,
                                              config.http_idle_timeout_ms / 1000, broker.limited_log))
    except OSError as exc:
        await broker.stop()
        _remove(created)
        raise StartupError(f"cannot listen on {config.http} (HTTP SQL front): {exc.strerror or exc}: stop what "
                           "uses it or choose another port with --http (http)") from None
    for line in await advertised_warnings(config, broker.advertised_by_listener, broker.bound_addresses):
        logging.getLogger("tmqgate.listeners").warning("%s", line, extra={"event": "advertised_address"})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, broker.reload_certificates)
    read_only = broker.store.read_only
    note = f" (READ-ONLY until there is room: {read_only})" if read_only else ""
    kafka = [f"{name}://{host}:{port}" for name, (host, port) in broker.advertised_by_listener.items()]
    # stdout's one line, which tests and tools wait for; under --log-format json a JSON object
    # (its message still begins "tmqgate ready: kafka ...")
    extra: dict[str, object] = {"read_only": read_only} if read_only else {}
    http = config.http
    if config.http_address[1] == 0 and runner.addresses:  # port 0: the one it was given
        http = f"{config.http.rpartition(':')[0]}:{runner.addresses[0][1]}"
    print(event_line(log_format, "tmqgate", f"tmqgate ready: kafka {', '.join(kafka)}, http {http}{note}",
                     event="ready", kafka=kafka, http=http, **extra), flush=True)
    await stop.wait()
    _ignore_further_stops(loop)
    logging.getLogger("tmqgate").info("shutting down")
    _report_slow_stop(loop)
    await runner.cleanup()
    await broker.stop()


def _ignore_further_stops(loop: asyncio.AbstractEventLoop) -> None:
    """Once the stop began, SIGTERM and SIGINT are ignored until the process ends. The loop's
    handlers would otherwise be removed when it closes, leaving the default action (end the
    process) for the rest of the exit; a second SIGTERM then killed a worker that had stopped
    cleanly (exit -15): a process group's SIGTERM (systemd's, a test's `killpg`, Ctrl-C's
    SIGINT) reaches each worker and the supervisor, which sends its own a moment later, and
    under load that moment came after the worker's loop had closed (CI: `tmqgate serve`
    exited 15)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)


#: a graceful stop still running after this long prints where it waits (`_report_slow_stop`)
SLOW_STOP_S = 15.0


def _report_slow_stop(loop: asyncio.AbstractEventLoop, after_s: float = SLOW_STOP_S) -> None:
    """Once the stop began: if the process is still here `after_s` later, write every thread's
    stack and every pending asyncio task's to stderr (the serve log), so a stop that hangs (CI
    once saw a worker killed after the supervisor's STOP_WAIT_S) says what it waits on. A
    daemon timer: a stop that ends in time ends it with the process."""
    import faulthandler
    import threading

    def report() -> None:
        print(f"tmqgate: the stop has taken over {after_s:.0f} s; its threads and tasks:", file=sys.stderr,
              flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        try:
            for task in list(asyncio.all_tasks(loop)):  # racy from this thread; good enough to read
                task.print_stack(limit=8, file=sys.stderr)
        except RuntimeError as exc:  # the set changed while read, or the loop is closed
            print(f"(tasks not listed: {exc})", file=sys.stderr)
        sys.stderr.flush()

    timer = threading.Timer(after_s, report)
    timer.daemon = True
    timer.start()


def _fronts(broker: Broker, nodes: tuple[int, ...]) -> Callable[[], list[str]]:
    """The HTTP fronts the cluster's registrations give for these nodes, read when asked."""
    def fronts() -> list[str]:
        brokers = broker.membership.view.brokers
        return [brokers[n].http for n in nodes if n in brokers and brokers[n].http]

    return fronts


def serve_worker(config: BrokerConfig, siblings: tuple[int, ...], log_format: str, log_level: str) -> None:
    """One worker of `serve --workers N` (broker/workers.py), in its own process."""
    from tmqgate.broker.ops.logs import setup_logging

    setup_logging(log_level, log_format)
    try:
        asyncio.run(_serve(config, log_format, siblings))
    except StartupError as exc:
        print(f"tmqgate: worker node {config.node_id}: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)


def _remove(created: str | None) -> None:
    """Undo the folders a failed start-up made (only those: `created` did not exist before)."""
    if created:
        import shutil

        shutil.rmtree(created, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from tmqgate.broker.ops.logs import setup_logging

    setup_logging(getattr(args, "log_level", "WARNING"), getattr(args, "log_format", "text"))
    if args.command == "sql":
        return _sql(args)
    if args.command == "user":
        return _user(args)
    try:
        config = BrokerConfig.load(args.config, listen=args.listen, http=args.http, data_dir=args.data_dir,
                                   http_auth=args.http_auth, node_id=args.node_id, cluster=args.cluster,
                                   workers=args.workers)
        from tmqgate.broker.workers import Supervisor, resolve

        workers = resolve(config)
        if workers > 1:
            return Supervisor(config, workers, serve_worker, args.log_format, args.log_level).run()
        asyncio.run(_serve(config, args.log_format))
    except (ConfigError, StartupError) as exc:  # refused before anything starts: one line, exit 2
        print(f"tmqgate: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
