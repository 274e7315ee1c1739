"""Kafka's listeners: where the broker accepts connections and how each is secured.

As Apache Kafka's `listeners`, `advertised.listeners` and `listener.security.protocol.map`:
a listener is `NAME://HOST:PORT`; its security protocol is the map's entry for NAME, and a
name that is itself a security protocol maps to that protocol by default (PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL). An empty host binds every interface; port 0 takes a free port.
An advertised listener names a listener and the address clients are told to use for it;
a listener without one is advertised at its own address (the host's name for a wildcard).
Metadata and FindCoordinator answer each client with the listener it came in on.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

from tmqgate.broker.config import BrokerConfig

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_WILDCARDS = ("", "0.0.0.0", "::")


class ListenerError(ValueError):
    """A listener setting that cannot work (the broker refuses to start, as Kafka does)."""


@dataclass(frozen=True)
class Listener:
    name: str
    security_protocol: str
    host: str  # "" = every interface
    port: int

    @property
    def tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.security_protocol in SASL_PROTOCOLS


def _split(text: str) -> tuple[str, str, int]:
    name, sep, address = text.strip().partition("://")
    if not sep or not name:
        raise ListenerError(f"listener {text!r} is not NAME://HOST:PORT")
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
        out.append(Listener(name, protocol, host, port))
    if any(li.tls for li in out) and not (config.ssl_certfile and config.ssl_keyfile):
        raise ListenerError("a TLS listener (SSL or SASL_SSL) needs ssl_certfile and ssl_keyfile")
    return out


def advertised_addresses(config: BrokerConfig, bound: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """Each listener's address as clients are told it, from `bound` (name -> bound host, port)."""
    out: dict[str, tuple[str, int]] = {}
    for name, (host, port) in bound.items():
        out[name] = (socket.getfqdn() if host in _WILDCARDS else host, port)
    given = list(config.advertised_listeners)
    if config.advertised_listener and not config.listeners:
        given.append(f"PLAINTEXT://{config.advertised_listener}")
    for text in given:
        if "://" not in text:  # the old single advertised_listener form, HOST:PORT
            text = f"{next(iter(bound))}://{text}"
        name, host, port = _split(text)
        if name not in bound:
            raise ListenerError(f"advertised listener {name} is not one of the listeners "
                                f"({', '.join(bound)})")
        out[name] = (host or socket.getfqdn(), port or bound[name][1])
    return out


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The TLS context every TLS listener shares: TLS 1.2 or newer, the broker's certificate,
    and the client-certificate policy of `ssl_client_auth` (Kafka's ssl.client.auth)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3 if config.ssl_min_version == "TLSv1.3" else ssl.TLSVersion.TLSv1_2
    load_certificates(ctx, config)
    ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                       "none": ssl.CERT_NONE}[config.ssl_client_auth]
    return ctx


def load_certificates(ctx: ssl.SSLContext, config: BrokerConfig) -> None:
    """(Re)load the certificate chain and the trusted CAs into `ctx`: new handshakes use them,
    established connections keep theirs (what SIGHUP does, as Kafka's dynamic keystore update)."""
    assert config.ssl_certfile and config.ssl_keyfile
    ctx.load_cert_chain(config.ssl_certfile, config.ssl_keyfile, password=config.ssl_key_password)
    if config.ssl_cafile:
        ctx.load_verify_locations(cafile=config.ssl_cafile)
