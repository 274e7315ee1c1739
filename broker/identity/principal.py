"""The principal of a client authenticated by its TLS certificate, as Kafka names it.

Kafka's DefaultKafkaPrincipalBuilder takes the certificate subject's distinguished name in
RFC 2253 form (`CN=alice,OU=eng,O=example`) and passes it through
`ssl.principal.mapping.rules`: each rule `RULE:pattern/replacement/[L|U]` whose pattern
matches the whole name replaces it (`$1` refers to a group; L or U lower- or upper-cases the
result); `DEFAULT` keeps the name as it is. The first rule that matches wins; the principal
is `User:<name>`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509

_RULE = re.compile(r"RULE:(?P<pattern>(?:\\/|[^/])*)/(?P<replacement>(?:\\/|[^/])*)/(?P<case>[LU]?)")


@dataclass(frozen=True)
class MappingRule:
    pattern: re.Pattern[str] | None  # None = DEFAULT
    replacement: str
    case: str  # "", "L" or "U"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        out = self.pattern.sub(self.replacement, name)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


def parse_rules(rules: Sequence[str]) -> list[MappingRule]:
    """Kafka's rule syntax, one rule per entry; a ValueError names a rule that is not one."""
    out = []
    for text in rules:
        text = text.strip()
        if text == "DEFAULT":
            out.append(MappingRule(None, "", ""))
            continue
        m = _RULE.fullmatch(text)
        if m is None:
            raise ValueError(f"invalid ssl_principal_mapping_rules entry {text!r}: "
                             "expected DEFAULT or RULE:pattern/replacement/[L|U]")
        replacement = re.sub(r"\$(\d+)", r"\\g<\1>", m["replacement"].replace("\\/", "/"))
        out.append(MappingRule(re.compile(m["pattern"].replace("\\/", "/")), replacement, m["case"]))
    return out


def subject_name(der: bytes) -> str:
    """The certificate's subject DN in RFC 2253 form (most specific RDN first, as Java's
    X500Principal.getName() gives it)."""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


class NoMatchingRule(ValueError):
    """No mapping rule applies to a certificate's name: Kafka fails the authentication."""


def certificate_principal(der: bytes, rules: Sequence[MappingRule]) -> str:
    name = subject_name(der)
    for rule in rules:
        mapped = rule.apply(name)
        if mapped is not None:
            return f"User:{mapped}"
    raise NoMatchingRule(f"no ssl_principal_mapping_rules entry applies to {name}")
