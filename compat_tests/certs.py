"""Test certificates, made at test time with the `cryptography` package.

`make_certs(dir)` writes a CA, a server certificate for 127.0.0.1/localhost signed by it,
client certificates (a good one, an expired one, and one signed by a CA the broker does not
trust), each as PEM files: `<name>.pem` (certificate), `<name>.key` (PKCS#8 key) and
`<name>-keystore.pem` (key then certificate, the PEM keystore Kafka's
`ssl.keystore.type=PEM` reads). `tls_config` gives the same TLS settings for both brokers.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_SUBJECT = "CN=localhost,O=tmqgate-test"
CLIENT_SUBJECT = "CN=alice,OU=eng,O=tmqgate-test"  # as RFC 2253 gives it: most specific first


@dataclass(frozen=True)
class Certs:
    dir: Path

    def cert(self, name: str) -> str:
        return str(self.dir / f"{name}.pem")

    def key(self, name: str) -> str:
        return str(self.dir / f"{name}.key")

    def keystore(self, name: str) -> str:
        return str(self.dir / f"{name}-keystore.pem")

    @property
    def ca(self) -> str:
        return self.cert("ca")


def _name(rfc2253: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME}
    # RFC 2253 lists the most specific RDN first; a certificate's sequence is the other way round.
    rdns = [x509.NameAttribute(oids[k], v) for k, _, v in (part.partition("=") for part in rfc2253.split(","))]
    return x509.Name(list(reversed(rdns)))


def _issue(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey,
           *, ca: bool = False, server: bool = False, not_after: dt.datetime | None = None,
           serial: int | None = None) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(serial or x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(days=2))
               .not_valid_after(not_after or now + dt.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                        critical=True)
    else:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(certs: Certs, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    Path(certs.cert(name)).write_bytes(cert_pem)
    Path(certs.key(name)).write_bytes(key_pem)
    Path(certs.keystore(name)).write_bytes(key_pem + cert_pem)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def make_certs(directory: Path) -> Certs:
    """CA `ca`, server `server`, clients `client` (CLIENT_SUBJECT), `expired` (expired
    yesterday), `untrusted` (signed by `other-ca`, which the broker does not trust)."""
    directory.mkdir(parents=True, exist_ok=True)
    certs = Certs(directory)
    ca_key, other_key = _new_key(), _new_key()
    ca = _issue("CN=tmqgate-test-ca,O=tmqgate-test", ca_key, _name("CN=tmqgate-test-ca,O=tmqgate-test"),
                ca_key, ca=True)
    other = _issue("CN=other-ca,O=elsewhere", other_key, _name("CN=other-ca,O=elsewhere"), other_key, ca=True)
    _write(certs, "ca", ca, ca_key)
    _write(certs, "other-ca", other, other_key)
    key = _new_key()
    _write(certs, "server", _issue(SERVER_SUBJECT, key, ca.subject, ca_key, server=True), key)
    key = _new_key()
    _write(certs, "client", _issue(CLIENT_SUBJECT, key, ca.subject, ca_key), key)
    key = _new_key()
    yesterday = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    _write(certs, "expired", _issue("CN=expired,O=tmqgate-test", key, ca.subject, ca_key, not_after=yesterday), key)
    key = _new_key()
    _write(certs, "untrusted", _issue("CN=mallory,O=elsewhere", key, other.subject, other_key), key)
    return certs


def reissue_server(certs: Certs, subject: str, name: str = "server") -> None:
    """A new server certificate (same CA) under `subject`, written over the old files (or as
    another certificate `name`)."""
    ca_cert = x509.load_pem_x509_certificate(Path(certs.ca).read_bytes())
    ca_key = serialization.load_pem_private_key(Path(certs.key("ca")).read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _new_key()
    _write(certs, name, _issue(subject, key, ca_cert.subject, ca_key, server=True), key)


def tls_config(target: str, certs: Certs, client_auth: str = "none") -> dict[str, str]:
    """The broker settings of TLS listeners with the server certificate, trusting the CA for
    client certificates: tmqgate's TOML keys or Kafka's properties."""
    if target == "kafka":
        return {"ssl.keystore.type": "PEM", "ssl.keystore.location": certs.keystore("server"),
                "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca,
                "ssl.client.auth": client_auth}
    return {"ssl_certfile": certs.cert("server"), "ssl_keyfile": certs.key("server"),
            "ssl_cafile": certs.ca, "ssl_client_auth": client_auth}


def issue_client(certs: Certs, name: str, subject: str) -> None:
    """Another client certificate `name` (signed by the CA) for `subject` (RFC 2253 order)."""
    ca_cert = x509.load_pem_x509_certificate(Path(certs.ca).read_bytes())
    ca_key = serialization.load_pem_private_key(Path(certs.key("ca")).read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _new_key()
    _write(certs, name, _issue(subject, key, ca_cert.subject, ca_key), key)
