"""What the broker is configured with: `BrokerConfig` (config.py: tmqgate.toml, environment,
command line) and the topic-level keys with their Kafka defaults and validation (topic_configs.py).
Below the topic registry (topics.py reads topic_configs.py): the configs altered at run time,
which read the registry, are dynamic_configs/.
"""
