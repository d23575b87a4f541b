"""A table's commits after they are durable: their post-commit work in flight, and checkpoints off the commit path.

- **The saves in flight**: a commit runs Delta's post-commit work (the `.crc` checksum, and a
  checkpoint when the table's `delta.checkpointInterval` says so) synchronously after it, in the
  committer thread that made it. At most `SAVES_IN_FLIGHT` of them run at once (`wait_for_room`):
  an append may commit while the previous one's post-commit work runs. A MERGE or a DELETE waits
  until all of them are done (`wait_idle`).
- **The background checkpoint**: every `checkpoint_every` commits a thread of its own writes a
  checkpoint with Delta Kernel (shipped with delta-spark), then cleans the expired log
  (`sharelake.sink.delta.log_checkpoint`). Kernel runs in the driver without a Spark job, where Spark's
  `DeltaLog.checkpoint()` runs Spark jobs that, on a small driver, slow the writes running
  meanwhile (docs/ARCHITECTURE.md has the figures); Spark's is the fallback when Kernel refuses a
  table. A failed checkpoint is retried at the next interval.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from pyspark.sql import SparkSession

from sharelake.sink.delta.log_checkpoint import CheckpointExists, checkpoint_latest
from sharelake.table.location import DELTA_LOG, TableLocation

log = logging.getLogger(__name__)

SAVES_IN_FLIGHT = 2  # an append may commit while the previous one's post-commit work (a checkpoint) runs


class Checkpointer:
    """The saves of one table's writer still running, and its checkpoint thread (named after `name`)."""

    def __init__(self, session: SparkSession, location: TableLocation, name: str, checkpoint_every: int):
        """`session`: the table's writer session (the checkpoint reads the table through it)."""
        self._session = session
        self._location = location
        self._every = checkpoint_every
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"delta-checkpoint-{name}")
        self._saves: list[Future[None]] = []  # save()s not finished: committing, or in post-commit work
        self._checkpointing: Future[None] | None = None
        self._checkpointed = -1  # the version of the last checkpoint written or found
        self._lock = threading.Lock()

    # -- saves in flight -------------------------------------------------------------------------------

    def track(self, save: Future[None]) -> None:
        """A save() just started in a committer thread: counted until it has finished its post-commit work."""
        self._saves.append(save)

    def drop(self, save: Future[None]) -> None:
        """A save() whose commit failed: no post-commit work to wait for."""
        self._saves.remove(save)

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
                log.warning("%s: post-commit work of an append failed: %s", self._location.path, error)

    # -- checkpoints -----------------------------------------------------------------------------------

    def checkpoint_if_due(self, version: int | None) -> None:
        """After the commit of `version` (None: none recorded): a checkpoint in the background when
        `checkpoint_every` commits have landed since the last one and none is being written."""
        if version is None:
            return
        with self._lock:
            if self._checkpointed < 0:
                self._checkpointed = self._last_checkpoint_version()
            busy = self._checkpointing is not None and not self._checkpointing.done()
            if busy or version - self._checkpointed < self._every:
                return
            self._checkpointed = version
            self._checkpointing = self._pool.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        started = time.perf_counter()
        try:
            done = checkpoint_latest(self._session, self._location)
        except CheckpointExists:
            return
        except Exception as e:  # noqa: BLE001 - a failed checkpoint is retried at the next interval
            log.warning("%s: background checkpoint failed: %s", self._location.path, e)
            return
        log.info(
            "%s: checkpoint at version %d in %.1fs (background, %s); the log keeps versions from %s",
            self._location.path,
            done.version,
            time.perf_counter() - started,
            done.how,
            done.oldest_commit,
        )

    def _last_checkpoint_version(self) -> int:
        jvm = self._session.sparkContext._jvm
        assert jvm is not None
        try:
            path = jvm.org.apache.hadoop.fs.Path(self._location.file(f"{DELTA_LOG}/_last_checkpoint"))
            fs = path.getFileSystem(self._session.sparkContext._jsc.hadoopConfiguration())
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
        """Let any checkpoint end (after the writer's committer threads have stopped)."""
        self._pool.shutdown(wait=True)
