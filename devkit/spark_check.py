"""The local SparkSession that reads a run's tables once its jobs are done (`spark_session`), so it never
competes with them: the bench's checks and the soak's final count use it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from devkit.paths import jars_env
from sharelake.run.spark_session import build_spark

VERIFY_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.driver.memory": "2g",
}


@contextmanager
def spark_session() -> Iterator[SparkSession]:
    """The benchmark's own SparkSession (not a job's), which reads the runs' tables; stopped at the end."""
    os.environ.setdefault("SHARELAKE_JARS", jars_env())  # the checkout's jars
    spark = build_spark("sharelake-bench-verify", "local[2]", VERIFY_CONF)
    try:
        yield spark
    finally:
        spark.stop()
