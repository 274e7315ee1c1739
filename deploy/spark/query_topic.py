"""The compose file's Spark job: reads a TDengine query topic with Spark's stock Kafka source
and prints each minute's average current per location as it streams in.

A query topic's records carry the selected columns as JSON (key = child table, timestamp = the
row's); this job reads `hot` (deploy/spark/setup.sql: SELECT ts, current, voltage, location
FROM power.meters WHERE voltage > 220) from the earliest offset.

    python deploy/spark/query_topic.py --bootstrap tmqgate:19092 --topic hot
"""

from __future__ import annotations

import argparse

from tmqgate.pipelines.session import build_session


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", default="hot")
    p.add_argument("--checkpoint", default="/tmp/query-topic-checkpoint")
    args = p.parse_args()

    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, IntegerType, StringType, StructField, StructType

    spark = build_session("tmqgate-query-topic")
    columns = StructType([StructField("current", DoubleType()), StructField("voltage", IntegerType()),
                          StructField("location", StringType())])
    rows = (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .load()
            .select(F.col("timestamp"), F.from_json(F.col("value").cast("string"), columns).alias("row"))
            .select("timestamp", "row.*"))
    per_minute = (rows.withWatermark("timestamp", "1 minute")
                  .groupBy(F.window("timestamp", "1 minute"), "location")
                  .agg(F.count("*").alias("rows"), F.avg("current").alias("avg_current")))
    query = (per_minute.writeStream.outputMode("update").format("console")
             .option("truncate", "false").option("checkpointLocation", args.checkpoint)
             .trigger(processingTime="10 seconds").start())
    query.awaitTermination()


if __name__ == "__main__":
    main()
