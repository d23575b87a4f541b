"""The contenders of the benchmark, one module each, all returning a `RunResult`.

`bench.run` calls `CONTENDERS[name](ctx)` for every run; each module's docstring says what its
number measures.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.contenders.base import RunContext, RunResult
from bench.contenders.perf_tool import run_perf_tool
from bench.contenders.share_consumer_drain import run_share_consumer_drain
from bench.contenders.sharelake import run_sharelake, run_sharelake_before
from bench.contenders.sharelake_consumer_group import run_sharelake_consumer_group
from bench.contenders.sink_ceiling import run_sink_ceiling
from bench.contenders.spark_kafka_source import run_spark_kafka_source

Contender = Callable[[RunContext], RunResult]

CONTENDERS: dict[str, Contender] = {
    "sharelake": run_sharelake,
    "sharelake-before": run_sharelake_before,
    "sharelake-consumer-group": run_sharelake_consumer_group,
    "spark-kafka-source": run_spark_kafka_source,
    "share-consumer-drain": run_share_consumer_drain,
    "perf-tool": run_perf_tool,
    "sink-ceiling": run_sink_ceiling,
}

LABELS: dict[str, str] = {
    "sharelake": "(a) Sharelake",
    "sharelake-before": "(a0) Sharelake before the change (--before-sets)",
    "sharelake-consumer-group": "(a2) Sharelake on a consumer group",
    "spark-kafka-source": "(b) Spark Kafka source",
    "share-consumer-drain": "(c) plain ShareConsumer drain",
    "perf-tool": "(d) Kafka ShareConsumerPerformance",
    "sink-ceiling": "(e) sink ceiling (Arrow -> Delta, no Kafka)",
}

__all__ = ["CONTENDERS", "LABELS", "Contender", "RunContext", "RunResult"]
