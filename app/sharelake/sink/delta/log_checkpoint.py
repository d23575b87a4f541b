"""A table's log kept short: a checkpoint of its latest version, then its expired commits deleted.

It runs in a table's background checkpoint thread (every `delta.checkpoint_interval` commits),
never on the commit path.

Why: every append lists `_delta_log` (the whole folder on a local disk, HDFS, ADLS or GCS), so its
cost grows with the files there; each commit adds two (`N.json` and its `N.crc` checksum). Only
deleting expired ones keeps the cost flat (docs/storage.md, Table health).

- **The checkpoint** is Delta Kernel's (`Snapshot.writeCheckpoint` on the table's latest snapshot):
  in the driver, no Spark job. Kernel then runs its expired-log cleanup, the same rule as Delta's:
  commit and checkpoint files older than the table's `delta.logRetentionDuration` go, back to the
  newest checkpoint that is itself expired, so every version inside the retention can still be
  read. Kernel runs that cleanup only for a snapshot built as the latest (`Table.checkpoint` at a
  given version skips it), hence the latest snapshot here. Unlike Delta's own cleanup (inside its
  in-commit checkpoints) it does not round the cutoff down to midnight UTC, so the log holds one
  retention, not up to a day more.
- **The checksums** of deleted commits are left behind by Kernel's cleanup (it deletes commit and
  checkpoint files only); a `.crc` describes one version and is useless once that version's commit
  is gone, so the ones older than the oldest commit left are deleted here (a dozen lines: no
  library does this).
- **Fallback**: when Kernel refuses the table (a table feature it cannot write), Spark's
  `DeltaLog.checkpoint()`, which cleans the log its own way (midnight-rounded cutoff).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from sharelake.table.location import TableLocation

COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
CHECKSUM_FILE = re.compile(r"^(\d{20})\.crc$")


@dataclass(frozen=True)
class Checkpointed:
    version: int  # the version checkpointed
    how: str  # "Delta Kernel", or Spark's with the reason Kernel refused
    oldest_commit: int | None  # the oldest commit the log still holds, after the cleanup


class CheckpointExists(Exception):
    """The latest version already has a checkpoint (another writer's, or Delta's own)."""


def checkpoint_latest(session: SparkSession, location: TableLocation) -> Checkpointed:
    """Checkpoint the table's latest version and clean its expired log; CheckpointExists when it
    already had one. Raises what Spark's fallback raises when neither can write it."""
    jvm = session.sparkContext._jvm
    jsc = session.sparkContext._jsc
    assert jvm is not None and jsc is not None
    hadoop = jsc.hadoopConfiguration()
    table_path = location.path
    try:
        engine = jvm.io.delta.kernel.defaults.engine.DefaultEngine.create(hadoop)
        snapshot = jvm.io.delta.kernel.Table.forPath(engine, table_path).getLatestSnapshot(engine)
        version = int(snapshot.getVersion())
        snapshot.writeCheckpoint(engine)  # then Kernel's expired-log cleanup
        how = "Delta Kernel"
    except Exception as kernel_error:  # noqa: BLE001 - e.g. a table feature Kernel cannot checkpoint
        if "CheckpointAlreadyExists" in str(kernel_error):
            raise CheckpointExists(table_path) from None
        session.sparkContext.setLocalProperty("spark.job.description", "sharelake checkpoint")
        delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(session._jsparkSession, table_path)
        delta_log.checkpoint()
        version = int(delta_log.unsafeVolatileSnapshot().version())
        how = f"Spark (Kernel refused: {str(kernel_error).splitlines()[0][:160]})"
    return Checkpointed(version, how, drop_orphan_checksums(jvm, hadoop, location))


def drop_orphan_checksums(jvm: Any, hadoop: Any, location: TableLocation) -> int | None:
    """Delete the `N.crc` files whose commit `N.json` is gone; the oldest commit left."""
    log_dir = jvm.org.apache.hadoop.fs.Path(location.delta_log)
    fs = log_dir.getFileSystem(hadoop)
    names = [str(status.getPath().getName()) for status in fs.listStatus(log_dir)]
    commits = [int(m.group(1)) for m in map(COMMIT_FILE.match, names) if m]
    if not commits:
        return None
    oldest = min(commits)
    for name in names:
        m = CHECKSUM_FILE.match(name)
        if m and int(m.group(1)) < oldest:
            fs.delete(jvm.org.apache.hadoop.fs.Path(log_dir, name), False)
    return oldest
