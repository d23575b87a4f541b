"""A maintenance loop beside a running job: OPTIMIZE and VACUUM over and over, and a foreign writer.

Used by the tests that prove the job's commits, its dedup cache and a downstream stream stay right
while the table is compacted and vacuumed under them (tests/test_table_maintenance.py,
tests/test_two_jobs_one_partition.py).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sharelake.ops.maintenance import maintain_table

RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
FOREIGN = "another-writer"  # the topic column of the rows the other writer appends
# 60 s: what OPTIMIZE removed in the first rounds goes. Delta's rule is a retention longer than the
# longest concurrent transaction (a written file not yet committed looks unreferenced). With 18 s,
# one CI run (a loaded machine) saw VACUUM delete a file a commit referenced; the cause was not
# pinned, so the test prints the job's longest write-to-commit window.
VACUUM_RETAIN_HOURS = 1 / 60


class Maintenance(threading.Thread):
    """OPTIMIZE and VACUUM (`optimize`) and a foreign append of a few rows (`foreign`), over and over
    with `pause_s` between rounds, until stopped; counts what each did. VACUUM's retention check is
    relaxed in `spark` meanwhile (a minute is kept)."""

    def __init__(
        self, spark: SparkSession, table: Path, *, optimize: bool = True, foreign: bool = True, pause_s: float = 1.0
    ):
        super().__init__(name="maintenance", daemon=True)
        self.spark, self.table, self.pause_s = spark, str(table), pause_s
        self.steps = [step for step, on in ((self._maintain, optimize), (self.append_foreign, foreign)) if on]
        self.stop = threading.Event()
        self.optimized_files = self.vacuums = self.foreign_rows = self.rounds = 0
        self.conflicts: list[str] = []
        self.passes: list[str] = []  # what each maintenance pass did, for the failure message

    def run(self) -> None:
        self.spark.conf.set(RETENTION_CHECK, "false")
        try:
            self._loop()
        finally:
            self.spark.conf.unset(RETENTION_CHECK)

    def _loop(self) -> None:
        while not self.stop.is_set():
            for step in self.steps:
                try:
                    step()
                except Exception as e:  # noqa: BLE001 - a conflict with the job's commit: counted, tried again
                    self.conflicts.append(f"{step.__name__}: {str(e).splitlines()[0][:200]}")
            self.rounds += 1
            self.stop.wait(self.pause_s)

    def _maintain(self) -> None:
        result = maintain_table(self.spark, self.table, VACUUM_RETAIN_HOURS)
        self.passes.append(f"{time.strftime('%H:%M:%S')} {result.line() if result else 'no table yet'}")
        if result is not None:
            self.optimized_files += result.files_compacted
            self.vacuums += 1

    def append_foreign(self) -> None:
        """One foreign append: a few of the table's rows again, as another topic's (negative offsets)."""
        rows = self.spark.read.format("delta").load(self.table).where(F.col("topic") != FOREIGN).limit(5)
        rows = rows.withColumn("topic", F.lit(FOREIGN)).withColumn("offset", -F.col("offset") - 1)
        n = rows.count()
        rows.write.format("delta").mode("append").save(self.table)
        self.foreign_rows += n
