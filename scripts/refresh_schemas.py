#!/usr/bin/env python3
"""Refresh the vendored Apache Kafka message schemas in ``protocol/resources/``.

The schemas are Apache Kafka's own JSON message definitions (``common/message/*.json``), which
the ``kafka-clients`` jar of every Kafka release carries verbatim, Apache-2.0 license header
included.  The release is the one the reference broker of the compatibility tests runs:
``<kafka.version>`` in ``compat_tests/java/pom.xml``.  Maven fetches the jar from Maven Central
(checking its checksum) into the local repository; this script copies out the files the code
uses and records where they came from in ``protocol/resources/VERSION``.

Only the schemas the code needs are vendored (about a third of the release's ~200 files):
the request/response pair of every API in ``broker/apis.py``'s ``ApiKey`` enum, the request and
response headers, and the consumer protocol's data schemas (``EXTRA`` below).  The rest (KRaft
internals, share groups, ACLs, transactions, ...) would only make the codec library and its
property tests bigger for APIs nobody serves.  Adding an API to ``ApiKey`` means running this
script again; ``tests/test_protocol_codec.py`` fails until one does.

    scripts/refresh_schemas.py                 # the version pinned in compat_tests/java/pom.xml
    scripts/refresh_schemas.py --version 4.3.1
    scripts/refresh_schemas.py --jar path/to/kafka-clients-4.3.1.jar   # no Maven needed

Honours MAVEN_REPO_LOCAL (an alternate local repository), like scripts/install_java.sh.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POM = ROOT / "compat_tests" / "java" / "pom.xml"
APIS = ROOT / "broker" / "apis.py"
DEST = ROOT / "protocol" / "resources"
JAR_DIR = "common/message/"

#: Schemas that are not an API's request/response but that the code or the tests use.
EXTRA = (
    "RequestHeader",
    "ResponseHeader",
    "ConsumerProtocolAssignment",  # coordinator.classic decodes group member metadata with these
    "ConsumerProtocolSubscription",
)

_COMMENT_LINE = re.compile(r"(?m)^\s*//.*$")


def pinned_version() -> str:
    m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text(encoding="utf-8"))
    if m is None:
        sys.exit(f"refresh_schemas: no <kafka.version> in {POM}")
    return m.group(1).strip()


def api_keys() -> dict[str, int]:
    """``ApiKey`` enum members of broker/apis.py, read with ``ast`` (nothing is imported)."""
    tree = ast.parse(APIS.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ApiKey":
            out = {}
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Name)
                        and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, int)):
                    out[stmt.targets[0].id] = stmt.value.value
            return out
    sys.exit(f"refresh_schemas: no ApiKey enum in {APIS}")


def maven_jar(version: str) -> Path:
    artifact = f"org.apache.kafka:kafka-clients:{version}"
    cmd = ["mvn", "-q", "-B", "-Dstyle.color=never", "dependency:get",
           f"-Dartifact={artifact}", "-Dtransitive=false"]
    repo = os.environ.get("MAVEN_REPO_LOCAL")
    if repo:
        cmd.append(f"-Dmaven.repo.local={repo}")
    print(f"refresh_schemas: resolving {artifact} with Maven", file=sys.stderr)
    subprocess.run(cmd, check=True)
    base = Path(repo) if repo else Path.home() / ".m2" / "repository"
    jar = base / "org/apache/kafka/kafka-clients" / version / f"kafka-clients-{version}.jar"
    if not jar.is_file():
        sys.exit(f"refresh_schemas: Maven reported success but {jar} is missing")
    return jar


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", help="Apache Kafka version (default: compat_tests/java/pom.xml's)")
    ap.add_argument("--jar", type=Path, help="use this kafka-clients jar instead of asking Maven")
    args = ap.parse_args()

    version = args.version or pinned_version()
    jar = args.jar or maven_jar(version)
    if args.jar and version not in jar.name:
        sys.exit(f"refresh_schemas: {jar.name} does not look like kafka-clients {version} (pass --version)")
    jar_sha256 = hashlib.sha256(jar.read_bytes()).hexdigest()

    wanted_keys = set(api_keys().values())
    chosen: dict[str, bytes] = {}
    found_keys: dict[int, set[str]] = {}
    with zipfile.ZipFile(jar) as zf:
        for name in sorted(zf.namelist()):
            if not (name.startswith(JAR_DIR) and name.endswith(".json")) or "/" in name[len(JAR_DIR):]:
                continue
            raw = zf.read(name)
            data = json.loads(_COMMENT_LINE.sub("", raw.decode("utf-8")))
            stem = Path(name).stem
            if stem in EXTRA or (data.get("type") in ("request", "response")
                                 and data.get("apiKey") in wanted_keys):
                chosen[Path(name).name] = raw
                if "apiKey" in data:
                    found_keys.setdefault(data["apiKey"], set()).add(data["type"])
    missing = [k for k in sorted(wanted_keys) if found_keys.get(k) != {"request", "response"}]
    missing += [e for e in EXTRA if f"{e}.json" not in chosen]
    if missing:
        sys.exit(f"refresh_schemas: kafka-clients {version} lacks schemas for {missing}")
    for raw in chosen.values():
        if b"Licensed to the Apache Software Foundation" not in raw[:400]:
            sys.exit("refresh_schemas: a schema without its Apache license header; refusing to vendor it")

    DEST.mkdir(parents=True, exist_ok=True)
    for old in DEST.glob("*.json"):
        if old.name not in chosen:
            old.unlink()
    for fname, raw in chosen.items():
        (DEST / fname).write_bytes(raw)
    size = sum(len(raw) for raw in chosen.values())
    (DEST / "VERSION").write_text(
        f"{version}\n"
        "# Apache Kafka's message schemas (Apache-2.0), copied verbatim by scripts/refresh_schemas.py\n"
        f"# artifact: org.apache.kafka:kafka-clients:{version} (Maven Central), {JAR_DIR}*.json\n"
        f"# artifact sha256: {jar_sha256}\n"
        f"# files: {len(chosen)} ({len(wanted_keys)} APIs of broker/apis.py ApiKey + {', '.join(EXTRA)})\n",
        encoding="utf-8",
    )
    print(f"refresh_schemas: {len(chosen)} schemas ({size} bytes) of Kafka {version} in {DEST}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
