"""One client security setting, written for every client the suite drives.

`ClientSecurity` says how a client connects to a secured listener (SSL with a client
certificate, SASL_SSL with a SCRAM user, ...) and gives it in each client's own terms:
librdkafka's config, kafka-python's and aiokafka's keyword arguments, the Java client's
properties (the `--command-config` file of the command-line tools, a Java program's config)
and Spark's `kafka.*` options. The trust store and key store are PEM files
(`compat_tests/certs.py`), which every one of them reads (Java through
`ssl.truststore.type=PEM` / `ssl.keystore.type=PEM`, KIP-651).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .certs import Certs


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str  # SSL | SASL_SSL | SASL_PLAINTEXT
    certs: Certs | None = None  # the CA the client trusts (TLS protocols)
    client_cert: str | None = None  # a certificate name of `certs` the client presents
    mechanism: str | None = None  # SASL: SCRAM-SHA-512, PLAIN, ...
    username: str | None = None
    password: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def confluent(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"security.protocol": self.protocol}
        if self.tls:
            assert self.certs is not None
            conf["ssl.ca.location"] = self.certs.ca
            if self.client_cert:
                conf["ssl.certificate.location"] = self.certs.cert(self.client_cert)
                conf["ssl.key.location"] = self.certs.key(self.client_cert)
        if self.sasl:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                         "sasl.password": self.password})
        return conf

    def kafka_python(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            assert self.certs is not None
            kw["ssl_cafile"] = self.certs.ca
            if self.client_cert:
                kw["ssl_certfile"] = self.certs.cert(self.client_cert)
                kw["ssl_keyfile"] = self.certs.key(self.client_cert)
        if self.sasl:
            kw.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                      sasl_plain_password=self.password)
        return kw

    def aiokafka(self) -> dict[str, Any]:
        from aiokafka.helpers import create_ssl_context

        kw: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            assert self.certs is not None
            cert = self.certs.cert(self.client_cert) if self.client_cert else None
            key = self.certs.key(self.client_cert) if self.client_cert else None
            kw["ssl_context"] = create_ssl_context(cafile=self.certs.ca, certfile=cert, keyfile=key)
        if self.sasl:
            kw.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                      sasl_plain_password=self.password)
        return kw

    def java(self) -> dict[str, str]:
        """The Java client's properties (kafka-clients 3.x and 4.x alike)."""
        props = {"security.protocol": self.protocol}
        if self.tls:
            assert self.certs is not None
            props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": self.certs.ca})
            if self.client_cert:
                props.update({"ssl.keystore.type": "PEM",
                              "ssl.keystore.location": self.certs.keystore(self.client_cert)})
        if self.sasl:
            assert self.mechanism is not None
            module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if self.mechanism == "PLAIN"
                      else "org.apache.kafka.common.security.scram.ScramLoginModule")
            props["sasl.mechanism"] = self.mechanism
            props["sasl.jaas.config"] = (f'{module} required username="{self.username}" '
                                         f'password="{self.password}";')
        return props

    def write_properties(self, path: Path, extra: dict[str, str] | None = None) -> Path:
        """A Java properties file (`--command-config`) with these settings."""
        props = {**self.java(), **(extra or {})}
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def spark(self) -> dict[str, str]:
        """Spark's Kafka source/sink options: the Java properties prefixed with `kafka.`."""
        return {f"kafka.{k}": v for k, v in self.java().items()}
