"""DescribeLogDirs (``kafka-log-dirs``, and ``kafka-reassign-partitions``, which asks it for
every replica's directory): this broker's one log directory — its data directory — with each
partition it holds a replica of, its size in bytes and the volume's total and free bytes.

The partitions are those whose records live in a write-ahead log here: plain Kafka topics
and SQL databases (a TDengine topic is a view over a database's vnodes, not a log of its own;
the internal topics are kept in the group and transaction logs). On a cluster only the
partitions this broker is a replica of are listed, as on Kafka. ``offset_lag`` is Kafka's
high watermark minus the log end, floored at 0 — always 0 for a replica that is not a future
one, and tmqgate moves no replica between directories.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, cast

from tmqgate.broker.acl.model import Operation
from tmqgate.broker.apis import ApiKey, apis_with
from tmqgate.broker.handlers.context import AdminApis
from tmqgate.broker.topics import KAFKA, TSDB
from tmqgate.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from tmqgate.protocol.bodies.describe_log_dirs import (
        DescribeLogDirsRequest,
        DescribeLogDirsResponse,
        DescribeLogDirsResponsePartition,
        DescribeLogDirsResponseTopic,
    )
    from tmqgate.protocol.messages import Request

api = apis_with(AdminApis)


@api(ApiKey.DESCRIBE_LOG_DIRS, 1, 5)
async def describe_log_dirs(ctx: AdminApis, req: Request) -> DescribeLogDirsResponse:
    if ctx.authorizer is not None and not ctx.authorizer.allows_cluster(Operation.DESCRIBE):
        return {"throttle_time_ms": 0, "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "results": []}
    asked = cast("DescribeLogDirsRequest", req.body).get("topics")
    wanted = None if asked is None else {t["topic"]: set(t["partitions"]) for t in asked}
    topics: list[DescribeLogDirsResponseTopic] = []
    for topic in ctx.topics.all():
        if topic.kind not in (KAFKA, TSDB) or (wanted is not None and topic.name not in wanted):
            continue
        parts: list[DescribeLogDirsResponsePartition] = []
        for p in range(topic.partitions):
            if wanted is not None and p not in wanted[topic.name]:
                continue
            state = ctx.topics.partition_state(topic, p)
            if state is not None and ctx.config.node_id not in state.replicas:
                continue
            parts.append({"partition_index": p, "partition_size": ctx.store.log_size(topic.db, p),
                          "offset_lag": 0, "is_future_key": False})
        if parts:
            topics.append({"name": topic.name, "partitions": parts})
    path = os.path.abspath(ctx.config.data_dir)
    usage = shutil.disk_usage(path)
    return {"throttle_time_ms": 0, "error_code": 0, "results": [
        {"error_code": 0, "log_dir": path, "topics": topics, "total_bytes": usage.total,
         "usable_bytes": usage.free, "is_cordoned": False}]}
