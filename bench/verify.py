"""After the contenders ran: reads their Delta tables with Spark to check row counts and duplicates,
and computes the latency phase's figures, the same way for every contender.

The checks read with `devkit.spark_check.spark_session`, the benchmark's own local SparkSession,
started only once the contenders are done, so it never competes with one. Latency of a row =
`commitInfo.timestamp` of the Delta version that added the data file holding the row - the row's
`kafka_timestamp` (the produce() call, CreateTime). Each row is read with its `_metadata.file_path`;
the file's version comes from the `add` actions of `_delta_log/*.json`
(`devkit.delta_log.added_files`), so nothing but the table itself is used, and a contender needs no
column of its own. Warm-up rows (id below the first measured id) are left out. Per window of
`window_s` seconds of produce time (from the first measured record) the p50, p99 and max are kept
too, to show a catch-up tail. For Sharelake the `ingested_at` column (its stamp before the write) is
kept beside it as the lower proxy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from devkit.delta_log import added_files, read_commits, relative_data_path
from devkit.spark_check import spark_session

APPENDS = ("WRITE", "STREAMING UPDATE")  # the operations that append rows
PROXY_COLUMN = "ingested_at"  # Sharelake's stamp, taken before its write


@dataclass
class TableCheck:
    rows: int
    distinct_offsets: int  # distinct (topic, partition, offset)

    @property
    def duplicates(self) -> int:
        return self.rows - self.distinct_offsets


@dataclass
class Window:
    """The rows produced in [start_s, end_s) after the first measured record (the last window also
    holds the few records produced after the measured part's nominal end)."""

    start_s: float
    end_s: float
    rows: int
    p50_ms: float
    p99_ms: float
    max_ms: float


@dataclass
class Latency:
    samples: int  # measured rows in the table (id >= the first measured id)
    unmatched: int  # rows whose data file no add action names (should be 0): left out
    rewritten: int  # rows in files a later non-append commit wrote (a DELETE rewrite): timed to that commit
    commit_ms: np.ndarray = field(repr=False)  # commit time - kafka_timestamp, per matched row
    windows: list[Window] = field(default_factory=list)
    proxy_ms: np.ndarray | None = field(default=None, repr=False)  # ingested_at - kafka_timestamp (Sharelake)

    def pct(self, q: float, which: str = "commit") -> float:
        values = self.commit_ms if which == "commit" else self.proxy_ms
        return float(np.percentile(values, q)) if values is not None and len(values) else math.nan


def check_table(spark: SparkSession, table: Path) -> TableCheck:
    row = (
        spark.read.format("delta")
        .load(str(table))
        .agg(F.count(F.lit(1)).alias("n"), F.count_distinct("topic", "partition", "offset").alias("d"))
        .first()
    )
    assert row is not None
    return TableCheck(int(row["n"]), int(row["d"]))


def windows_of(produced_ms: np.ndarray, commit_ms: np.ndarray, window_s: float, span_s: float) -> list[Window]:
    """p50/p99/max of `commit_ms` per window of produce time; windows cover [0, span_s) from the
    earliest produce time, rows past the end go to the last window."""
    if not len(produced_ms):
        return []
    count = max(1, math.ceil(span_s / window_s - 1e-9))
    offset_s = (produced_ms - produced_ms.min()) / 1000.0
    index = np.minimum((offset_s // window_s).astype(int), count - 1)
    out = []
    for i in range(count):
        values = commit_ms[index == i]
        pcts = np.percentile(values, [50, 99, 100]) if len(values) else [math.nan] * 3
        out.append(Window(float(i * window_s), float((i + 1) * window_s), len(values), *map(float, pcts)))
    return out


def table_latency(spark: SparkSession, table: Path, min_id: int, window_s: float, span_s: float) -> Latency:
    """Latency of the rows with id >= min_id (the warm-up records are left out); see the docstring."""
    df = spark.read.format("delta").load(str(table)).where(F.col("id") >= min_id)
    versions = added_files(table)
    commits = {c.version: c for c in read_commits(table)}
    mapping = []
    for (uri,) in df.select(F.col("_metadata.file_path")).distinct().collect():
        version = versions.get(relative_data_path(uri, table))
        c = commits.get(version) if version is not None else None
        mapping.append((uri, c.timestamp_ms if c else None, None if c is None else c.operation not in APPENDS))
    files = spark.createDataFrame(mapping, "file_path string, commit_ms long, rewritten boolean")
    proxy = PROXY_COLUMN in df.columns
    rows = df.select(
        F.col("_metadata.file_path").alias("file_path"),
        F.unix_millis("kafka_timestamp").alias("produced_ms"),
        *([F.unix_millis(PROXY_COLUMN).alias("proxy_ms")] if proxy else []),
    )
    pdf = (
        rows.join(F.broadcast(files), "file_path", "left")
        .select(
            "produced_ms",
            "rewritten",
            (F.col("commit_ms") - F.col("produced_ms")).alias("latency_ms"),
            *([(F.col("proxy_ms") - F.col("produced_ms")).alias("proxy_ms")] if proxy else []),
        )
        .toPandas()
    )
    matched = pdf["latency_ms"].notna()
    produced = pdf.loc[matched, "produced_ms"].to_numpy(dtype=float)
    latency = pdf.loc[matched, "latency_ms"].to_numpy(dtype=float)
    return Latency(
        samples=len(pdf),
        unmatched=int((~matched).sum()),
        rewritten=int(pdf.loc[matched, "rewritten"].astype(bool).sum()),
        commit_ms=latency,
        windows=windows_of(produced, latency, window_s, span_s),
        proxy_ms=pdf["proxy_ms"].to_numpy(dtype=float) if proxy else None,
    )


class TableRun(Protocol):
    """A run that wrote one table: whether it went well, and what its table holds once checked."""

    ok: bool
    error: str
    table: str
    rows: int
    duplicates: int


R = TypeVar("R", bound=TableRun)


def check_exactly_once(runs: Sequence[R], expected: Callable[[R], int]) -> None:
    """Rows and duplicate offsets of every ok run's table (one SparkSession); a table that does not
    hold exactly `expected(run)` rows, each offset once, fails its run."""
    with spark_session() as spark:
        for r in runs:
            if not r.ok:
                continue
            check = check_table(spark, Path(r.table))
            r.rows, r.duplicates = check.rows, check.duplicates
            want = expected(r)
            if r.rows != want or r.duplicates:
                r.ok, r.error = False, f"not exactly once: {r.rows} rows of {want}, {r.duplicates} duplicates"
