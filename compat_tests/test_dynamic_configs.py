"""Dynamic configs a Kafka operator changes at run time (issue 15, point 2): a KIP-848 group's
own `consumer.session.timeout.ms` / `consumer.heartbeat.interval.ms` (the GROUP resource) and
log levels (the BROKER_LOGGER resource), through DescribeConfigs / AlterConfigs /
IncrementalAlterConfigs over TCP and through `kafka-configs`.

What differs legitimately between the brokers is read from the broker, not assumed: the
node id, the broker's default heartbeat interval (tmqgate 1 s, Kafka 5 s), the loggers that
exist. Values set here are inside both brokers' bounds (Kafka's group.consumer.min.* are
larger than tmqgate's).
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tmqgate.protocol.records import build_batch

from .cli_helpers import require_tools, run
from .group_helpers import unique_name
from .helpers import wait_until
from .raw import RawConn, RoutedConn

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, METADATA = 32, 33, 44, 3
CONSUMER_GROUP_HEARTBEAT = 68
GROUP, BROKER_LOGGER = 32, 8
SET, DELETE, APPEND = 0, 1, 2
INVALID_REQUEST, INVALID_CONFIG = 42, 40
SOURCE_GROUP, SOURCE_DEFAULT, SOURCE_LOGGER = 8, 5, 6
SESSION, HEARTBEAT = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


def describe(conn: RawConn, rtype: int, name: str, keys: list[str] | None = None) -> dict[str, Any]:
    [result] = conn.request(DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": False})["results"]
    return result


def configs(conn: RawConn, rtype: int, name: str) -> dict[str, dict[str, Any]]:
    result = describe(conn, rtype, name)
    assert result["error_code"] == 0, result
    return {c["name"]: c for c in result["configs"]}


def alter(conn: RawConn, rtype: int, name: str, *changes: tuple[str, int, str | None],
          validate_only: bool = False) -> tuple[int, str | None]:
    [answer] = conn.request(INCREMENTAL_ALTER_CONFIGS, 1, {
        "resources": [{"resource_type": rtype, "resource_name": name, "configs": [
            {"name": n, "config_operation": op, "value": v} for n, op, v in changes]}],
        "validate_only": validate_only})["responses"]
    return answer["error_code"], answer["error_message"]


def node_id(conn: RawConn) -> int:
    """The id of the broker this connection reaches (a broker's configs are asked of it)."""
    meta = conn.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": False})
    port = conn.sock.getpeername()[1]
    [node] = [b for b in meta["brokers"] if b["port"] == port]
    return int(node["node_id"])


def heartbeat(conn: RawConn | RoutedConn, body: dict[str, Any]) -> dict[str, Any]:
    def beat() -> dict[str, Any]:
        return conn.request(CONSUMER_GROUP_HEARTBEAT, 1, {
            "member_id": "", "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1,
            "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": None, **body})

    # a freshly started Kafka may still be loading its coordinator
    return wait_until(beat, 60, 0.2, "the group coordinator", ok=lambda a: a["error_code"] not in (14, 15, 16))


def settled(conn: RawConn, rtype: int, name: str, config: str, source: int, value: str | None = None) -> dict[str, Any]:
    """The config once its source is `source` and its value `value` (Kafka applies a change
    through its metadata log, after answering it: the broker describes it a moment later, and
    the source may show before the value)."""
    def entry() -> dict[str, Any] | None:
        return configs(conn, rtype, name).get(config)

    got = wait_until(entry, 30, 0.2, f"{config} of {name} = {value} from source {source}",
                     ok=lambda e: e is not None and e["config_source"] == source and value in (None, e["value"]))
    assert got is not None
    return got


def given(broker: Any, conn: RoutedConn, body: dict[str, Any], interval: int) -> dict[str, Any]:
    """A member's heartbeat answer once it carries `interval`. tmqgate's coordinator reads the
    group's configs as it answers, so the first heartbeat must. Kafka's broker publishes a
    metadata image to its config cache (what DescribeConfigs reads) before it hands the group
    config to its group coordinator, so a heartbeat just after `settled` may still carry the
    old value there: on Kafka only, heartbeats go on until it shows (seen once in CI)."""
    if broker.target != "kafka":
        beat = heartbeat(conn, body)
    else:
        beat = wait_until(lambda: heartbeat(conn, body), 30, 0.2, f"a heartbeat interval of {interval} ms",
                          ok=lambda b: b["heartbeat_interval_ms"] == interval)
    assert (beat["error_code"], beat["heartbeat_interval_ms"]) == (0, interval), beat
    return beat


# ------------------------------------------------------------------------------ groups


def test_a_groups_own_heartbeat_interval_is_shown_and_given_to_its_members(broker: Any) -> None:
    group = unique_name("gcfg")
    member = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    with RoutedConn(broker.bootstrap) as conn:  # heartbeats to the group's coordinator
        # FindCoordinator first, as a client does (Kafka makes __consumer_offsets then).
        find = conn.request(10, 4, {"key_type": 0, "coordinator_keys": [group]})
        assert find["coordinators"][0]["error_code"] in (0, 15), find
        first = heartbeat(conn, {"group_id": group, "member_id": member, "member_epoch": 0,
                                 "rebalance_timeout_ms": 30_000, "topic_partitions": [],
                                 "subscribed_topic_names": [unique_name("absent")]})
        assert first["error_code"] == 0, first
        default = first["heartbeat_interval_ms"]
        before = configs(conn, GROUP, group)
        assert before[HEARTBEAT]["value"] == str(default)
        assert {before[n]["config_source"] for n in (SESSION, HEARTBEAT)} == {SOURCE_DEFAULT}
        # The synonyms: the group's own value (once set), then the broker's setting.
        assert before[HEARTBEAT]["synonyms"] == [
            {"name": "group.consumer.heartbeat.interval.ms", "value": str(default), "source": SOURCE_DEFAULT}]
        assert not before[SESSION]["read_only"] and before[SESSION]["config_type"] == 3

        assert alter(conn, GROUP, group, (SESSION, SET, "50000"), (HEARTBEAT, SET, "6000")) == (0, None)
        settled(conn, GROUP, group, SESSION, SOURCE_GROUP, "50000")
        settled(conn, GROUP, group, HEARTBEAT, SOURCE_GROUP, "6000")
        after = configs(conn, GROUP, group)
        assert (after[SESSION]["value"], after[SESSION]["config_source"]) == ("50000", SOURCE_GROUP)
        assert (after[HEARTBEAT]["value"], after[HEARTBEAT]["config_source"]) == ("6000", SOURCE_GROUP)
        assert after[HEARTBEAT]["synonyms"] == [
            {"name": HEARTBEAT, "value": "6000", "source": SOURCE_GROUP},
            {"name": "group.consumer.heartbeat.interval.ms", "value": str(default), "source": SOURCE_DEFAULT}]
        beat = given(broker, conn, {"group_id": group, "member_id": first["member_id"],
                                    "member_epoch": first["member_epoch"], "topic_partitions": []}, 6000)

        assert alter(conn, GROUP, group, (HEARTBEAT, DELETE, None)) == (0, None)
        settled(conn, GROUP, group, HEARTBEAT, SOURCE_DEFAULT, str(default))
        back = configs(conn, GROUP, group)
        assert (back[HEARTBEAT]["value"], back[HEARTBEAT]["config_source"]) == (str(default), SOURCE_DEFAULT)
        assert back[SESSION]["value"] == "50000"
        beat = given(broker, conn, {"group_id": group, "member_id": first["member_id"],
                                    "member_epoch": beat["member_epoch"], "topic_partitions": []}, default)
        heartbeat(conn, {"group_id": group, "member_id": first["member_id"], "member_epoch": -1})


def test_group_configs_are_validated_and_validate_only_changes_nothing(broker: Any) -> None:
    group = unique_name("gcfg-bad")
    with RawConn(broker.bootstrap) as conn:
        assert alter(conn, GROUP, group, (SESSION, SET, "50000"), validate_only=True) == (0, None)
        assert configs(conn, GROUP, group)[SESSION]["config_source"] == SOURCE_DEFAULT
        assert alter(conn, GROUP, group, (SESSION, SET, "70000")) == (
            INVALID_CONFIG, f"{SESSION} must be less than or equal to group.consumer.max.session.timeout.ms")
        assert alter(conn, GROUP, group, (HEARTBEAT, SET, "20000")) == (
            INVALID_CONFIG, f"{HEARTBEAT} must be less than or equal to group.consumer.max.heartbeat.interval.ms")
        assert alter(conn, GROUP, group, (SESSION, SET, "soon")) == (
            INVALID_CONFIG, f"Invalid value soon for configuration {SESSION}: Not a number of type INT")
        assert alter(conn, GROUP, group, ("consumer.no.such.config", SET, "1")) == (
            INVALID_CONFIG, "Unknown group config name: consumer.no.such.config")
        assert configs(conn, GROUP, group)[SESSION]["config_source"] == SOURCE_DEFAULT
        empty = describe(conn, GROUP, "")
        assert (empty["error_code"], empty["error_message"]) == (INVALID_REQUEST, "Group name must not be empty")


def test_share_group_configs_are_validated(broker: Any) -> None:
    """The share groups' (KIP-932) group configs: bounds from the broker's group.share.* settings,
    the string configs' values, by_duration's ISO-8601 duration; a valid set is shown back."""
    group = unique_name("gcfg-share")
    lock, limit, reset = "share.record.lock.duration.ms", "share.delivery.count.limit", "share.auto.offset.reset"
    with RawConn(broker.bootstrap) as conn:
        assert alter(conn, GROUP, group, (lock, SET, "14999")) == (
            INVALID_CONFIG, f"{lock} must be greater than or equal to group.share.min.record.lock.duration.ms")
        assert alter(conn, GROUP, group, (lock, SET, "60001")) == (
            INVALID_CONFIG, f"{lock} must be less than or equal to group.share.max.record.lock.duration.ms")
        assert alter(conn, GROUP, group, (limit, SET, "11")) == (
            INVALID_CONFIG, f"{limit} must be less than or equal to group.share.max.delivery.count.limit")
        for bad in ("sometimes", "by_duration:soon"):
            assert alter(conn, GROUP, group, (reset, SET, bad))[0] == INVALID_CONFIG, bad
        assert alter(conn, GROUP, group, (reset, SET, "by_duration:PT10M"), (lock, SET, "15000"),
                     (limit, SET, "2")) == (0, None)
        # Kafka shows the change once its metadata log has applied it (settled waits for that)
        for key, value in ((reset, "by_duration:PT10M"), (lock, "15000"), (limit, "2")):
            assert settled(conn, GROUP, group, key, SOURCE_GROUP, value)["value"] == value


def test_group_and_broker_configs_survive_a_restart(restartable_broker: Any) -> None:
    group = unique_name("gcfg-kept")
    with RawConn(restartable_broker.bootstrap) as conn:
        assert alter(conn, GROUP, group, (SESSION, SET, "55000")) == (0, None)
        assert alter(conn, 4, "", ("log.retention.ms", SET, "3600000")) == (0, None)
        node = str(node_id(conn))
    restartable_broker.kill()
    restartable_broker.start()

    def read() -> tuple[dict[str, Any], dict[str, Any]]:
        with RawConn(restartable_broker.bootstrap) as conn:
            return configs(conn, GROUP, group)[SESSION], configs(conn, 4, node)["log.retention.ms"]

    # Kafka replays its metadata log after the restart
    kept, retention = wait_until(read, 60, 0.5, "the configs after the restart",
                                 ok=lambda kr: kr[0]["config_source"] == SOURCE_GROUP and kr[1]["value"] == "3600000")
    assert (kept["value"], kept["config_source"]) == ("55000", SOURCE_GROUP)
    assert (retention["value"], retention["config_source"]) == ("3600000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG


# ------------------------------------------------------------------------------ loggers


def test_the_root_log_level_is_changed_at_run_time(broker: Any) -> None:
    with RawConn(broker.bootstrap) as conn:
        node = str(node_id(conn))
        loggers = configs(conn, BROKER_LOGGER, node)
        root = loggers["root"]
        assert root["value"] in ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"), root
        assert (root["config_source"], root["read_only"], root["synonyms"]) == (SOURCE_LOGGER, False, [])
        try:
            assert alter(conn, BROKER_LOGGER, node, ("root", SET, "ERROR")) == (0, None)
            assert configs(conn, BROKER_LOGGER, node)["root"]["value"] == "ERROR"
            assert alter(conn, BROKER_LOGGER, node, ("root", SET, "LOUD")) == (
                INVALID_CONFIG, "Cannot set the log level of root to LOUD as it is not a supported log level. "
                "Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN")
            assert alter(conn, BROKER_LOGGER, node, ("root", DELETE, None)) == (
                INVALID_REQUEST, "Removing the log level of the root logger is not allowed")
            assert alter(conn, BROKER_LOGGER, node, ("root", APPEND, "DEBUG")) == (
                INVALID_REQUEST, "APPEND operation is not allowed for the BROKER_LOGGER resource")
            assert configs(conn, BROKER_LOGGER, node)["root"]["value"] == "ERROR"
        finally:
            assert alter(conn, BROKER_LOGGER, node, ("root", SET, root["value"])) == (0, None)
        assert configs(conn, BROKER_LOGGER, node)["root"]["value"] == root["value"]
        # Legacy AlterConfigs does not know the resource type.
        [legacy] = conn.request(ALTER_CONFIGS, 2, {"resources": [{
            "resource_type": BROKER_LOGGER, "resource_name": node,
            "configs": [{"name": "root", "value": "DEBUG"}]}], "validate_only": False})["responses"]
        assert legacy["error_code"] == INVALID_REQUEST, legacy
        other = describe(conn, BROKER_LOGGER, str(int(node) + 7))
        assert other["error_code"] == INVALID_REQUEST, other


@pytest.mark.tmqgate_only
def test_a_tmqgate_logger_is_turned_up_and_then_inherits_again(broker: Any) -> None:
    """tmqgate's loggers are its Python modules' (Kafka's are log4j's)."""
    with RawConn(broker.bootstrap) as conn:
        node = str(node_id(conn))
        root = configs(conn, BROKER_LOGGER, node)["root"]["value"]
        assert "tmqgate.server" in configs(conn, BROKER_LOGGER, node)
        assert alter(conn, BROKER_LOGGER, node, ("tmqgate.server", SET, "TRACE")) == (0, None)
        assert configs(conn, BROKER_LOGGER, node)["tmqgate.server"]["value"] == "TRACE"
        assert alter(conn, BROKER_LOGGER, node, ("tmqgate.server", DELETE, None)) == (0, None)
        assert configs(conn, BROKER_LOGGER, node)["tmqgate.server"]["value"] == root
        assert alter(conn, BROKER_LOGGER, node, ("no.such.logger", SET, "DEBUG")) == (
            INVALID_CONFIG, "Logger no.such.logger does not exist!")


# ------------------------------------------------------------------------------ kafka-configs


def test_kafka_configs_groups_and_broker_loggers(broker: Any) -> None:
    require_tools()
    group = unique_name("gcfg-tool")
    b = broker.bootstrap
    run("kafka-configs", "--bootstrap-server", b, "--entity-type", "groups", "--entity-name", group,
        "--alter", "--add-config", f"{SESSION}=50000")
    shown = run("kafka-configs", "--bootstrap-server", b, "--entity-type", "groups", "--entity-name", group,
                "--describe").stdout
    assert f"Dynamic configs for group {group} are:" in shown, shown
    line = next(x.strip() for x in shown.splitlines() if x.strip().startswith(f"{SESSION}="))
    assert line.startswith(f"{SESSION}=50000 sensitive=false synonyms={{DYNAMIC_GROUP_CONFIG:{SESSION}=50000, "
                           "DEFAULT_CONFIG:group.consumer.session.timeout.ms="), shown
    run("kafka-configs", "--bootstrap-server", b, "--entity-type", "groups", "--entity-name", group,
        "--alter", "--delete-config", SESSION)
    with RawConn(b) as conn:
        assert configs(conn, GROUP, group)[SESSION]["config_source"] == SOURCE_DEFAULT
        node = str(node_id(conn))
    everything = run("kafka-configs", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", node,
                     "--describe", "--all").stdout
    assert f"All configs for broker {node} are:" in everything, everything
    assert any(line.strip().startswith("message.max.bytes=") and "synonyms={DEFAULT_CONFIG:message.max.bytes="
               in line for line in everything.splitlines()), everything
    run("kafka-configs", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-default",
        "--alter", "--add-config", "log.cleaner.delete.retention.ms=3600000")
    try:
        default = wait_until(lambda: run("kafka-configs", "--bootstrap-server", b, "--entity-type", "brokers",
                                         "--entity-default", "--describe").stdout,
                             30, 0.5, "the brokers' default shown", show=str,
                             ok=lambda d: "log.cleaner.delete.retention.ms=3600000" in d)
        assert "Default configs for brokers in the cluster are:" in default, default
        assert ("log.cleaner.delete.retention.ms=3600000 sensitive=false "
                "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.delete.retention.ms=3600000}") in default, default
    finally:
        run("kafka-configs", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-default",
            "--alter", "--delete-config", "log.cleaner.delete.retention.ms")
    loggers = run("kafka-configs", "--bootstrap-server", b, "--entity-type", "broker-loggers",
                  "--entity-name", node, "--describe").stdout
    assert f"All configs for broker-logger {node} are:" in loggers or "root=" in loggers, loggers
    assert any(line.strip().startswith("root=") for line in loggers.splitlines()), loggers


# ------------------------------------------------------------------------------ brokers

BROKER = 4
SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC = 2, 3, 4
PRODUCE, MESSAGE_TOO_LARGE = 0, 10


def _produce(conn: RawConn, topic: str, batch: bytes) -> int:
    answer = conn.request(PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return int(answer["responses"][0]["partition_responses"][0]["error_code"])


def test_message_max_bytes_lowered_for_the_cluster_refuses_larger_batches_at_once(broker: Any) -> None:
    topic = unique_name("dyn-mmb")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    small = build_batch([(b"k", b"x" * 100)])
    big = build_batch([(b"k", b"x" * 5000)])
    with RoutedConn(broker.bootstrap) as routed:  # the partition's leader: its broker configs are the ones set
        leader = wait_until(lambda: routed.leader(topic, 0), 30, 0.2, "the partition led")
    with RawConn(leader) as conn:
        node = str(node_id(conn))
        before = configs(conn, BROKER, node)["message.max.bytes"]
        assert (before["read_only"], before["config_source"]) == (False, SOURCE_DEFAULT)
        # a new topic's leader may take a moment on Kafka
        wait_until(lambda: _produce(conn, topic, big) == 0, 30, 0.5, "the big batch written")
        try:
            assert alter(conn, BROKER, "", ("message.max.bytes", SET, "2048")) == (0, None)
            entry = settled(conn, BROKER, node, "message.max.bytes", SOURCE_DYNAMIC_DEFAULT, "2048")
            assert entry["value"] == "2048"
            assert entry["synonyms"][:2] == [
                {"name": "message.max.bytes", "value": "2048", "source": SOURCE_DYNAMIC_DEFAULT},
                {"name": "message.max.bytes", "value": before["value"], "source": SOURCE_DEFAULT}]
            default = describe(conn, BROKER, "")
            assert [(c["name"], c["value"], c["config_source"]) for c in default["configs"]
                    if c["name"] == "message.max.bytes"] == [("message.max.bytes", "2048", SOURCE_DYNAMIC_DEFAULT)]
            topic_entry = settled(conn, 2, topic, "max.message.bytes", SOURCE_DYNAMIC_DEFAULT, "2048")
            assert topic_entry["value"] == "2048"
            code = wait_until(lambda: _produce(conn, topic, big), 30, 0.5, "the big batch refused", ok=lambda c: c != 0)
            assert code == MESSAGE_TOO_LARGE
            assert _produce(conn, topic, small) == 0
            # one broker's own value wins over the cluster default
            assert alter(conn, BROKER, node, ("message.max.bytes", SET, "4096")) == (0, None)
            entry = settled(conn, BROKER, node, "message.max.bytes", SOURCE_DYNAMIC_BROKER, "4096")
            assert [s["source"] for s in entry["synonyms"]][:3] == [
                SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT, SOURCE_DEFAULT]
        finally:
            assert alter(conn, BROKER, node, ("message.max.bytes", DELETE, None)) == (0, None)
            assert alter(conn, BROKER, "", ("message.max.bytes", DELETE, None)) == (0, None)
        assert settled(conn, BROKER, node, "message.max.bytes", SOURCE_DEFAULT,
                       before["value"])["value"] == before["value"]
        assert wait_until(lambda: _produce(conn, topic, big), 30, 0.5, "the big batch written again",
                          ok=lambda c: c == 0) == 0


def test_broker_config_changes_kafka_refuses(broker: Any) -> None:
    with RawConn(broker.bootstrap) as conn:
        node = str(node_id(conn))
        assert alter(conn, BROKER, node, ("message.max.bytes", SET, "4096"), validate_only=True) == (0, None)
        assert configs(conn, BROKER, node)["message.max.bytes"]["config_source"] == SOURCE_DEFAULT
        code, message = alter(conn, BROKER, node, ("num.partitions", SET, "3"))
        assert (code, message) == (INVALID_REQUEST, "Cannot update these configs dynamically: [num.partitions]")
        code, message = alter(conn, BROKER, str(int(node) + 5), ("message.max.bytes", SET, "4096"))
        assert code == INVALID_REQUEST, message
        assert alter(conn, BROKER, "", ("log.retention.ms", SET, "soon")) == (
            INVALID_REQUEST, "Invalid value soon for configuration log.retention.ms: Not a number of type LONG")
        assert configs(conn, BROKER, node)["log.retention.ms"]["config_source"] == SOURCE_DEFAULT
        assert configs(conn, BROKER, node)["num.partitions"]["read_only"] is True
