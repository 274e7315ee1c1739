"""Compatibility suite: stock Kafka clients against tmqgate (or reference Apache Kafka)."""
