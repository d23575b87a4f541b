"""Builds (or joins) the SparkSession with Delta Lake and the Arrow path switched on.

Called by the jobs and the test fixture. Under `spark-submit.sh` the session already has the Delta
jars (and the S3A ones when `make s3` fetched them) from `--jars`; from plain Python (tests, local
runs) the jars come from the Maven-resolved cache. `extra_conf` is the job's `[spark_conf]`
section. Python workers must run the project's interpreter (`PYSPARK_PYTHON`), or they pick the
system Python and fail on missing pyarrow.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from app.paths import S3_JARS, SPARK_JARS, jars_in

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


def build_spark(app_name: str, master: str | None = None, extra_conf: dict[str, str] | None = None) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    conf = {**DEFAULT_CONF, **(extra_conf or {})}
    if not os.environ.get("SHARELAKE_SUBMITTED"):  # spark-submit.sh passes the jars with --jars
        jars = [*jars_in(SPARK_JARS), *sorted(S3_JARS.glob("*.jar"))]
        conf.setdefault("spark.jars", ",".join(str(j) for j in jars))
    for k, v in conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
