"""Kafka's listeners: where the broker accepts connections and how each is secured.

As Apache Kafka's `listeners`, `advertised.listeners` and `listener.security.protocol.map`:
a listener is `NAME://HOST:PORT`; its security protocol is the map's entry for NAME, and a
name that is itself a security protocol maps to that protocol by default (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL). An empty host binds every interface; port 0 takes a free port.
An advertised listener names a listener and the address clients are told to use for it;
a listener without one is advertised at its own address (the host's name for a wildcard).
Metadata and FindCoordinator answer each client with the listener it came in on.

A TLS listener's client-certificate policy is Kafka's `listener.name.<name>.ssl.client.auth`
(`listener_ssl_client_auth[NAME]`) if given, else `ssl.client.auth` (`ssl_client_auth`) on an SSL
listener and "none" on a SASL_SSL one (KIP-684: there the unprefixed setting is ignored, with a
warning). Its certificate, key and trusted CAs are likewise its own where given
(`listener_ssl_certfile` / `listener_ssl_keyfile` / `listener_ssl_cafile`[NAME], Kafka's
`listener.name.<name>.ssl.keystore.location` / `.ssl.truststore.location`), else the broker's.
Listeners with the same settings share one `ssl.SSLContext`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from asyncio import sslproto
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tmqgate.broker.configs.config import BrokerConfig

if TYPE_CHECKING:
    from tmqgate.broker.cluster.peer import PeerSecurity

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_WILDCARDS = ("", "0.0.0.0", "::")
_LISTENER_FILES = ("ssl_certfile", "ssl_keyfile", "ssl_cafile")
_VERIFY_MODES = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}

log = logging.getLogger("tmqgate.listeners")


class ListenerError(ValueError):
    """A listener setting that cannot work (the broker refuses to start, as Kafka does)."""


@dataclass(frozen=True)
class Listener:
    name: str
    security_protocol: str
    host: str  # "" = every interface
    port: int
    ssl_client_auth: str = "none"  # a TLS listener's client-certificate policy (see the module doc)
    ssl_certfile: str | None = None  # a TLS listener's own files (None: the broker's ssl_* ones)
    ssl_keyfile: str | None = None
    ssl_cafile: str | None = None

    @property
    def tls_settings(self) -> tuple[str, str | None, str | None, str | None]:
        """What its TLS context is made of (listeners with the same share one)."""
        return self.ssl_client_auth, self.ssl_certfile, self.ssl_keyfile, self.ssl_cafile

    @property
    def tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.security_protocol in SASL_PROTOCOLS


def _split(text: str, port_optional: bool = False) -> tuple[str, str, int]:
    """NAME://HOST:PORT -> (NAME, HOST, PORT); with `port_optional` (an advertised listener)
    NAME://HOST too, whose port is 0: the listener's bound port."""
    name, sep, address = text.strip().partition("://")
    if not sep or not name:
        raise ListenerError(f"listener {text!r} is not NAME://HOST:PORT")
    if port_optional and address and (":" not in address or address.endswith("]")):
        return name.upper(), address.strip("[]"), 0
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenerError(f"listener {text!r} has no valid port")
    return name.upper(), host.strip("[]"), int(port)


def parse_listeners(config: BrokerConfig) -> list[Listener]:
    """The configured listeners; without `listeners`, one PLAINTEXT listener on `listen`."""
    protocol_map = {k.upper(): v.upper() for k, v in config.listener_security_protocol_map.items()}
    for name, protocol in protocol_map.items():
        if protocol not in SECURITY_PROTOCOLS:
            raise ListenerError(f"listener_security_protocol_map: {name} maps to unknown "
                                f"security protocol {protocol!r}")
    if not config.listeners:
        host, port = config.listen_address
        return [Listener("PLAINTEXT", "PLAINTEXT", host, port)]
    out: list[Listener] = []
    for text in config.listeners:
        name, host, port = _split(text)
        protocol = protocol_map.get(name, name if name in SECURITY_PROTOCOLS else "")
        if not protocol:
            raise ListenerError(f"listener {name} has no security protocol: add it to "
                                f"listener_security_protocol_map")
        if any(other.name == name for other in out):
            raise ListenerError(f"listener name {name} is given twice")
        if port and any(other.port == port for other in out):
            raise ListenerError(f"listeners {name} and "
                                f"{next(o.name for o in out if o.port == port)} share port {port}")
        files = {k: ({n.upper(): v for n, v in getattr(config, f"listener_{k}").items()}.get(name)
                     if protocol in TLS_PROTOCOLS else None) for k in _LISTENER_FILES}
        out.append(Listener(name, protocol, host, port, _client_auth(config, name, protocol), **files))
    for setting in ("ssl_client_auth", *_LISTENER_FILES):
        unknown = {k.upper() for k in getattr(config, f"listener_{setting}")} - {li.name for li in out}
        if unknown:
            raise ListenerError(f"listener_{setting} names {', '.join(sorted(unknown))}, not one of the "
                                f"listeners ({', '.join(li.name for li in out)})")
    for li in out:
        if li.tls and not ((li.ssl_certfile or config.ssl_certfile) and (li.ssl_keyfile or config.ssl_keyfile)):
            raise ListenerError(f"TLS listener {li.name} (SSL or SASL_SSL) needs ssl_certfile and ssl_keyfile "
                                f"(or its own listener_ssl_certfile and listener_ssl_keyfile)")
    return out


def _client_auth(config: BrokerConfig, name: str, protocol: str) -> str:
    """The listener's ssl.client.auth: its own (listener-prefixed) entry, else Kafka's rule."""
    if protocol not in TLS_PROTOCOLS:
        return "none"
    own = {k.upper(): v for k, v in config.listener_ssl_client_auth.items()}.get(name)
    if own is not None:
        return own
    if protocol == "SASL_SSL":
        if config.ssl_client_auth != "none":
            log.warning("ssl_client_auth = %r is ignored on SASL_SSL listener %s: as in Kafka, a SASL_SSL "
                        "listener takes its own listener_ssl_client_auth entry only", config.ssl_client_auth, name)
        return "none"
    return config.ssl_client_auth


def advertised_addresses(config: BrokerConfig, bound: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """Each listener's address as clients are told it, from `bound` (name -> bound host, port):
    the advertised one where given (a host without a port: the bound port), else the bound one
    (the host's name for a wildcard)."""
    out: dict[str, tuple[str, int]] = {}
    for name, (host, port) in bound.items():
        out[name] = (socket.getfqdn() if host in _WILDCARDS else host, port)
    given = list(config.advertised_listeners)
    if config.advertised_listener and not config.listeners:
        given.append(f"PLAINTEXT://{config.advertised_listener}")
    for text in given:
        old_form = "://" not in text  # the old single advertised_listener form, HOST:PORT
        if old_form:
            text = f"{next(iter(bound))}://{text}"
        name, host, port = _split(text, port_optional=not old_form)
        if name not in bound:
            raise ListenerError(f"advertised listener {name} is not one of the listeners "
                                f"({', '.join(bound)})")
        out[name] = (host or socket.getfqdn(), port or bound[name][1])
    return out


RESOLVE_TIMEOUT_S = 2.0  # how long the start-up check waits for an advertised host to resolve


async def advertised_warnings(config: BrokerConfig, advertised: dict[str, tuple[str, int]],
                              bound: dict[str, list[tuple[str, int]]]) -> list[str]:
    """What is wrong with the addresses clients are told (`advertised`, listener name -> host,
    port), each said in one line: a host that does not resolve (within RESOLVE_TIMEOUT_S), one
    that resolves to no address of this machine (loopback, or one it can bind: an interface's),
    and one of this machine where the listener is not bound (`bound`: its sockets' addresses),
    such as a config's localhost:9092 when --listen made it bind another port. Clients told
    such an address connect elsewhere, or nowhere, and wait; the broker starts anyway (a
    name may resolve only where the clients are, a port forward may lead to the listener)."""
    setting = "advertised_listener" if config.advertised_listener and not config.listeners else "advertised_listeners"
    loop = asyncio.get_running_loop()

    async def check(name: str, host: str, port: int) -> str | None:
        where = f"listener {name}: the advertised address {host}:{port}"
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            return (f"{where} does not resolve ({exc.strerror}): clients told it cannot connect; set {setting} to a "
                    "name or address of this machine that the clients resolve")
        except TimeoutError:
            return (f"{where} did not resolve within {RESOLVE_TIMEOUT_S:g} s: clients told it may not connect; set "
                    f"{setting} to a name or address of this machine that the clients resolve")
        ips = list(dict.fromkeys(str(info[4][0]) for info in infos))
        local = [ip for ip in ips if _local_address(ip)]
        if not local:
            return (f"{where} resolves to {', '.join(ips)}, not an address of this machine: clients told it connect "
                    f"there, not to this broker; set {setting} to a name or address of this machine")
        sockets = bound.get(name, [])
        if any(_accepts(bound_ip, bound_port, ip, port) for ip in local for bound_ip, bound_port in sockets):
            return None
        listening = ", ".join(_hostport(ip, p) for ip, p in sockets)
        ports = sorted({p for _, p in sockets})
        return (f"{where} resolves to {', '.join(ips)} (this machine), where the listener is not bound (it listens on "
                f"{listening}): clients told it connect elsewhere, unless a port forward leads there; set {setting} "
                f"to {_hostport(host, ports[0]) if len(ports) == 1 else 'a bound port'}, or leave it unset to "
                "advertise the bound address")

    found = await asyncio.gather(*(check(name, host, port) for name, (host, port) in advertised.items()))
    return [line for line in found if line is not None]


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _local_address(ip: str) -> bool:
    """Whether `ip` is an address of this machine: loopback, or one a socket can be bound to (an
    interface's; the wildcard is not an address clients can use)."""
    import ipaddress

    try:
        address = ipaddress.ip_address(ip.partition("%")[0])
    except ValueError:
        return False
    if address.is_loopback:
        return True
    if address.is_unspecified:
        return False
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((ip, 0))
    except OSError:
        return False
    return True


def _accepts(bound_ip: str, bound_port: int, ip: str, port: int) -> bool:
    """Whether a socket listening on bound_ip:bound_port takes connections to ip:port."""
    import ipaddress

    if bound_port != port:
        return False
    if bound_ip == ip:
        return True
    try:
        listening, target = ipaddress.ip_address(bound_ip.partition("%")[0]), ipaddress.ip_address(ip.partition("%")[0])
    except ValueError:
        return False
    # a wildcard socket takes its family's addresses (Linux's :: takes IPv4 too, dual-stack by default)
    return listening.is_unspecified and (listening.version == target.version or listening.version == 6)


def server_ssl_context(config: BrokerConfig, listener: Listener | None = None) -> ssl.SSLContext:
    """A TLS server context: TLS 1.2 or newer, the certificate, and the client-certificate policy
    of `listener` (its own settings, else the broker's; without one the broker's: the HTTP front)."""
    send_handshake_alerts()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3 if config.ssl_min_version == "TLSv1.3" else ssl.TLSVersion.TLSv1_2
    load_certificates(ctx, config, listener)
    ctx.verify_mode = _VERIFY_MODES[listener.ssl_client_auth if listener is not None else config.ssl_client_auth]
    return ctx


def peer_security(config: BrokerConfig, listener: Listener) -> PeerSecurity:
    """How this broker dials the others' ``listener`` (each broker's first, the one it
    registers): TLS checking their certificates against its CAs and presenting its own; SASL
    (``inter_broker_sasl_mechanism``) as ``inter_broker_username`` (ListenerError when a SASL listener has no such
    credentials)."""
    from tmqgate.broker.cluster.peer import PeerSecurity

    tls = None
    if listener.tls:
        tls = ssl.create_default_context(cafile=listener.ssl_cafile or config.ssl_cafile)
        certfile, keyfile = listener.ssl_certfile or config.ssl_certfile, listener.ssl_keyfile or config.ssl_keyfile
        if certfile and keyfile:  # mutual TLS: the others map its certificate to its principal
            tls.load_cert_chain(certfile, keyfile, password=config.ssl_key_password)
    sasl = None
    if listener.sasl:
        if not (config.inter_broker_username and config.inter_broker_password):
            raise ListenerError(f"the brokers of a cluster dial each other's first listener, {listener.name} "
                                f"({listener.security_protocol}): set inter_broker_username and "
                                "inter_broker_password (the brokers' user)")
        if config.inter_broker_sasl_mechanism not in config.sasl_enabled_mechanisms:
            raise ListenerError(f"inter_broker_sasl_mechanism {config.inter_broker_sasl_mechanism} must be one of "
                                f"sasl_enabled_mechanisms, which the brokers' {listener.name} listener takes "
                                f"({', '.join(config.sasl_enabled_mechanisms)})")
        sasl = (config.inter_broker_sasl_mechanism, config.inter_broker_username, config.inter_broker_password)
    return PeerSecurity(tls, sasl)


def load_certificates(ctx: ssl.SSLContext, config: BrokerConfig, listener: Listener | None = None) -> None:
    """(Re)load the certificate chain and the trusted CAs into `ctx` (`listener`'s own files where
    it has them): new handshakes use them, established connections keep theirs (what SIGHUP
    does, as Kafka's dynamic keystore update)."""
    own = listener if listener is not None else Listener("", "", "", 0)
    certfile, keyfile = own.ssl_certfile or config.ssl_certfile, own.ssl_keyfile or config.ssl_keyfile
    cafile = own.ssl_cafile or config.ssl_cafile
    assert certfile and keyfile
    ctx.load_cert_chain(certfile, keyfile, password=config.ssl_key_password)
    if cafile:
        ctx.load_verify_locations(cafile=cafile)


def send_handshake_alerts() -> None:
    """Send the TLS alert of a failed handshake before the connection is closed.

    asyncio's SSL protocol (3.11-3.13) closes the socket on a failed server handshake without
    writing what OpenSSL left in its outgoing buffer: the alert (bad_certificate,
    certificate_required, unknown_ca, ...). A Java client that gets no alert sees "connection
    terminated during authentication" and retries until its timeout, where from Apache Kafka
    it gets an SslAuthenticationException at once and stops. So the alert is written first;
    nothing else about the failure changes. Idempotent; a Python without that method is left
    as it is.
    """
    original = getattr(sslproto.SSLProtocol, "_on_handshake_complete", None)
    if original is None or getattr(original, "_sends_alert", False):
        return

    def on_handshake_complete(self: Any, handshake_exc: BaseException | None) -> None:
        if handshake_exc is not None and self._transport is not None:
            with contextlib.suppress(Exception):  # best effort: the close follows regardless
                alert = self._outgoing.read()
                if alert:
                    self._transport.write(alert)
        original(self, handshake_exc)

    on_handshake_complete._sends_alert = True  # type: ignore[attr-defined]
    sslproto.SSLProtocol._on_handshake_complete = on_handshake_complete  # type: ignore[method-assign]
