"""Table maintenance beside the ingest: OPTIMIZE (compaction of small files), then VACUUM.

One call runs once over every table of the config (a scheduled job), and is safe beside a live
ingest job. Each micro-batch of the ingest is one Delta commit with its own small files; OPTIMIZE rewrites them into
fewer large ones (a commit that only removes and adds files: no offsets, so the dedup cache passes
over it), and VACUUM deletes the files no version within the retention needs any more.

VACUUM's retention (`maintenance.vacuum_retain_hours`, default Delta's 7 days) bounds time travel,
and must stay longer than any write in flight (a file written but not yet committed looks
unreferenced): Delta refuses less than the table's `delta.deletedFileRetentionDuration` unless
`spark.databricks.delta.retentionDurationCheck.enabled` is false.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from sharelake.sink.delta.commit_lock import commit_lock
from sharelake.table.location import TableLocation

log = logging.getLogger(__name__)


@dataclass
class MaintenanceResult:
    """What one pass did to one table."""

    table: str
    files_before: int
    files_after: int
    bytes_after: int
    files_compacted: int  # data files OPTIMIZE removed (rewritten into fewer)
    optimize_s: float
    vacuum_s: float
    vacuum_mode: str

    def line(self) -> str:
        return (
            f"{self.table}: {self.files_before} -> {self.files_after} data files ({self.bytes_after / 2**20:.1f} MiB; "
            f"OPTIMIZE compacted {self.files_compacted} in {self.optimize_s:.1f}s), "
            f"VACUUM ({self.vacuum_mode}) in {self.vacuum_s:.1f}s"
        )


def maintain_table(
    spark: SparkSession,
    location: str,
    vacuum_retain_hours: float,
    *,
    optimize: bool = True,
    vacuum: bool = True,
    vacuum_mode: str = "lite",
) -> MaintenanceResult | None:
    """OPTIMIZE then VACUUM the Delta table at `location`; None when there is no table there yet.

    VACUUM `lite` deletes the files the log's remove actions name, where a `full` VACUUM lists the
    whole table folder (several times slower on a small table: the bench report has the figures);
    lite needs the log of every commit since the last VACUUM, and when log cleanup removed some,
    Delta refuses it and the full one runs instead."""
    if not DeltaTable.isDeltaTable(spark, location):
        return None
    table = DeltaTable.forPath(spark, location)
    lock = commit_lock(TableLocation.at(location))  # OPTIMIZE and VACUUM commit: on a local disk, one driver at a time
    before = table.detail().collect()[0]
    compacted, started = 0, time.perf_counter()
    if optimize:
        with lock():
            metrics = table.optimize().executeCompaction().collect()
        compacted = int(metrics[0]["metrics"]["numFilesRemoved"]) if metrics else 0
    optimized = time.perf_counter()
    mode = vacuum_mode
    if vacuum:
        path = location.replace("`", "``")
        statement = f"VACUUM delta.`{path}` RETAIN {vacuum_retain_hours} HOURS"
        try:
            with lock():
                spark.sql(f"{statement} {mode.upper()}").collect()
        except Exception as e:
            if mode != "lite" or "LITE" not in str(e).upper():
                raise
            log.info("%s: VACUUM LITE refused (%s); running a full VACUUM", location, str(e).splitlines()[0][:200])
            mode = "full"
            with lock():
                spark.sql(f"{statement} FULL").collect()
    after = table.detail().collect()[0]
    return MaintenanceResult(
        location,
        int(before["numFiles"]),
        int(after["numFiles"]),
        int(after["sizeInBytes"]),
        compacted,
        optimized - started,
        time.perf_counter() - optimized,
        mode if vacuum else "-",
    )
