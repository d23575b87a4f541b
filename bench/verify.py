"""After the contenders ran: reads their Delta tables with Spark to check row counts and duplicates,
and computes Sharelake's end-to-end latency figures.

Called once by `bench.run` at the end (one local SparkSession, started only then, so it never
competes with a contender). Latency is the Delta commit time of the version holding a row minus
the row's `kafka_timestamp` (the produce() call, CreateTime). Each Sharelake commit records the
`ingested_at` stamp that all of its rows carry (`userMetadata.sharelake.ingested_at_us`), so rows
join to their commit's `commitInfo.timestamp` exactly; the `ingested_at` column itself (the stamp
taken before the write) is reported beside it as the lower proxy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from app.spark_session import build_spark
from bench.delta_log import read_commits

VERIFY_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.shuffle.partitions": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.driver.memory": "2g",
}


@dataclass
class TableCheck:
    rows: int
    distinct_offsets: int  # distinct (topic, partition, offset)

    @property
    def duplicates(self) -> int:
        return self.rows - self.distinct_offsets


@dataclass
class Latency:
    samples: int
    unmatched: int  # rows whose ingested_at names no commit (should be 0)
    commit_ms: np.ndarray = field(repr=False)  # commit time - kafka_timestamp, per row
    ingested_ms: np.ndarray = field(repr=False)  # ingested_at - kafka_timestamp, per row

    def pct(self, which: str, q: float) -> float:
        values = self.commit_ms if which == "commit" else self.ingested_ms
        return float(np.percentile(values, q)) if len(values) else float("nan")


def open_spark() -> SparkSession:
    return build_spark("sharelake-bench-verify", "local[2]", VERIFY_CONF)


def check_table(spark: SparkSession, table: Path) -> TableCheck:
    row = (
        spark.read.format("delta")
        .load(str(table))
        .agg(F.count(F.lit(1)).alias("n"), F.count_distinct("topic", "partition", "offset").alias("d"))
        .first()
    )
    assert row is not None
    return TableCheck(int(row["n"]), int(row["d"]))


def commit_times(table: Path) -> dict[int, int]:
    """ingested_at (epoch micros) -> commit timestamp (epoch millis), for Sharelake's appends."""
    out: dict[int, int] = {}
    for c in read_commits(table):
        stamp = (c.user_metadata.get("sharelake") or {}).get("ingested_at_us")
        if stamp is not None and c.output_rows > 0:
            out[int(stamp)] = c.timestamp_ms
    return out


def sharelake_latency(spark: SparkSession, table: Path, min_id: int) -> Latency:
    """Latency of the rows with id >= min_id (the warm-up records are left out)."""
    commits = spark.createDataFrame(sorted(commit_times(table).items()), "stamp_us long, commit_ms long")
    rows = (
        spark.read.format("delta")
        .load(str(table))
        .where(F.col("id") >= min_id)
        .select(
            F.unix_micros("ingested_at").alias("stamp_us"),
            F.unix_millis("kafka_timestamp").alias("produced_ms"),
        )
    )
    joined = rows.join(commits, "stamp_us", "left").select(
        (F.col("commit_ms") - F.col("produced_ms")).alias("commit_latency"),
        (F.floor(F.col("stamp_us") / 1000) - F.col("produced_ms")).alias("ingested_latency"),
    )
    pdf = joined.toPandas()
    matched = pdf["commit_latency"].notna()
    return Latency(
        samples=len(pdf),
        unmatched=int((~matched).sum()),
        commit_ms=pdf.loc[matched, "commit_latency"].to_numpy(dtype=float),
        ingested_ms=pdf["ingested_latency"].to_numpy(dtype=float),
    )
