"""storage.users: SCRAM credentials survive a reopen; only salt, iterations and keys are kept."""

from __future__ import annotations

from tmqgate.storage import ScramCredential, Store


def test_credentials_round_trip_and_persist(tmp_path) -> None:
    cred = ScramCredential(b"salt" * 8, 8192, b"S" * 64, b"K" * 64)
    with Store(tmp_path) as store:
        store.users.put_scram("alice", "SCRAM-SHA-512", cred)
        store.users.put_scram("alice", "SCRAM-SHA-256", cred._replace(iterations=4096))
        store.users.put_scram("b,ob=", "SCRAM-SHA-512", cred)
    with Store(tmp_path) as store:
        assert store.users.scram("alice", "SCRAM-SHA-512") == cred
        assert store.users.scram("alice", "SCRAM-SHA-1") is None
        assert store.users.scram("nobody", "SCRAM-SHA-512") is None
        listing = store.users.scram_users()
        assert sorted(listing) == ["alice", "b,ob="]
        assert sorted(listing["alice"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert store.users.delete_scram("alice", "SCRAM-SHA-256") is True
        assert store.users.delete_scram("alice", "SCRAM-SHA-256") is False
        assert store.users.delete_user("b,ob=") == 1
        assert list(store.users.scram_users()) == ["alice"]


def test_no_password_in_the_database(tmp_path) -> None:
    from tmqgate.broker.auth.scram import make_credential

    with Store(tmp_path) as store:
        store.users.put_scram("alice", "SCRAM-SHA-512", make_credential("SCRAM-SHA-512", "alice-secret-pw"))
        store.sync()
    blob = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert b"alice-secret-pw" not in blob


def test_set_password_create_and_alter(tmp_path) -> None:
    import pytest

    from tmqgate.broker.auth.credentials import UnknownUser, UserExists, set_password
    from tmqgate.broker.auth.plain import verify_password

    with Store(tmp_path) as store:
        users = store.users
        set_password(users, "erin", "pw-1", create=True)
        assert sorted(users.scram_users()["erin"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert verify_password(users.scram, "erin", "pw-1")
        with pytest.raises(UserExists):
            set_password(users, "erin", "pw-2", create=True)
        set_password(users, "erin", "pw-2", create=False)
        assert verify_password(users.scram, "erin", "pw-2") and not verify_password(users.scram, "erin", "pw-1")
        with pytest.raises(UnknownUser):
            set_password(users, "frank", "pw", create=False)
        with pytest.raises(ValueError):
            set_password(users, "frank", "", create=True)
