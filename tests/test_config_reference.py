"""docs/CONFIG.md is generated from broker/configs/config.py; CI fails when it drifts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "config_reference.py"


def test_config_reference_is_current() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_every_setting_has_its_own_row() -> None:
    from dataclasses import fields

    from tmqgate.broker.configs.config import BrokerConfig

    text = (ROOT / "docs" / "CONFIG.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in text.splitlines() if line.startswith("| `")}
    assert rows == {f.name for f in fields(BrokerConfig)}
    assert "| — |" not in text  # no field without a description
