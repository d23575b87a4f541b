"""Writes one Delta table: appends that return as soon as their commit is durable, DELETEs, checkpoints.

Used twice by `app.sink.dedup_table` (main and dead-letter table); the only place Sharelake calls
Delta's writers. It owns:

- **a SparkSession of its own** (`newSession()`: same SparkContext, its own SQL conf). Delta
  records the version of a session's last commit in `spark.databricks.delta.lastCommitVersionInSession`,
  right after the commit file is written and before any post-commit work; with a session nobody
  else commits through, that value is this writer's commit, so the commit never has to be found
  in the log again. The session also carries the writer's settings: data frames from Arrow are
  RDD-backed, split in parallel tasks (never a driver-side `LocalRelation`), and new tables get
  their properties (stats columns, checkpoint interval).
- **committer threads**. `save()` runs Delta's post-commit work (the `.crc` checksum, and a
  checkpoint when the table's `delta.checkpointInterval` says so) synchronously after the commit.
  `append` runs `save()` in a committer thread and returns the version the moment it appears in
  the session's conf: the caller can ACCEPT while Delta finishes post-commit work, and the next
  append can commit meanwhile (`SAVES_IN_FLIGHT` of them; post-commit work commits nothing, and
  only one thread starts appends, so the conf still names each append's own commit). A DELETE
  waits until every save is done (`wait_idle`).
- **checkpoints off the commit path**: every `checkpoint_every` commits a background thread writes
  a checkpoint with Delta Kernel (shipped with delta-spark), then cleans the expired log
  (`app.sink.log_checkpoint`). Kernel runs in the driver without a Spark job, where Spark's
  `DeltaLog.checkpoint()` runs Spark jobs that, on a small driver, slow the writes running
  meanwhile (docs/ARCHITECTURE.md has the figures); Spark's is the fallback when Kernel
  refuses a table. The tables this writer creates get `delta.checkpointInterval = 10 x
  checkpoint_every`, so Delta's own in-commit checkpoint is only a backstop for other writers.

Proofs: `append` returns the `CommitProof` of its commit and `proof_of_presence` one for records
an earlier commit holds; nothing else mints one (`CommitProof` cannot be constructed directly).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from app import faults
from app.acknowledge.proof import CommitProof
from app.config import interval_s
from app.sink.catalog_tables import register_table
from app.sink.log_checkpoint import CheckpointExists, checkpoint_latest

log = logging.getLogger(__name__)

LAST_COMMIT_CONF = "spark.databricks.delta.lastCommitVersionInSession"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
TABLE_DEFAULTS = "spark.databricks.delta.properties.defaults."
BACKSTOP_FACTOR = 10  # Delta's in-commit checkpoint interval for new tables, in our checkpoint intervals
DELTA_DELETED_FILE_RETENTION_S = 7 * 86400  # delta.deletedFileRetentionDuration by default
ROWS_PER_TASK = 4096  # a data frame's rows are split over at most defaultParallelism tasks of at least this many
# how often `append` looks for its commit's version while save() runs: each look is a py4j call (at
# 5 ms they were a tenth of the driver's Python samples); 10 ms adds 5 ms to an ACCEPT on average
DURABLE_POLL_S = 0.010
SAVES_IN_FLIGHT = 2  # an append may commit while the previous one's post-commit work (a checkpoint) runs


class DeltaWriter:
    def __init__(
        self,
        spark: SparkSession,
        table_path: str,
        name: str,
        checkpoint_every: int,
        stats_columns: tuple[str, ...] = (),
        log_retention: str | None = None,
    ):
        self.table_path = table_path
        self.name = name
        self.checkpoint_every = checkpoint_every
        self.session = spark.newSession()
        conf = {
            "spark.sql.session.timeZone": spark.conf.get("spark.sql.session.timeZone", "UTC") or "UTC",
            # Arrow tables become RDD-backed frames in parallel tasks: below this threshold PySpark makes
            # a LocalRelation, whose projections (the JSON parse) the optimizer evaluates in the driver
            "spark.sql.execution.arrow.localRelationThreshold": "0",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "10000000",  # `frame` chunks the table itself
            "spark.databricks.delta.history.metricsEnabled": "true",  # numOutputRows: partial commits
            TABLE_DEFAULTS + "checkpointInterval": str(BACKSTOP_FACTOR * checkpoint_every),
        }
        if stats_columns:
            conf[TABLE_DEFAULTS + "dataSkippingStatsColumns"] = ",".join(stats_columns)
        if log_retention:  # the log files a table keeps (the append's listing cost; time travel's reach)
            conf[TABLE_DEFAULTS + "logRetentionDuration"] = log_retention
            if interval_s(log_retention) < DELTA_DELETED_FILE_RETENTION_S:  # Delta refuses a log retention
                conf[TABLE_DEFAULTS + "deletedFileRetentionDuration"] = log_retention  # shorter than this
        for key, value in conf.items():
            self.session.conf.set(key, value)
        self._parallelism = max(1, int(self.session.sparkContext.defaultParallelism))
        self._committer = ThreadPoolExecutor(SAVES_IN_FLIGHT, thread_name_prefix=f"delta-commit-{name}")
        self._checkpointer = ThreadPoolExecutor(1, thread_name_prefix=f"delta-checkpoint-{name}")
        self._saves: list[Future[None]] = []  # save()s not finished: committing, or in post-commit work
        self._checkpointing: Future[None] | None = None
        self._checkpointed = -1  # the version of the last checkpoint this writer wrote or found
        self._lock = threading.Lock()
        # raises when this job may not commit to the table now (app.sink.writer_lease, on S3)
        self.before_commit: Callable[[], None] | None = None
        # a table addressed by catalog name: entered in the catalog after a commit, until that succeeds
        self.register_as: str | None = None

    # -- data frames ---------------------------------------------------------------------------------

    def frame(self, rows: pa.Table) -> DataFrame:
        """`rows` as a data frame of this writer's session, split over parallel tasks (one Arrow batch each)."""
        n = rows.num_rows
        tasks = max(1, min(self._parallelism, math.ceil(n / ROWS_PER_TASK)))
        per_task = max(1, math.ceil(n / tasks))
        # one unsliced batch per task (`take` copies): PySpark rebuilds nested list columns (headers)
        # with ListArray.from_arrays, which refuses slices of arrays that have nulls
        batches = [
            batch
            for start in range(0, max(n, 1), per_task)
            for batch in rows.take(pa.array(range(start, min(n, start + per_task)), pa.int64()))
            .combine_chunks()
            .to_batches()
        ]
        return self.session.createDataFrame(pa.Table.from_batches(batches, rows.schema))

    # -- commits ---------------------------------------------------------------------------------------

    def append(
        self, rows: DataFrame, user_metadata: str, batch_id: int, merge_schema: bool = False
    ) -> CommitProof | None:
        """Append `rows` as one commit; its proof as soon as the commit is durable.

        Delta's post-commit work may still be running then (see the module docstring). None when
        Delta recorded no commit (an empty append to an existing table).
        """
        self.wait_for_room()
        before = self._last_commit()
        if self.before_commit is not None:
            self.before_commit()
        faults.hit(f"before_{self.name}_commit")
        writer = rows.write.format("delta").mode("append").option("userMetadata", user_metadata)
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        description = f"sharelake {self.name} append, batch = {batch_id}"
        future = self._committer.submit(self._save, writer, description)
        self._saves.append(future)
        while True:
            finished = bool(wait([future], timeout=DURABLE_POLL_S).done)
            version = self._last_commit()
            if version is not None and version != before:
                break  # durable: Delta set it right after writing the commit file
            if finished:
                error = future.exception()
                if error is not None:
                    self._saves.remove(future)  # the commit failed: no post-commit work to wait for
                    raise error
                version = self._last_commit()
                if version is None or version == before:
                    return None
                break
        faults.hit(f"after_{self.name}_commit")
        return CommitProof._mint(self.table_path, version)

    def proof_of_presence(self, version: int) -> CommitProof:
        """For records an earlier commit holds: the table version the dedup cache has read up to."""
        return CommitProof._mint(self.table_path, version, already_present=True)

    def _save(self, writer: Any, description: str) -> None:
        self.session.sparkContext.setLocalProperty("spark.job.description", description)
        writer.save(self.table_path)
        if self.register_as is not None:
            register_table(self.session, self.register_as, self.table_path)
            self.register_as = None
        faults.hit(f"{self.name}_post_commit")  # committed, maybe decided; Delta's post-commit work done, ours next
        self._checkpoint_if_due()

    def _last_commit(self) -> int | None:
        value = self.session.conf.get(LAST_COMMIT_CONF, None)
        return int(value) if value not in (None, "", "None") else None

    def delete(self, condition: str, user_metadata: str) -> int:
        """DELETE FROM the table WHERE `condition`, with `user_metadata` on its commit; rows deleted."""
        self.wait_idle()
        if self.before_commit is not None:
            self.before_commit()
        path = self.table_path.replace("`", "``")
        self.session.conf.set(USER_METADATA_CONF, user_metadata)
        try:
            deleted = self.session.sql(f"DELETE FROM delta.`{path}` WHERE {condition}").collect()
        finally:
            self.session.conf.unset(USER_METADATA_CONF)
        return int(deleted[0][0]) if deleted and deleted[0][0] is not None else 0

    def wait_for_room(self) -> None:
        """Until fewer than SAVES_IN_FLIGHT save()s run (the oldest finishes its post-commit work)."""
        while True:
            self._forget_finished()
            if len(self._saves) < SAVES_IN_FLIGHT:
                return
            wait(self._saves, return_when=FIRST_COMPLETED)

    def wait_idle(self) -> None:
        """Until every save() has finished its post-commit work."""
        wait(self._saves)
        self._forget_finished()

    def _forget_finished(self) -> None:
        for future in [f for f in self._saves if f.done()]:
            self._saves.remove(future)
            error = future.exception()
            if error is not None:  # the commit itself was durable (else append raised)
                log.warning("%s: post-commit work of an append failed: %s", self.table_path, error)

    # -- checkpoints -----------------------------------------------------------------------------------

    def _checkpoint_if_due(self) -> None:
        version = self._last_commit()
        if version is None:
            return
        with self._lock:
            if self._checkpointed < 0:
                self._checkpointed = self._last_checkpoint_version()
            busy = self._checkpointing is not None and not self._checkpointing.done()
            if busy or version - self._checkpointed < self.checkpoint_every:
                return
            self._checkpointed = version
            self._checkpointing = self._checkpointer.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        started = time.perf_counter()
        try:
            done = checkpoint_latest(self.session, self.table_path)
        except CheckpointExists:
            return
        except Exception as e:  # noqa: BLE001 - a failed checkpoint is retried at the next interval
            log.warning("%s: background checkpoint failed: %s", self.table_path, e)
            return
        log.info(
            "%s: checkpoint at version %d in %.1fs (background, %s); the log keeps versions from %s",
            self.table_path,
            done.version,
            time.perf_counter() - started,
            done.how,
            done.oldest_commit,
        )

    def _last_checkpoint_version(self) -> int:
        jvm = self.session.sparkContext._jvm
        assert jvm is not None
        try:
            path = jvm.org.apache.hadoop.fs.Path(self.table_path.rstrip("/") + "/_delta_log/_last_checkpoint")
            fs = path.getFileSystem(self.session.sparkContext._jsc.hadoopConfiguration())
            if not fs.exists(path):
                return 0
            stream = fs.open(path)
            try:
                text = str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
            finally:
                stream.close()
            return int(json.loads(text).get("version", 0))
        except Exception:  # noqa: BLE001 - unknown: count from 0
            return 0

    def close(self) -> None:
        """Let the last append finish its post-commit work and any checkpoint end."""
        self.wait_idle()
        self._committer.shutdown(wait=True)
        self._checkpointer.shutdown(wait=True)
