"""The windowed Spark pipeline (`pipelines.windowed`) end to end through the broker.

Events (JSON `{key, value, ts}`) are produced with confluent-kafka; the pipeline's window
results (10 s tumbling windows on event time, 5 s watermark, sum and count per key) are read
back from its output topic and compared with the same computation done here in plain Python.
The streaming job is also run as a process of its own, SIGKILLed after a few micro-batches
and restarted from its checkpoint: the output, deduped by (key, window_start) as the
pipeline's consumers do (Spark's Kafka sink is at-least-once), must be exactly the expected
windows, none missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Broker
from .helpers import ConfluentDriver, unique_topic, wait_until
from .spark_helpers import (
    PipelineProcess,
    expected_windows,
    flush_event,
    iter_chunks,
    make_events,
    output_results,
    produce_events,
    spark_session,
)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("compat-spark-pipeline")
    try:
        yield session
    finally:
        session.stop()


def _topics(broker: Broker, prefix: str, partitions: int = 2) -> tuple[str, str]:
    d = ConfluentDriver(broker.bootstrap)
    src, out = unique_topic(f"{prefix}-in"), unique_topic(f"{prefix}-out")
    # The events are from 2023 (BASE_TS): under the default 7-day retention.ms a broker deletes
    # them at its next retention check (Kafka rolls and drops the time-expired segments), which
    # Spark then reports as data loss. Historical data is kept with retention.ms=-1.
    keep = {"retention.ms": "-1"}
    d.create_topic(src, partitions, keep)
    d.create_topic(out, partitions, keep)
    return src, out


def _results_as_rows(results: dict) -> set[tuple]:
    return {(r["key"], r["window_start"], r["window_end"], float(r["sum"]), r["count"]) for r in results.values()}


def test_streaming_pipeline_matches_python(broker: Broker, spark: Any, tmp_path: Path) -> None:
    """The streaming job over live data: every window closed by the watermark is written once
    (no restart, so no duplicates), equal to the plain-Python computation; the window still
    open at the end (the flush event's) is not written in append mode."""
    from tmqgate.pipelines.windowed import start_stream

    src, out = _topics(broker, "pipe-stream")
    events = make_events(240)
    flush = flush_event(events, partition=1)
    expected = expected_windows(events)
    half = len(events) // 2
    produce_events(broker.bootstrap, src, events[:half])

    q = start_stream(spark, broker.bootstrap, src, out, str(tmp_path / "ckpt"), trigger_seconds=1.0)
    try:
        # windows of the first half close while the query runs ...
        wait_until(lambda: q.exception() is not None or len(output_results(broker.bootstrap, out, 2)[1]) > 0,
                   120, 0.5, "first window results")
        assert q.exception() is None, q.exception()
        # ... then the rest arrives live, in event-time order, 10 events (2 s) per flush
        for chunk in iter_chunks(events[half:], 10):
            produce_events(broker.bootstrap, src, chunk)
        produce_events(broker.bootstrap, src, [flush])
        wait_until(lambda: q.exception() is not None
                   or len(output_results(broker.bootstrap, out, 2)[1]) >= len(expected),
                   120, 0.5, f"all {len(expected)} window results")
        assert q.exception() is None, q.exception()
        q.processAllAvailable()
        dropped = sum(op.get("numRowsDroppedByWatermark", 0) for p in q.recentProgress for op in p["stateOperators"])
    finally:
        q.stop()
    raw, deduped = output_results(broker.bootstrap, out, 2)
    assert dropped == 0, "test data must have no late events"
    assert _results_as_rows(deduped) == _results_as_rows(expected)
    assert len(raw) == len(deduped), "a window was written twice without any restart"
    assert all(r["key"] != "flush" for r in raw), "append mode wrote a window the watermark had not passed"


def test_batch_pipeline_matches_python(broker: Broker, spark: Any) -> None:
    """spark.read over the whole topic: every window (the flush event's too: batch has no late
    data and no watermark) equal to the plain-Python computation, collected and via the CLI's
    --batch writing to a topic."""
    from tmqgate.pipelines.windowed import batch_results, main

    src, out = _topics(broker, "pipe-batch")
    events = make_events(180, seed=5)
    events.append(flush_event(events, partition=0))
    produce_events(broker.bootstrap, src, events)
    expected = _results_as_rows(expected_windows(events))

    got = {(r["key"], r["window_start"], r["window_end"], float(r["sum"]), r["count"])
           for r in batch_results(spark, broker.bootstrap, src).collect()}
    assert got == expected

    assert main(["--bootstrap", broker.bootstrap, "--input", src, "--output", out, "--batch"]) == 0
    raw, deduped = output_results(broker.bootstrap, out, 2)
    assert len(raw) == len(expected)
    assert _results_as_rows(deduped) == expected


def test_pipeline_killed_and_restarted_from_checkpoint(broker: Broker, spark: Any, tmp_path: Path) -> None:
    """`python -m pipelines.windowed` (its own driver and JVM) is SIGKILLed after a few
    micro-batches and the job is started again with the same checkpoint (in this module's
    session, whose JVM is already warm): it resumes from the checkpointed offsets and window
    state, and the output topic, deduped by (key, window_start), holds every expected window
    exactly -- duplicates allowed (at-least-once sink) only if identical."""
    from tmqgate.pipelines.windowed import start_stream

    src, out = _topics(broker, "pipe-kill")
    events = make_events(240, seed=9)
    flush = flush_event(events, partition=len(events) % 2)
    expected = expected_windows(events)
    produce_events(broker.bootstrap, src, [*events, flush])
    checkpoint = str(tmp_path / "ckpt")

    first = PipelineProcess(["--bootstrap", broker.bootstrap, "--input", src, "--output", out,
                             "--checkpoint", checkpoint, "--max-offsets-per-trigger", "40",
                             "--trigger-seconds", "1", "--master", "local[2]"], tmp_path / "run1.log")
    try:
        first.wait_batches(4, timeout=180)
    finally:
        first.kill()
    _, before = output_results(broker.bootstrap, out, 2)
    assert before, "no window closed before the kill (batches 2-3 close the first ones)"
    assert len(before) < len(expected), "the job finished before it was killed; nothing left to recover"

    q = start_stream(spark, broker.bootstrap, src, out, checkpoint, trigger_seconds=1.0, max_offsets_per_trigger=40)
    try:
        wait_until(lambda: q.exception() is not None
                   or len(output_results(broker.bootstrap, out, 2)[1]) >= len(expected),
                   180, 0.5, f"all {len(expected)} window results after the restart")
        assert q.exception() is None, q.exception()
        q.processAllAvailable()
        progress = list(q.recentProgress)
    finally:
        q.stop()
    raw, deduped = output_results(broker.bootstrap, out, 2)  # raises if duplicates differ
    assert _results_as_rows(deduped) == _results_as_rows(expected), (
        f"missing {sorted(set(expected) - set(deduped))}, unexpected {sorted(set(deduped) - set(expected))}")
    assert all(r["key"] != "flush" for r in raw)
    assert progress and min(p["batchId"] for p in progress) >= 4, "the restart did not resume from the checkpoint"
    assert sum(op.get("numRowsDroppedByWatermark", 0) for p in progress for op in p["stateOperators"]) == 0
