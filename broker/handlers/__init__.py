"""Kafka API handlers; importing this package registers them in broker.apis.API_TABLE."""

from tmqgate.broker.handlers import admin, configs, fetch, groups, list_offsets, metadata, produce  # noqa: F401
