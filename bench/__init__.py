"""Benchmarks: tmqgate against Apache Kafka (`python -m bench.run`), and micro-benchmarks."""
