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
    (tmp_path / "data").mkdir()  # an empty directory: the store is made there (compose's tmqgate-init)
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
    (tmp_path / "data").mkdir()
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


def test_list_and_delete_refuse_a_directory_without_a_store(tmp_path, monkeypatch, capsys) -> None:
    """A misspelt --data-dir was taken (exit 0) and a LevelDB made there; now it is refused,
    exit 2, one line, nothing created."""
    missing = tmp_path / "dta"
    for argv in (["user", "list"], ["user", "delete", "alice"]):
        rc, out, err = _run(monkeypatch, capsys, [*argv, "--data-dir", str(missing)])
        assert (rc, out, err) == (2, "", f"tmqgate user: the data directory {missing} does not exist: give --data-dir "
                                         "the broker's data directory (data_dir)\n")
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    for argv in (["user", "list"], ["user", "delete", "alice"]):
        rc, out, err = _run(monkeypatch, capsys, [*argv, "--data-dir", str(empty)])
        assert (rc, out, err) == (2, "", f"tmqgate user: {empty} is not a tmqgate data directory (no store in it): "
                                         "give --data-dir the broker's data directory (data_dir)\n")
    assert list(empty.iterdir()) == []


def test_add_refuses_a_directory_that_does_not_exist(tmp_path, monkeypatch, capsys) -> None:
    missing = tmp_path / "typo" / "data"
    rc, out, err = _run(monkeypatch, capsys, ["user", "add", "alice", "--data-dir", str(missing)], "pw\n")
    assert (rc, out, err) == (2, "", f"tmqgate user: the data directory {missing} does not exist: create it "
                                     f"(mkdir -p {missing}) or start the broker once with --data-dir {missing}, "
                                     "then add the user\n")
    assert not (tmp_path / "typo").exists()
    afile = tmp_path / "afile"
    afile.write_text("x")
    rc, out, err = _run(monkeypatch, capsys, ["user", "add", "alice", "--data-dir", str(afile)], "pw\n")
    assert (rc, out, err) == (2, "", f"tmqgate user: the data directory {afile} is a file, not a directory: give "
                                     "--data-dir the broker's data directory\n")


def test_add_to_a_broker_data_directory_then_list(tmp_path, monkeypatch, capsys) -> None:
    """A directory a broker made (a store in it, users or not) is taken by all three verbs."""
    d = tmp_path / "data"
    with Store(str(d)):
        pass
    assert _run(monkeypatch, capsys, ["user", "list", "--data-dir", str(d)]) == (0, "", "")
    rc, out, _ = _run(monkeypatch, capsys, ["user", "add", "carol", "--data-dir", str(d)], "carol-secret\n")
    assert (rc, out) == (0, "user carol: SCRAM-SHA-512 credential stored (4096 iterations)\n")
    assert _run(monkeypatch, capsys, ["user", "list", "--data-dir", str(d)]) == (
        0, "carol\tSCRAM-SHA-512=iterations=4096\n", "")
