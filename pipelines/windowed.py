"""Windowed aggregation over a Kafka topic: sum and count per key in tumbling event-time windows.

Input records carry JSON values such as

    {"key": "sensor-3", "value": 12.5, "ts": 1700000000000}

(`ts` in epoch milliseconds is the event time; records whose value is not such an object are
ignored).  Events are grouped by `key` into 10-second tumbling windows on event time with a
5-second watermark, and each window yields one JSON result, written to the output topic with
the key as the Kafka record key:

    {"key": "sensor-3", "window_start": 1700000000000, "window_end": 1700000010000,
     "sum": 37.5, "count": 3}

Streaming (`start_stream`, the default of the CLI) uses output mode **append**: a window's
result is written once, when the watermark (the largest event time seen so far minus 5 s)
passes the window's end; events that arrive later than that for a closed window are dropped,
as Spark does for late data.  Progress — input offsets per micro-batch and the window state —
lives in the checkpoint location, so a job killed at any point and started again with the same
checkpoint resumes where it stopped and loses nothing.

Spark's Kafka sink is at-least-once: if the job dies after a micro-batch wrote its results but
before Spark recorded the batch as committed in the checkpoint, the restarted job runs that
batch again over the same input offsets and the same state and writes the same window results
a second time.  The duplicates are identical, so **consumers dedupe by (key, window_start)**
(see `dedupe_results`); after dedupe the output is exactly the set of windows, each once.

Batch (`batch_results`, `--batch`) computes the same aggregation over everything in the topic
at once with `spark.read.format("kafka")`; without a stream there is no late data, so every
window is complete and the watermark does not apply.

    python -m tmqgate.pipelines.windowed --bootstrap 127.0.0.1:9092 --input events --output windows \\
        --checkpoint /tmp/windows-ckpt
    python -m tmqgate.pipelines.windowed --bootstrap 127.0.0.1:9092 --input events --output windows-batch --batch
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

WINDOW = "10 seconds"
WATERMARK = "5 seconds"
WINDOW_MS = 10_000


# --------------------------------------------------------------------------- the transformation


def kafka_options(bootstrap: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Options common to the Kafka source and sink; `extra` keys are Kafka client settings
    (e.g. {"security.protocol": "SSL"}) and get Spark's `kafka.` prefix."""
    opts = {"kafka.bootstrap.servers": bootstrap}
    for k, v in (extra or {}).items():
        opts[k if k.startswith("kafka.") else f"kafka.{k}"] = v
    return opts


def parse_events(kafka_df: DataFrame) -> DataFrame:
    """Kafka rows -> (key, value, ts, event_time); values that are not event JSON are dropped."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    schema = StructType([
        StructField("key", StringType()),
        StructField("value", DoubleType()),
        StructField("ts", LongType()),
    ])
    parsed = kafka_df.select(F.from_json(F.col("value").cast("string"), schema).alias("e"))
    return (parsed.select("e.key", "e.value", "e.ts")
            .where(F.col("key").isNotNull() & F.col("value").isNotNull() & F.col("ts").isNotNull())
            .withColumn("event_time", F.timestamp_millis(F.col("ts"))))


def window_aggregate(events: DataFrame, window: str = WINDOW, watermark: str | None = WATERMARK) -> DataFrame:
    """Sum and count per key per tumbling window -> (key, window_start, window_end, sum, count),
    window bounds in epoch milliseconds."""
    from pyspark.sql import functions as F

    if watermark:
        events = events.withWatermark("event_time", watermark)
    agg = (events.groupBy(F.window(F.col("event_time"), window).alias("w"), F.col("key"))
           .agg(F.sum("value").alias("sum"), F.count(F.lit(1)).alias("count")))
    return agg.select(
        "key",
        F.unix_millis(F.col("w.start")).alias("window_start"),
        F.unix_millis(F.col("w.end")).alias("window_end"),
        "sum",
        "count",
    )


def to_kafka_rows(results: DataFrame) -> DataFrame:
    """(key, window_start, window_end, sum, count) -> Kafka sink rows (key, value as JSON)."""
    from pyspark.sql import functions as F

    return results.select(
        F.col("key").alias("key"),
        F.to_json(F.struct("key", "window_start", "window_end", "sum", "count")).alias("value"),
    )


# --------------------------------------------------------------------------- streaming and batch


def start_stream(spark: SparkSession, bootstrap: str, input_topic: str, output_topic: str, checkpoint: str,
                 *, trigger_seconds: float = 1.0, available_now: bool = False,
                 starting_offsets: str = "earliest", max_offsets_per_trigger: int | None = None,
                 fail_on_data_loss: bool = True, window: str = WINDOW, watermark: str = WATERMARK,
                 kafka_extra: Mapping[str, str] | None = None, query_name: str | None = None) -> StreamingQuery:
    """Start the streaming job (append mode, Kafka sink, `checkpoint` for recovery)."""
    reader = (spark.readStream.format("kafka").options(**kafka_options(bootstrap, kafka_extra))
              .option("subscribe", input_topic)
              .option("startingOffsets", starting_offsets)
              .option("failOnDataLoss", str(fail_on_data_loss).lower()))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    results = window_aggregate(parse_events(reader.load()), window, watermark)
    writer = (to_kafka_rows(results).writeStream.format("kafka")
              .options(**kafka_options(bootstrap, kafka_extra))
              .option("topic", output_topic)
              .option("checkpointLocation", checkpoint)
              .outputMode("append"))
    if query_name:
        writer = writer.queryName(query_name)
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    return writer.start()


def batch_results(spark: SparkSession, bootstrap: str, input_topic: str, *, window: str = WINDOW,
                  starting_offsets: str = "earliest", ending_offsets: str = "latest",
                  kafka_extra: Mapping[str, str] | None = None) -> DataFrame:
    """The same aggregation over the topic's current contents (no watermark in batch)."""
    kafka_df = (spark.read.format("kafka").options(**kafka_options(bootstrap, kafka_extra))
                .option("subscribe", input_topic)
                .option("startingOffsets", starting_offsets)
                .option("endingOffsets", ending_offsets)
                .load())
    return window_aggregate(parse_events(kafka_df), window, watermark=None)


def write_batch(results: DataFrame, bootstrap: str, output_topic: str,
                kafka_extra: Mapping[str, str] | None = None) -> None:
    (to_kafka_rows(results).write.format("kafka").options(**kafka_options(bootstrap, kafka_extra))
     .option("topic", output_topic).save())


# --------------------------------------------------------------------------- consumers' side


def dedupe_results(values: Iterable[bytes | str | Mapping[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Output records (JSON values) -> {(key, window_start): result}, one per window.

    A window written twice (at-least-once sink, after a restart) has the same result both
    times; a differing duplicate means the pipeline is wrong, so it raises ValueError.
    """
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for v in values:
        r = dict(v) if isinstance(v, Mapping) else json.loads(v)
        k = (r["key"], int(r["window_start"]))
        if k in out and out[k] != r:
            raise ValueError(f"window {k} written with different results: {out[k]} vs {r}")
        out[k] = r
    return out


# --------------------------------------------------------------------------- CLI


def _kv(s: str) -> tuple[str, str]:
    k, sep, v = s.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {s!r}")
    return k, v


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tmqgate.pipelines.windowed", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT]")
    p.add_argument("--input", required=True, help="topic of JSON events {key, value, ts}")
    p.add_argument("--output", help="topic for the window results (batch: optional, else printed)")
    p.add_argument("--checkpoint", help="checkpoint location (streaming; required there)")
    p.add_argument("--batch", action="store_true", help="one batch over the topic's current contents")
    p.add_argument("--starting-offsets", default="earliest", help="earliest | latest | JSON (first start only)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--trigger-seconds", type=float, default=1.0)
    p.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    p.add_argument("--window", default=WINDOW)
    p.add_argument("--watermark", default=WATERMARK)
    p.add_argument("--master", default=None, help="Spark master (default local[2]; spark-submit's own)")
    p.add_argument("--kafka-option", type=_kv, action="append", default=[], metavar="KEY=VALUE",
                   help="Kafka client setting for source and sink (repeatable)")
    p.add_argument("--conf", type=_kv, action="append", default=[], metavar="KEY=VALUE",
                   help="Spark setting (repeatable)")
    a = p.parse_args(argv)
    if not a.batch and not (a.output and a.checkpoint):
        p.error("streaming needs --output and --checkpoint")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    from tmqgate.pipelines.session import build_session

    owned = SparkSession.getActiveSession() is None
    spark = build_session("tmqgate-windowed" + ("-batch" if args.batch else ""), args.master, dict(args.conf))
    extra = dict(args.kafka_option)
    try:
        if args.batch:
            results = batch_results(spark, args.bootstrap, args.input, window=args.window, kafka_extra=extra)
            if args.output:
                results = results.cache()
                write_batch(results, args.bootstrap, args.output, extra)
                print(f"wrote {results.count()} window results to {args.output}", flush=True)
            else:
                for row in results.orderBy("window_start", "key").toJSON().collect():
                    print(row, flush=True)
            return 0
        query = start_stream(spark, args.bootstrap, args.input, args.output, args.checkpoint,
                             trigger_seconds=args.trigger_seconds, available_now=args.available_now,
                             starting_offsets=args.starting_offsets,
                             max_offsets_per_trigger=args.max_offsets_per_trigger,
                             window=args.window, watermark=args.watermark, kafka_extra=extra)
        # One line per completed micro-batch (after Spark committed it), for operators and tests.
        last = -1
        while query.isActive:
            progress = query.lastProgress
            if progress and progress["batchId"] != last:
                last = progress["batchId"]
                print(f"batch {last} rows={progress['numInputRows']} "
                      f"watermark={progress.get('eventTime', {}).get('watermark', '-')}", flush=True)
            time.sleep(0.2)
        exc = query.exception()
        if exc is not None:
            print(f"query failed: {exc}", file=sys.stderr, flush=True)
            return 1
        return 0
    finally:
        if owned:
            spark.stop()


if __name__ == "__main__":
    sys.exit(main())
