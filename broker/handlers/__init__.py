"""Kafka API handlers; importing this package registers them in broker.apis.API_TABLE."""

from broker.handlers import admin, configs, fetch, list_offsets, metadata, produce  # noqa: F401
