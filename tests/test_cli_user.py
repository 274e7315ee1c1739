"""`tmqgate user add|list|delete`: offline SCRAM users of a data directory."""

from __future__ import annotations

import io
import sys

import pytest

from tmqgate.broker.auth import scram
from tmqgate.broker.cli import main
from tmqgate.storage import Store


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str],
         stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_add_list_delete(tmp_path, monkeypatch, capsys) -> None:
    d = str(tmp_path / "data")
    assert _run(monkeypatch, capsys, ["user", "add", "alice", "--mechanism", "SCRAM-SHA-512",
                                      "--iterations", "8192", "--data-dir", d], "alice-secret\n")[0] == 0
    assert _run(monkeypatch, capsys, ["user", "add", "bob", "--mechanism", "SCRAM-SHA-256",
                                      "--data-dir", d], "bob-secret\n")[0] == 0
    rc, out, _ = _run(monkeypatch, capsys, ["user", "list", "--data-dir", d])
    assert rc == 0 and out.splitlines() == ["alice\tSCRAM-SHA-512=iterations=8192",
                                            "bob\tSCRAM-SHA-256=iterations=4096"]
    with Store(d) as store:  # the stored credential checks the password given on stdin
        cred = store.users.scram("alice", "SCRAM-SHA-512")
        assert cred is not None and scram.password_matches("SCRAM-SHA-512", cred, "alice-secret")
        assert not scram.password_matches("SCRAM-SHA-512", cred, "alice-secret\n")
    assert _run(monkeypatch, capsys, ["user", "delete", "bob", "--data-dir", d])[0] == 0
    rc, _, err = _run(monkeypatch, capsys, ["user", "delete", "bob", "--data-dir", d])
    assert rc == 1 and "no such user credential: bob" in err
    rc, out, _ = _run(monkeypatch, capsys, ["user", "list", "--data-dir", d])
    assert out.splitlines() == ["alice\tSCRAM-SHA-512=iterations=8192"]


def test_refusals(tmp_path, monkeypatch, capsys) -> None:
    d = str(tmp_path / "data")
    rc, _, err = _run(monkeypatch, capsys, ["user", "add", "a", "--iterations", "1000", "--data-dir", d], "pw\n")
    assert rc == 2 and "between 4096 and 16384" in err
    rc, _, err = _run(monkeypatch, capsys, ["user", "add", "a", "--data-dir", d], "")
    assert rc == 2 and "empty password" in err


def test_refuses_a_data_dir_a_broker_holds(tmp_path, monkeypatch, capsys) -> None:
    d = str(tmp_path / "data")
    with Store(d):  # as a running broker holds the LevelDB lock
        rc, _, err = _run(monkeypatch, capsys, ["user", "add", "alice", "--data-dir", d], "pw\n")
        assert rc == 1
        assert "is in use (a running broker holds its lock)" in err
        rc, _, err = _run(monkeypatch, capsys, ["user", "list", "--data-dir", d])
        assert rc == 1 and "is in use" in err
