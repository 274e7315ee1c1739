"""Client quotas: persisted entities, Kafka's precedence of quota levels, and the rate and
throttle-time arithmetic of Kafka's Rate/SampledStat on a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmqgate.broker.configs.config import BrokerConfig
from tmqgate.broker.ops.quotas.client_quotas import ClientQuotaManagers
from tmqgate.broker.ops.quotas.configs import QuotaConfigs
from tmqgate.broker.ops.quotas.quota_manager import QuotaManager
from tmqgate.broker.ops.quotas.rates import Rate
from tmqgate.storage import Store


def _entity(**names: str | None) -> list[dict]:
    return [{"entity_type": t.replace("_", "-"), "entity_name": n} for t, n in names.items()]


def _set(configs: QuotaConfigs, entity: list[dict], **values: float | None) -> None:
    [result] = configs.alter([{"entity": entity, "ops": [
        {"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in values.items()]}], False)
    assert result.code == 0, result


@pytest.fixture
def store(tmp_path: Path):
    s = Store(tmp_path / "data")
    yield s
    s.close()


def test_quotas_persist_across_reopen(tmp_path: Path) -> None:
    with Store(tmp_path / "d") as store:
        configs = QuotaConfigs(store)
        _set(configs, _entity(client_id="p1"), producer_byte_rate=1024.0)
        _set(configs, _entity(user=None, client_id=None), request_percentage=25.5)
        _set(configs, _entity(user="al:ice/é"), consumer_byte_rate=7.0, producer_byte_rate=9.0)
        _set(configs, _entity(user="al:ice/é"), producer_byte_rate=None)
        _set(configs, _entity(ip="10.0.0.1"), connection_creation_rate=5.0)
        _set(configs, _entity(ip="10.0.0.1"), connection_creation_rate=None)  # gone entirely
    with Store(tmp_path / "d") as store:
        assert store.load_client_quotas() == {
            (("client-id", "p1"),): {"producer_byte_rate": 1024.0},
            (("client-id", None), ("user", None)): {"request_percentage": 25.5},
            (("user", "al:ice/é"),): {"consumer_byte_rate": 7.0},
        }


def test_validate_only_writes_nothing(store: Store) -> None:
    configs = QuotaConfigs(store)
    [r] = configs.alter([{"entity": _entity(client_id="c"), "ops": [
        {"key": "producer_byte_rate", "value": 5.0, "remove": False}]}], True)
    assert r.code == 0 and configs.entities == {} and store.load_client_quotas() == {}


@pytest.mark.parametrize(("set_on", "user", "client", "expected"), [
    # Kafka's order, most specific first (ClientQuotaManager's docs)
    ({"u/c": 1, "u/dc": 2, "u": 3, "du/c": 4, "du/dc": 5, "du": 6, "c": 7, "dc": 8}, "u", "c", 1),
    ({"u/dc": 2, "u": 3, "du/c": 4, "du/dc": 5, "du": 6, "c": 7, "dc": 8}, "u", "c", 2),
    ({"u": 3, "du/c": 4, "du/dc": 5, "du": 6, "c": 7, "dc": 8}, "u", "c", 3),
    ({"du/c": 4, "du/dc": 5, "du": 6, "c": 7, "dc": 8}, "u", "c", 4),
    ({"du/dc": 5, "du": 6, "c": 7, "dc": 8}, "u", "c", 5),
    ({"du": 6, "c": 7, "dc": 8}, "u", "c", 6),
    ({"c": 7, "dc": 8}, "u", "c", 7),
    ({"dc": 8}, "u", "c", 8),
    ({"u/c": 1}, "other", "c", None),
    ({"u": 3}, "u", "any", 3),
])
def test_precedence_of_quota_levels(store: Store, set_on: dict[str, float], user: str, client: str,
                                    expected: float | None) -> None:
    configs = QuotaConfigs(store)
    names = {"u": ("user", "u"), "du": ("user", None), "c": ("client_id", "c"), "dc": ("client_id", None)}
    for spec, value in set_on.items():
        _set(configs, _entity(**dict(names[p] for p in spec.split("/"))), producer_byte_rate=float(value))
    found = QuotaManager("producer_byte_rate", configs, 1000, 11).resolve(user, client)
    assert (found[1] if found else None) == expected


def test_sharing_follows_the_level_that_matched(store: Store) -> None:
    """A client-id quota is one rate for every user with that client id; a user quota one
    rate for all of that user's client ids."""
    configs = QuotaConfigs(store)
    _set(configs, _entity(client_id="c"), producer_byte_rate=100.0)
    m = QuotaManager("producer_byte_rate", configs, 1000, 11)
    assert m.resolve("a", "c") == m.resolve("b", "c") == (("", "c"), 100.0)
    _set(configs, _entity(user="a"), producer_byte_rate=50.0)
    assert m.resolve("a", "x") == m.resolve("a", "y") == (("a", ""), 50.0)
    assert m.resolve("b", "c") == (("", "c"), 100.0)


def test_rate_pads_the_window_to_n_minus_one_samples() -> None:
    """Within the first window a rate is measured over 10 whole windows (11 samples of 1 s)."""
    r = Rate()
    r.record(5000.0, 0, 1000, 11)
    rate, window = r.measure(500, 1000, 11)
    assert window == 10_500 and rate == pytest.approx(5000 / 10.5)


def test_throttle_time_is_kafkas(store: Store) -> None:
    """(rate - quota) / quota * window: 10 s of quota in one go is free, more is throttled."""
    configs = QuotaConfigs(store)
    _set(configs, _entity(client_id="p"), producer_byte_rate=1000.0)
    m = QuotaManager("producer_byte_rate", configs, 1000, 11)
    assert m.record("", "p", 10_000, now=0) == 0  # 10000 B over a 10 s window: at the quota
    # 12000 B over 10 s = 1200 B/s: (1200 - 1000) / 1000 * 10000 ms
    assert m.record("", "p", 2000, now=0) == 2000
    # the samples age out: 11 s after the last event the rate starts again from nothing
    assert m.record("", "p", 500, now=11_000) == 0
    # request_percentage throttles at most one window
    _set(configs, _entity(client_id="p"), request_percentage=10.0)
    req = QuotaManager("request_percentage", configs, 1000, 11, max_throttle_ms=1000)
    assert req.record("", "p", 500.0, now=0) == 1000


def test_nothing_is_charged_without_quotas(store: Store) -> None:
    managers = ClientQuotaManagers(store, BrokerConfig())
    assert managers.active is False
    [r] = managers.alter([{"entity": _entity(client_id="c"), "ops": [
        {"key": "controller_mutation_rate", "value": 5.0, "remove": False}]}], False)
    assert r.code == 0 and managers.active is False  # stored and described, not enforced
    managers.alter([{"entity": _entity(client_id="c"), "ops": [
        {"key": "consumer_byte_rate", "value": 5.0, "remove": False}]}], False)
    assert managers.active is True


class _KafkaRate:
    """Kafka's Rate/SampledStat written plainly (every call purges and sums), to check the
    incremental one against."""

    def __init__(self, window_ms: int, n: int) -> None:
        self.w, self.n, self.samples, self.current = window_ms, n, [], 0  # [start, last_event, value]

    def record(self, value: float, now: int) -> None:
        if not self.samples:
            self.samples.append([now, now, 0.0])
        s = self.samples[self.current]
        if now - s[0] >= self.w:
            self.current = (self.current + 1) % (self.n + 1)
            if self.current >= len(self.samples):
                s = [now, now, 0.0]
                self.samples.append(s)
            else:
                s = self.samples[self.current]
                s[:] = [now, now, 0.0]
        s[2] += value
        s[1] = now

    def measure(self, now: int) -> tuple[float, int]:
        for s in self.samples:
            if now - s[1] >= self.n * self.w:
                s[:] = [now, now, 0.0]
        if not self.samples:
            self.samples.append([now, now, 0.0])
        elapsed = now - min(s[0] for s in self.samples)
        full = elapsed // self.w
        if full < self.n - 1:
            elapsed += (self.n - 1 - full) * self.w
        window = max(elapsed, 1)
        return sum(s[2] for s in self.samples) / (window / 1000), window


@pytest.mark.parametrize("seed", range(20))
def test_incremental_rate_equals_kafkas(seed: int) -> None:
    import random

    rnd = random.Random(seed)
    ours, ref = Rate(), _KafkaRate(1000, 11)
    now = 0
    for _ in range(3000):
        now += rnd.choice([0, 1, 7, 50, 300, 999, 1000, 2500, 12_000])
        value = rnd.choice([1.0, 1024.0, 65536.0, -1024.0])
        if rnd.random() < 0.7:
            ours.record(value, now, 1000, 11)
            ref.record(value, now)
        got, want = ours.measure(now, 1000, 11), ref.measure(now)
        assert got[1] == want[1] and got[0] == pytest.approx(want[0], rel=1e-9, abs=1e-6), now


def test_connection_creation_rate_by_ip(store: Store) -> None:
    """An ip's own rate, else the default ip's; over it the connection is not counted and is
    closed after at most one window; other ips are untouched."""
    managers = ClientQuotaManagers(store, BrokerConfig())
    assert managers.ip_active is False and managers.connection_throttle("10.0.0.1") == 0
    managers.alter([{"entity": _entity(ip="10.0.0.1"), "ops": [
        {"key": "connection_creation_rate", "value": 1.0, "remove": False}]}], False)
    assert managers.ip_active is True and managers.active is False
    got = [managers.connection_throttle("::ffff:10.0.0.1") for _ in range(12)]
    assert got[:10] == [0] * 10 and all(0 < t <= 1000 for t in got[10:]), got
    assert managers.connection_throttle("10.0.0.2") == 0  # no default ip quota
    managers.alter([{"entity": _entity(ip=None), "ops": [
        {"key": "connection_creation_rate", "value": 2.0, "remove": False}]}], False)
    assert [managers.connection_throttle("10.0.0.2") for _ in range(21)][-1] > 0


def test_controller_mutation_token_bucket(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """controller_mutation_rate (KIP-599) on a fake clock: a full bucket of rate x 11 windows,
    strict quotas refuse once it is below zero, permissive ones take everything and throttle;
    the throttle time is the time to refill to zero, less the time since; other clients are free."""
    from tmqgate.broker.identity.client import ClientInfo, current_client
    from tmqgate.broker.ops.quotas import rates

    now = [1_000_000]
    monkeypatch.setattr(rates, "monotonic_ms", lambda: now[0])
    token = current_client.set(ClientInfo("127.0.0.1", 1))
    managers = ClientQuotaManagers(store, BrokerConfig())
    assert managers.mutation_active is False and managers.mutation_quota("c", 7, 6) is None
    managers.alter([{"entity": _entity(client_id="c"), "ops": [
        {"key": "controller_mutation_rate", "value": 5.0, "remove": False}]}], False)
    assert managers.mutation_active is True and managers.active is False
    assert managers.mutation_quota("other", 7, 6) is None
    strict = managers.mutation_quota("c", 6, 6)
    assert strict is not None and strict.strict
    assert [strict.record(20) for _ in range(4)] == [True, True, True, False]  # 55 -> -5: refused
    assert strict.throttle_time_ms() == 1000  # 5 tokens at 5/s
    now[0] += 400
    assert strict.throttle_time_ms() == 600
    now[0] += 600
    again = managers.mutation_quota("c", 7, 6)
    assert again is not None and again.record(20) and again.throttle_time_ms() == 0  # back at 0: taken
    permissive = managers.mutation_quota("c", 5, 6)
    assert permissive is not None and not permissive.strict
    assert permissive.record(10) and permissive.throttle_time_ms() == 6000  # -30 at 5/s
    now[0] += 11_000 + 6_000  # refilled to the burst, no more
    full = managers.mutation_quota("c", 7, 6)
    assert full is not None and [full.record(55), full.record(1), full.record(1)] == [True, True, False]
    current_client.reset(token)
