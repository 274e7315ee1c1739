"""Listener settings and certificate principals (broker/network/listeners.py, broker/identity/principal.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.configs.values import ConfigError
from tmqgate.broker.identity.principal import NoMatchingRule, certificate_principal, parse_rules, subject_name
from tmqgate.broker.network.listeners import Listener, ListenerError, advertised_addresses, parse_listeners


def test_default_is_one_plaintext_listener_on_listen() -> None:
    assert parse_listeners(BrokerConfig(listen="127.0.0.1:19092")) == [
        Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 19092)]


def test_listeners_take_their_protocol_from_name_or_map() -> None:
    cfg = BrokerConfig(listeners=["PLAINTEXT://127.0.0.1:1", "internal://:2", "SASL_SSL://[::1]:3"],
                       listener_security_protocol_map={"INTERNAL": "SASL_PLAINTEXT"},
                       ssl_certfile="c", ssl_keyfile="k")
    assert parse_listeners(cfg) == [Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 1),
                                    Listener("INTERNAL", "SASL_PLAINTEXT", "", 2),
                                    Listener("SASL_SSL", "SASL_SSL", "::1", 3)]


@pytest.mark.parametrize(("listeners", "protocol_map", "message"), [
    (["OTHER://127.0.0.1:1"], {}, "no security protocol"),
    (["PLAINTEXT://127.0.0.1:1", "PLAINTEXT://127.0.0.1:2"], {}, "given twice"),
    (["PLAINTEXT://127.0.0.1:1", "SASL_PLAINTEXT://127.0.0.1:1"], {}, "share port 1"),
    (["PLAINTEXT://127.0.0.1"], {}, "no valid port"),
    (["127.0.0.1:9092"], {}, "NAME://HOST:PORT"),
    (["SSL://127.0.0.1:1"], {}, "needs ssl_certfile"),
    (["X://127.0.0.1:1"], {"X": "KERBEROS"}, "unknown security protocol"),
])
def test_bad_listener_settings_refuse_start(listeners: list[str], protocol_map: dict[str, str],
                                            message: str) -> None:
    with pytest.raises(ListenerError, match=message):
        parse_listeners(BrokerConfig(listeners=listeners, listener_security_protocol_map=protocol_map))


def test_ssl_client_auth_per_listener() -> None:
    """listener_ssl_client_auth is Kafka's listener.name.<name>.ssl.client.auth; without an entry
    an SSL listener takes ssl_client_auth and a SASL_SSL one "none" (KIP-684)."""
    cfg = BrokerConfig(listeners=["PLAINTEXT://:1", "MTLS://:2", "OPEN://:3", "SSL://:4", "SASL_SSL://:5",
                                  "SECURE://:6"],
                       listener_security_protocol_map={"MTLS": "SSL", "OPEN": "SSL", "SECURE": "SASL_SSL"},
                       listener_ssl_client_auth={"mtls": "required", "OPEN": "none", "SECURE": "required"},
                       ssl_client_auth="requested", ssl_certfile="c", ssl_keyfile="k")
    assert {li.name: li.ssl_client_auth for li in parse_listeners(cfg)} == {
        "PLAINTEXT": "none", "MTLS": "required", "OPEN": "none", "SSL": "requested", "SASL_SSL": "none",
        "SECURE": "required"}
    own = BrokerConfig(listeners=["A://:1", "B://:2", "PLAINTEXT://:3"],
                       listener_security_protocol_map={"A": "SSL", "B": "SASL_SSL", "PLAINTEXT": "PLAINTEXT"},
                       listener_ssl_certfile={"a": "a.pem", "PLAINTEXT": "p.pem"}, listener_ssl_keyfile={"A": "a.key"},
                       listener_ssl_cafile={"B": "b-ca.pem"}, ssl_certfile="c", ssl_keyfile="k")
    assert [(li.name, li.ssl_certfile, li.ssl_keyfile, li.ssl_cafile) for li in parse_listeners(own)] == [
        ("A", "a.pem", "a.key", None), ("B", None, None, "b-ca.pem"), ("PLAINTEXT", None, None, None)]
    with pytest.raises(ListenerError, match="TLS listener A .* needs ssl_certfile"):
        parse_listeners(BrokerConfig(listeners=["A://:1"], listener_security_protocol_map={"A": "SSL"},
                                     listener_ssl_certfile={"A": "a.pem"}))
    assert parse_listeners(BrokerConfig(listeners=["A://:1"], listener_security_protocol_map={"A": "SSL"},
                                        listener_ssl_certfile={"A": "a.pem"}, listener_ssl_keyfile={"A": "a.key"}))
    with pytest.raises(ListenerError, match="listener_ssl_client_auth names OTHER"):
        parse_listeners(BrokerConfig(listeners=["SSL://:1"], listener_ssl_client_auth={"OTHER": "none"},
                                     ssl_certfile="c", ssl_keyfile="k"))


def test_advertised_listeners() -> None:
    cfg = BrokerConfig(listeners=["PLAINTEXT://0.0.0.0:0", "SASL_SSL://127.0.0.1:0"],
                       advertised_listeners=["PLAINTEXT://broker1.example:9092"])
    bound = {"PLAINTEXT": ("0.0.0.0", 40001), "SASL_SSL": ("127.0.0.1", 40002)}
    assert advertised_addresses(cfg, bound) == {"PLAINTEXT": ("broker1.example", 9092),
                                                "SASL_SSL": ("127.0.0.1", 40002)}
    with pytest.raises(ListenerError, match="not one of the listeners"):
        advertised_addresses(BrokerConfig(advertised_listeners=["SSL://h:1"]), {"PLAINTEXT": ("h", 1)})
    # the single-listener form of before: HOST:PORT for `listen`
    assert advertised_addresses(BrokerConfig(advertised_listener="kafka.example:19092"),
                                {"PLAINTEXT": ("127.0.0.1", 5)}) == {"PLAINTEXT": ("kafka.example", 19092)}


def test_an_advertised_host_without_a_port_is_told_with_the_bound_port() -> None:
    """NAME://HOST (advertised_listeners) and HOST (advertised_listener): the bound port, so a
    --listen port change is told as bound. The old single form in advertised_listeners
    (HOST:PORT, no NAME://) still needs its port."""
    bound = {"PLAINTEXT": ("127.0.0.1", 29192), "SASL_SSL": ("0.0.0.0", 29193)}
    cfg = BrokerConfig(listeners=["PLAINTEXT://127.0.0.1:0", "SASL_SSL://0.0.0.0:0"],
                       advertised_listeners=["SASL_SSL://broker.example.com", "PLAINTEXT://[::1]"])
    assert advertised_addresses(cfg, bound) == {"PLAINTEXT": ("::1", 29192), "SASL_SSL": ("broker.example.com", 29193)}
    assert advertised_addresses(BrokerConfig.load(None, environ={}, advertised_listener="localhost"),
                                {"PLAINTEXT": ("127.0.0.1", 29192)}) == {"PLAINTEXT": ("localhost", 29192)}
    with pytest.raises(ListenerError, match="no valid port"):
        advertised_addresses(BrokerConfig(advertised_listeners=["NOPE"]), {"PLAINTEXT": ("127.0.0.1", 1)})
    with pytest.raises(ConfigError, match="advertised_listener = 'a b' is not HOST:PORT or HOST"):
        BrokerConfig.load(None, environ={}, advertised_listener="a b")


@pytest.mark.parametrize(("advertised", "sockets", "warning"), [
    (("127.0.0.1", 29192), [("127.0.0.1", 29192)], None),
    (("localhost", 29192), [("0.0.0.0", 29192)], None),  # a wildcard socket takes loopback too
    (("192.0.2.7", 9092), [("0.0.0.0", 9092)],  # TEST-NET-1: no machine's address
     "listener PLAINTEXT: the advertised address 192.0.2.7:9092 resolves to 192.0.2.7, not an address of this "
     "machine: clients told it connect there, not to this broker; set advertised_listener to a name or address "
     "of this machine"),
    (("127.0.0.1", 9092), [("127.0.0.1", 29192)],
     "listener PLAINTEXT: the advertised address 127.0.0.1:9092 resolves to 127.0.0.1 (this machine), where the "
     "listener is not bound (it listens on 127.0.0.1:29192): clients told it connect elsewhere, unless a port "
     "forward leads there; set advertised_listener to 127.0.0.1:29192, or leave it unset to advertise the "
     "bound address"),
    (("name.invalid", 9092), [("0.0.0.0", 9092)], "listener PLAINTEXT: the advertised address name.invalid:9092 "
     "does not resolve ({reason}): clients told it cannot connect; set advertised_listener to a name or address "
     "of this machine that the clients resolve"),
])
def test_advertised_warnings(advertised: tuple[str, int], sockets: list[tuple[str, int]],
                             warning: str | None) -> None:
    import asyncio
    import socket

    from tmqgate.broker.network.listeners import advertised_warnings

    cfg = BrokerConfig(advertised_listener=f"{advertised[0]}:{advertised[1]}")
    found = asyncio.run(advertised_warnings(cfg, {"PLAINTEXT": advertised}, {"PLAINTEXT": sockets}))
    if warning and "{reason}" in warning:
        try:
            socket.getaddrinfo(advertised[0], advertised[1])
        except socket.gaierror as exc:
            warning = warning.format(reason=exc.strerror)
    assert found == ([warning] if warning else [])


def test_certificate_principal_and_mapping_rules(tmp_path: Path) -> None:
    from compat_tests.certs import CLIENT_SUBJECT, make_certs

    certs = make_certs(tmp_path)
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    der = x509.load_pem_x509_certificate(Path(certs.cert("client")).read_bytes()).public_bytes(Encoding.DER)
    assert subject_name(der) == CLIENT_SUBJECT == "CN=alice,OU=eng,O=tmqgate-test"
    assert certificate_principal(der, parse_rules(["DEFAULT"])) == "User:CN=alice,OU=eng,O=tmqgate-test"
    rules = parse_rules([r"RULE:^CN=(.*?),OU=(.*?),O=(.*)$/$1@$2/U", "DEFAULT"])
    assert certificate_principal(der, rules) == "User:ALICE@ENG"
    rules = parse_rules([r"RULE:^CN=bob,.*$/bob/", r"RULE:^CN=([^,]*),.*$/$1/L"])
    assert certificate_principal(der, rules) == "User:alice"
    with pytest.raises(NoMatchingRule):
        certificate_principal(der, parse_rules([r"RULE:^CN=bob,.*$/bob/"]))
    with pytest.raises(ValueError, match="invalid ssl_principal_mapping_rules"):
        parse_rules(["RULE:nope"])
    with pytest.raises(ValueError, match="invalid ssl_principal_mapping_rules"):
        BrokerConfig.load(None, ssl_principal_mapping_rules=["RULE:nope"])
