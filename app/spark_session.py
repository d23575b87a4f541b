"""Builds (or joins) the SparkSession with Delta Lake and the Arrow path switched on.

Called by the `sharelake` subcommands and the test fixture. Under spark-submit the session already
has its jars (`--jars`, `--packages`, or a cluster image's). Started from plain Python (`sharelake
ingest` in a terminal or a scheduler, the tests) it takes the jars of the folders in `SHARELAKE_JARS`
(a checkout's `make jars` fills them), else it has Spark resolve `RUNTIME_PACKAGES` from Maven
Central once (Ivy's cache keeps them). `extra_conf` is the job's `[spark_conf]` section. Python
workers must run the job's interpreter (`PYSPARK_PYTHON`), or they pick the system Python and fail
on missing pyarrow.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import version
from pathlib import Path

from pyspark.sql import SparkSession

DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
DEFAULT_CONF = {
    **DELTA_CONF,
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    # a Delta commit per micro-batch: keep the streaming checkpoint lean
    "spark.sql.streaming.minBatchesToRetain": "20",
}


# what the Sharelake jobs need beside Spark's own jars: the same artifacts as conf/maven/spark-jars.pom.xml
RUNTIME_PACKAGES = (
    f"io.delta:delta-spark_4.2_2.13:{version('delta-spark')}",
    f"org.apache.spark:spark-avro_2.13:{version('pyspark')}",
    "org.apache.kafka:kafka-clients:4.4.0",  # its Admin: the share group's state (app.group_status)
)
# kafka-clients' own dependencies that Spark's jars already hold
RUNTIME_EXCLUDES = (
    "com.github.luben:zstd-jni",
    "at.yawk.lz4:lz4-java",
    "org.xerial.snappy:snappy-java",
    "org.slf4j:slf4j-api",
)


def jar_conf() -> dict[str, str]:
    """Where a session started from plain Python gets its jars; nothing under spark-submit."""
    if os.environ.get("SHARELAKE_SUBMITTED") or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return {}  # spark-submit started the JVM with its jars
    folders = [Path(f) for f in os.environ.get("SHARELAKE_JARS", "").split(os.pathsep) if f]
    jars = [str(jar) for folder in folders for jar in sorted(folder.glob("*.jar"))]
    if jars:
        return {"spark.jars": ",".join(jars)}
    return {"spark.jars.packages": ",".join(RUNTIME_PACKAGES), "spark.jars.excludes": ",".join(RUNTIME_EXCLUDES)}


def build_spark(app_name: str, master: str | None = None, extra_conf: dict[str, str] | None = None) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    conf = {**DEFAULT_CONF, **(extra_conf or {})}
    for key, value in jar_conf().items():
        conf.setdefault(key, value)
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
