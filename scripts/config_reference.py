"""Write docs/CONFIG.md, the reference of every broker setting, from broker/configs/config.py.

Each `BrokerConfig` field is a TOML key; its default comes from the dataclass and its
description from the comment block above it (and its trailing comment), so the reference
cannot say anything the code does not; a field with no description of its own is an error.
`--check` exits 1 when docs/CONFIG.md is stale (tests/test_config_reference.py runs it in CI).

    python scripts/config_reference.py [--check]
"""

from __future__ import annotations

import ast
import dataclasses
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "broker" / "configs" / "config.py"
OUTPUT = ROOT / "docs" / "CONFIG.md"

HEADER = """# Broker settings

Generated from `broker/configs/config.py` by `scripts/config_reference.py`; do not edit by hand.

Settings are read from the TOML file given to `tmqgate serve --config FILE` (keys as below);
`--listen`, `--http`, `--http-auth` and `--data-dir` override their keys; unknown keys, values of the
wrong type and out-of-range values are refused at start, naming the file and the key. Where Apache Kafka has the
setting, the name is Kafka's in snake_case and the default is Kafka's unless the description says why not.

Every key can also be given as an environment variable, `TMQGATE_` + the key upper-cased, its value
a TOML value (`TMQGATE_NUM_PARTITIONS=3`; a value that is not TOML is taken as a string): over the
file, under the flags. Any other `TMQGATE_*` variable is refused at start as an unknown key is
(naming the variable), except these, which are not settings and are read elsewhere: {not_settings}.
"""


def _comments(source: str) -> dict[int, str]:
    """Line number -> comment text (without '#') for every comment in `source`."""
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def _default(field: dataclasses.Field[object]) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _toml(value: object) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, list):
        return "`[" + ", ".join(f'"{v}"' for v in value) + "]`"
    if isinstance(value, dict):
        return "`{" + ", ".join(f'{k} = "{v}"' for k, v in value.items()) + "}`" if value else "`{}`"
    if isinstance(value, int) and value >= 10_000:
        return f"`{value}` ({value:_})".replace("_", ",")
    return f"`{value}`"


def render() -> str:
    from tmqgate.broker.configs.config import BrokerConfig

    source = SOURCE.read_text()
    comments = _comments(source)
    lines = source.splitlines()
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "BrokerConfig")
    fields = {f.name: f for f in dataclasses.fields(BrokerConfig)}
    from tmqgate.broker.configs.environment import ENV_NOT_SETTINGS

    names = [f"`{v}*`" if v.endswith("_") else f"`{v}`" for v in ENV_NOT_SETTINGS]
    out = [HEADER.format(not_settings=", ".join(names))]
    section = None
    rows: list[str] = []
    undocumented: list[str] = []

    def flush() -> None:
        if rows:
            out.append(f"\n## {section or 'General'}\n\n| key | default | what it does |\n|---|---|---|")
            out.extend(rows)
            rows.clear()

    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        above: list[str] = []
        n = node.lineno - 1
        while n >= 1 and lines[n - 1].strip().startswith("#"):
            text = comments.get(n, "")
            if text.startswith("---"):
                flush()
                section = text.strip("- ").strip()
                break
            above.insert(0, text)
            n -= 1
        if node.lineno in comments:
            above.append(comments[node.lineno])
        text = " ".join(above).replace("|", "\\|")
        if not text:
            undocumented.append(name)
        rows.append(f"| `{name}` | {_toml(_default(fields[name]))} | {text} |")
    flush()
    if undocumented:
        raise SystemExit(f"{SOURCE.relative_to(ROOT)}: no description (a comment block right above the field) "
                         f"for: {', '.join(undocumented)}")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale: run python scripts/config_reference.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
