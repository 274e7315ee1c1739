"""Spark pipelines that read from and write to tmqgate (or any Kafka broker).

`pipelines.windowed` is the windowed aggregation (10 s tumbling event-time windows, 5 s
watermark, sum and count per key) as a Structured Streaming job and as a batch job;
`pipelines.session` builds a SparkSession that loads Spark's Kafka connector from the
jars installed by `scripts/install_java.sh` (nothing is downloaded at run time).
"""
