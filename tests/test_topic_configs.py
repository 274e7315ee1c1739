"""Topic config validation: what Kafka refuses with INVALID_CONFIG, we refuse too."""

import pytest

from tmqgate.broker.configs.topic_configs import InvalidConfig, effective, validate


def test_known_values_normalised():
    assert validate("retention.ms", " 1000 ") == "1000"
    assert validate("cleanup.policy", "delete") == "delete"
    assert validate("cleanup.policy", "delete , compact,delete") == "delete,compact"
    assert validate("cleanup.policy", "") == ""
    assert validate("max.message.bytes", "2048") == "2048"


@pytest.mark.parametrize(("name", "value", "fragment"), [
    ("no.such.config", "1", "Unknown topic config name"),
    ("retention.ms", "soon", "Not a number of type LONG"),
    ("retention.ms", "-2", "Value must be at least -1"),
    ("max.message.bytes", str(2**31), "Not a number of type INT"),
    ("cleanup.policy", "tidy", "String must be one of"),
    ("cleanup.policy", "compact,,delete", "must not be empty"),
    ("retention.bytes", None, "Null value"),
])
def test_refused(name, value, fragment):
    with pytest.raises(InvalidConfig, match=fragment):
        validate(name, value)


def test_effective_falls_back_to_default():
    assert effective({}, "retention.ms") == "604800000"
    assert effective({"retention.ms": "5"}, "retention.ms") == "5"
