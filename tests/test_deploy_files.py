"""deploy/: no shipped file publishes the HTTP SQL front without authentication (issue 12).

The front runs any SQL for whoever reaches it unless `http_auth` is on; the container image,
the compose files and the systemd unit either bind it to loopback or run a config that has
`http_auth = "basic"` (deploy/secure/)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import yaml

from tmqgate.broker.config import parse_hostport

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _http_of(args: list[str]) -> str | None:
    return args[args.index("--http") + 1] if "--http" in args else None


def _config_of(args: list[str], mounts: dict[str, Path]) -> dict[str, object]:
    if "--config" not in args:
        return {}
    return tomllib.loads(mounts[args[args.index("--config") + 1]].read_text())


def _auth_of(args: list[str], config: dict[str, object]) -> object:
    return args[args.index("--http-auth") + 1] if "--http-auth" in args else config.get("http_auth")


def _front_is_safe(args: list[str], mounts: dict[str, Path]) -> bool:
    config = _config_of(args, mounts)
    http = _http_of(args) or str(config.get("http", "127.0.0.1:6041"))
    return parse_hostport(http)[0] in LOOPBACK or _auth_of(args, config) == "basic"


def test_container_image_publishes_the_sql_front_only_with_authentication() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    assert _front_is_safe(cmd, {})
    if re.search(r"^EXPOSE .*\b6041\b", text, re.M):
        assert _auth_of(cmd, {}) == "basic"


def test_compose_files_publish_the_front_only_with_authentication() -> None:
    for path in (DEPLOY / "compose.yaml", DEPLOY / "secure" / "compose.yaml"):
        for name, service in yaml.safe_load(path.read_text())["services"].items():
            mounts = {}
            for volume in service.get("volumes", []):
                source, _, target = volume.partition(":")
                if source.startswith("."):
                    mounts[target.rsplit(":", 1)[0] if target.endswith((":ro", ":rw")) else target] = \
                        path.parent / source
            assert _front_is_safe(service["command"], mounts), (path, name)
            published = [str(p) for p in service.get("ports", [])]
            if any(p.endswith(":6041") for p in published):
                assert _auth_of(service["command"], _config_of(service["command"], mounts)) == "basic", (path, name)


def test_systemd_unit_keeps_the_front_on_loopback() -> None:
    line = next(ln for ln in (DEPLOY / "tmqgate.service").read_text().splitlines() if ln.startswith("ExecStart="))
    assert _front_is_safe(line.split(), {"/etc/tmqgate.toml": DEPLOY / "tmqgate.toml"})
