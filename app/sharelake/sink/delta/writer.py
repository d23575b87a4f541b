"""Appends to one Delta table that return once their commit is durable, and the session they commit through.

The ingest's only path to Delta's appends (`sharelake.sink.dedup.dedup_table` opens one writer per table,
main and dead-letter); the same table's MERGEs and DELETEs are `sharelake.sink.delta.merge`'s, its
frames `sharelake.sink.delta.frames`'s, its checkpoints `sharelake.sink.delta.checkpointer`'s. (Outside the
ingest's write path, the replay marks its rows with a Delta MERGE in `sharelake.ops.replay`,
`sharelake.ops.maintenance` runs OPTIMIZE and VACUUM, and `sharelake.sink.delta.catalog_tables` enters a new
table in the catalog with CREATE TABLE.) It owns:

- **the append's transaction**. After a table's first commit (a plain append, which creates it with
  its properties; a table with a layout is created just before it with the layout,
  `sharelake.table.layout`, and appended to as an existing one), every append is Delta's own
  transaction, driven here: it starts on the latest snapshot, checks the caller's `Claim` on that
  version (the dedup table's offsets and its cache: "does a commit up to this version hold any
  offset I claim?"), registers a read of the table, writes the data files (`writeFiles`, the same
  Spark job a plain append runs) and commits them. The registered read makes the commit *not* a
  blind append, so Delta fails it (a `DeltaConcurrentModificationException`) when any other data
  commit landed after that snapshot: the check and the commit are atomic together. On such a
  conflict a new transaction checks again on the newer snapshot and commits the same files (no data
  written twice); if the winner holds claimed offsets, the append raises `ClaimHeld` and the caller
  re-plans (the files written stay unreferenced until VACUUM). An upsert's append of keys the table
  lacks is checked the same way for its keys (`KeyProbe`, on the snapshot's rows): `KeysHeld`. A
  plain append is blind and never conflicts with another append: two writers could each land a
  record once.
- **the table's SparkSession** (`writer_session`: `newSession()`, same SparkContext, its own SQL
  conf), which the table's frame builder, checkpointer and MERGEs are given too. Delta records the
  version of a session's last commit in `spark.databricks.delta.lastCommitVersionInSession`, right
  after the commit file is written and before any post-commit work; with a session nobody else
  commits through, that value is this table's last commit, so the commit never has to be found in
  the log again (`last_commit`). The session also carries the writer's settings: new tables get
  their properties (stats columns, checkpoint interval).
- **committer threads**. A commit runs Delta's post-commit work (the `.crc` checksum, and a
  checkpoint when the table's `delta.checkpointInterval` says so) synchronously after it.
  `append` commits in a committer thread and returns the version the moment it appears in the
  session's conf: the caller can ACCEPT while Delta finishes post-commit work, and the next
  append can commit meanwhile (`SAVES_IN_FLIGHT` of them, counted by the table's `Checkpointer`;
  post-commit work commits nothing, and only one thread starts appends, so the conf still names
  each append's own commit). A schema change (a new column or a widened type, with
  `merge_schema`) is committed alone, before the append's transaction starts (`writeFiles` makes
  no schema check of its own: a frame of a new shape goes through a plain append's first).
- **what follows each commit** (`after_commit`, a MERGE's too): the catalog entry until it is
  made, then the table's `Checkpointer` is told, which writes a checkpoint in the background every
  `checkpoint_every` commits. The tables this writer creates get `delta.checkpointInterval = 10 x
  checkpoint_every`, so Delta's own in-commit checkpoint is only a backstop for other writers.

Given at build, not set afterwards: the session, the `Checkpointer`, the table's commit lock
(`sharelake.sink.delta.commit_lock`, held by each commit), `before_commit` (the table's writer lease
check on S3, `sharelake.sink.delta.writer_lease`, run before writing an append's files and again before
each commit), `register_as` (a table addressed by catalog name: entered in the catalog after a
commit, until that succeeds), `stats` (where the commits other writers' commits sent back are
counted: the table's `TableStats`) and `layout` (the partitioning or clustering a table it creates
gets; a partitioned one is written with Delta's optimized write, in the writer's session). From its
committer threads the writer touches only what an append hands it: the `Claim`'s cache, while the
caller waits for that append to be durable.

Proofs: `append` returns the `CommitProof` of its commit and `proof_of_presence` one for records
an earlier commit holds; a MERGE's (`sharelake.sink.delta.merge`) is the only other one minted
(`CommitProof` cannot be constructed directly). Before minting a commit's proof the writer reads the
commit back (`read_back`, `sharelake.sink.delta.commit_read_back`): the commit file at the version Delta
reported must hold this write's `userMetadata` (which carries its `write_id`), or the job stops
(`CommitReplacedError`, never retried) before any record of the batch is ACCEPTed.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, Self

from delta import exceptions as delta_errors
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from sharelake.acknowledge.proof import CommitProof
from sharelake.config.settings import interval_s
from sharelake.failures import faults
from sharelake.sink.delta.catalog_tables import register_table
from sharelake.sink.delta.checkpointer import SAVES_IN_FLIGHT, Checkpointer
from sharelake.sink.delta.commit_lock import CommitLock
from sharelake.sink.delta.commit_read_back import CommitReader
from sharelake.table.layout import TableLayout
from sharelake.table.location import TableLocation
from sharelake.table.offset_ranges import BatchOffsets

log = logging.getLogger(__name__)

LAST_COMMIT_CONF = "spark.databricks.delta.lastCommitVersionInSession"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
OPTIMIZE_WRITE = "spark.databricks.delta.optimizeWrite.enabled"  # a shuffle by partition before the files
TABLE_DEFAULTS = "spark.databricks.delta.properties.defaults."
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
BACKSTOP_FACTOR = 10  # Delta's in-commit checkpoint interval for new tables, in our checkpoint intervals
DELTA_DELETED_FILE_RETENTION_S = 7 * 86400  # delta.deletedFileRetentionDuration by default
# how often `append` looks for its commit's version while save() runs: each look is a py4j call (at
# 5 ms they were a tenth of the driver's Python samples); 10 ms adds 5 ms to an ACCEPT on average
DURABLE_POLL_S = 0.010
# Delta's concurrent-modification errors, as delta-spark raises them in Python (its classes share no base)
CONFLICTS = (
    delta_errors.DeltaConcurrentModificationException,
    delta_errors.ConcurrentAppendException,
    delta_errors.ConcurrentWriteException,
    delta_errors.ConcurrentDeleteReadException,
    delta_errors.ConcurrentDeleteDeleteException,
    delta_errors.ConcurrentTransactionException,
    delta_errors.MetadataChangedException,
    delta_errors.ProtocolChangedException,
)
COMMIT_ATTEMPTS = 10  # commits of one append's files, each after a conflict with another writer's commit


class ClaimIndex(Protocol):
    """What a table's commits hold (`DedupCache`): read up to a version, and asked about offsets."""

    def refresh(self, until: int | None = None) -> object: ...
    def held(self, offsets: BatchOffsets) -> BatchOffsets: ...


class KeyProbe(Protocol):
    """An upsert's keys (`count` of them), asked of the table's rows at the append's snapshot, or
    compared with another upsert's (`sharelake.sink.write.key_probe`)."""

    @property
    def count(self) -> int: ...

    def held(self, table: DataFrame) -> bool: ...

    def among(self, earlier: Self) -> bool: ...


@dataclass(frozen=True)
class Claim:
    """The offsets an append claims, and the index that says which commits already hold offsets;
    for an upsert's append, the keys the table must not hold.

    Checked in the append's transaction on the snapshot it starts on (and again on the newer one
    after each conflict): `index` is read up to that version, and an offset it holds ends the append;
    so does a row of that snapshot with one of `keys`.
    """

    offsets: BatchOffsets
    index: ClaimIndex
    keys: KeyProbe | None = None


class ClaimHeld(Exception):
    """Another writer committed some of the offsets an append claims after they were planned."""

    def __init__(self, table_path: str, version: int, held: BatchOffsets):
        super().__init__(f"{table_path}: a commit up to version {version} holds {held.count()} claimed offsets")
        self.held = held


class KeysHeld(Exception):
    """The table holds some of the keys an upsert meant to append: they must be merged."""

    def __init__(self, table_path: str, version: int):
        super().__init__(f"{table_path}: version {version} holds some of the upsert's keys")


class CommitCounts(Protocol):
    """Where a writer counts the commits another writer's concurrent commit sent back, the seconds
    from each append's first refused commit until its commit is durable, the seconds its appends
    spent in each step of their commit (`COMMIT_STEPS`), and the upserts' commits that were appends
    of new keys (`TableStats`)."""

    commit_conflicts: int
    commit_conflict_s: float
    commit_step_s: dict[str, float]
    key_appends: int


class _NoCount:
    def __init__(self) -> None:
        self.commit_conflicts = 0
        self.commit_conflict_s = 0.0
        self.commit_step_s: dict[str, float] = defaultdict(float)
        self.key_appends = 0


# an append's commit, step by step: the snapshot and the claim checked, the Spark job writing the files,
# Delta's commit (with its post-commit work, which the caller does not wait for), the commit file read back;
# the table's first commit, a plain append that creates it, is one step of its own
COMMIT_STEPS = ("start", "files", "log", "read_back", "create")


@dataclass
class _Refusal:
    """When an append's commit was first refused (set by its committer thread, read once it is durable)."""

    first_at: float | None = None  # time.monotonic()


def writer_session(
    spark: SparkSession,
    checkpoint_every: int,
    stats_columns: tuple[str, ...] = (),
    log_retention: str | None = None,
    layout: TableLayout | None = None,
) -> SparkSession:
    """A session of its own for one table's writers (`newSession()`: same SparkContext, its own SQL
    conf), with their settings: the frames' Arrow transfer, and what the tables they create get."""
    session = spark.newSession()
    conf = {
        "spark.sql.session.timeZone": spark.conf.get("spark.sql.session.timeZone", "UTC") or "UTC",
        # Arrow tables become RDD-backed frames in parallel tasks (`frames`): below this threshold PySpark
        # makes a LocalRelation, whose projections (the JSON parse) the optimizer evaluates in the driver
        "spark.sql.execution.arrow.localRelationThreshold": "0",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "10000000",  # `frame` chunks the table itself
        # a MERGE's source is such a frame (`DeltaMerge`): Arrow data the driver holds, the same rows
        # however often it is read, so Delta's copy of a source that is no Delta scan (one job more
        # per MERGE, so that its two passes read the same rows) buys nothing here
        MATERIALIZE_SOURCE: "none",
        "spark.databricks.delta.history.metricsEnabled": "true",  # numOutputRows: partial commits
        TABLE_DEFAULTS + "checkpointInterval": str(BACKSTOP_FACTOR * checkpoint_every),
    }
    if stats_columns:
        conf[TABLE_DEFAULTS + "dataSkippingStatsColumns"] = ",".join(stats_columns)
    chosen = _chosen(layout)
    if chosen is not None and chosen.partition_by:  # one file per partition value and batch,
        conf[OPTIMIZE_WRITE] = "true"  # not one per partition value and task
    if log_retention:  # the log files a table keeps (the append's listing cost; time travel's reach)
        conf[TABLE_DEFAULTS + "logRetentionDuration"] = log_retention
        if interval_s(log_retention) < DELTA_DELETED_FILE_RETENTION_S:  # Delta refuses a log retention
            conf[TABLE_DEFAULTS + "deletedFileRetentionDuration"] = log_retention  # shorter than this
    for key, value in conf.items():
        session.conf.set(key, value)
    return session


def _chosen(layout: TableLayout | None) -> TableLayout | None:
    """The partitioning or clustering a table the writer creates gets (None: a plain first append)."""
    return layout if layout is not None and layout.chosen else None


class DeltaWriter:
    def __init__(
        self,
        session: SparkSession,
        location: TableLocation,
        name: str,
        checkpointer: Checkpointer,
        commit_lock: CommitLock,
        *,
        before_commit: Callable[[], None] | None = None,
        register_as: str | None = None,
        stats: CommitCounts | None = None,
        layout: TableLayout | None = None,
    ):
        """`session`: the table's writer session (`writer_session`), which nobody else commits through;
        `checkpointer`: where its saves are counted until their post-commit work is done, and which
        is told of each commit (its background checkpoint); `commit_lock`: the table's
        (`sharelake.sink.delta.commit_lock`), held by each commit."""
        self.location = location
        self.table_path = location.path
        self.name = name
        self.session = session
        self._layout = _chosen(layout)
        self._committer = ThreadPoolExecutor(SAVES_IN_FLIGHT, thread_name_prefix=f"delta-commit-{name}")
        self._checkpointer = checkpointer
        jvm = self.session.sparkContext._jvm
        assert jvm is not None
        self._jvm = jvm
        self._none = jvm.scala.Option.empty()
        self._commits = CommitReader(session, location)  # reads each commit back before its proof
        self._created = False  # the table has its first commit
        self._known_shape: str | None = None  # a frame schema the table is known to fit
        # commits another writer's concurrent commit sent back to check again are counted here
        self._stats: CommitCounts = stats if stats is not None else _NoCount()
        self._counting = threading.Lock()
        # raises when this job may not commit to the table now (sharelake.sink.delta.writer_lease, on S3)
        self._before_commit = before_commit
        # held by each commit: on a local disk the drivers of every job commit one at a time
        self._commit_lock = commit_lock
        # a table addressed by catalog name: entered in the catalog after a commit, until that succeeds
        self._register_as = register_as

    # -- commits ---------------------------------------------------------------------------------------

    def append(
        self,
        rows: DataFrame,
        user_metadata: str,
        batch_id: int,
        merge_schema: bool = False,
        claim: Claim | None = None,
    ) -> CommitProof | None:
        """Append `rows` as one commit; its proof as soon as the commit is durable.

        `claim` is checked before the data files are written, on the snapshot the transaction starts
        on (and again on the newer one after each conflict): `ClaimHeld` (or `KeysHeld`: one of its
        keys) ends the append uncommitted. Delta's post-commit work may still be running when this
        returns (module docstring). None when Delta recorded no commit (an empty append to a table).
        """
        self._checkpointer.wait_for_room()
        if self._before_commit is not None:
            self._before_commit()
        faults.hit(f"before_{self.name}_commit")
        created = self.exists()
        if not created and self._layout is not None:  # created with its layout, then appended to
            with self._commit_lock():
                self._layout.create(self.session, self.table_path, rows.schema)
            created = self._created = True
        if created:
            self.prepare_schema(rows.schema, merge_schema)  # a commit of its own, before `before` is read
        before = self.last_commit()
        description = f"sharelake {self.name} append, batch = {batch_id}"
        refusal = _Refusal()
        if created:
            future = self._committer.submit(self._commit, rows, user_metadata, claim, description, refusal)
        else:  # the table's first commit creates it: a plain append (two creators conflict in Delta)
            writer = rows.write.format("delta").mode("append").option("userMetadata", user_metadata)
            if merge_schema:
                writer = writer.option("mergeSchema", "true")
            future = self._committer.submit(self._save, writer, description)
        self._checkpointer.track(future)
        while True:
            finished = bool(wait([future], timeout=DURABLE_POLL_S).done)
            version = self.last_commit()
            if version is not None and version != before:
                break  # durable: Delta set it right after writing the commit file
            if finished:
                error = future.exception()
                if error is not None:
                    self._checkpointer.drop(future)  # the commit failed: no post-commit work to wait for
                    raise error
                version = self.last_commit()
                if version is None or version == before:
                    return None
                break
        if refusal.first_at is not None:  # what other writers' commits cost it: re-checks, commit attempts
            self._stats.commit_conflict_s += time.monotonic() - refusal.first_at
        faults.hit(f"after_{self.name}_commit")
        with self._step("read_back"):
            self.read_back(version, user_metadata)
        return CommitProof._mint(self.table_path, version)

    @contextmanager
    def _step(self, step: str) -> Iterator[None]:
        """Counts the time spent in `step` of an append's commit (`COMMIT_STEPS`)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            with self._counting:  # the committer threads and the caller's
                self._stats.commit_step_s[step] += time.perf_counter() - started

    def read_back(self, version: int, user_metadata: str) -> None:
        """Before a commit's proof is minted: `CommitReplacedError` unless the commit file of `version`
        holds `user_metadata` (this write's, with its `write_id`): `sharelake.sink.delta.commit_read_back`."""
        self._commits.check(version, user_metadata)

    def proof_of_presence(self, version: int) -> CommitProof:
        """For records an earlier commit holds: the table version the dedup cache has read up to."""
        return CommitProof._mint(self.table_path, version, already_present=True)

    def _save(self, writer: Any, description: str) -> None:
        """The table's first commit: a plain append that creates it (committer thread)."""
        self.session.sparkContext.setLocalProperty("spark.job.description", description)
        with self._commit_lock(), self._step("create"):
            writer.save(self.table_path)
        self._created = True
        self.after_commit()

    def _commit(
        self, rows: DataFrame, user_metadata: str, claim: Claim | None, description: str, refusal: _Refusal
    ) -> None:
        """One append as Delta's transaction: check, write the files, commit them (committer thread).

        A conflict with another writer's commit starts a new transaction on the newer snapshot,
        checks again, and commits the same files.
        """
        self.session.sparkContext.setLocalProperty("spark.job.description", description)
        jvm = self._jvm
        with self._step("start"):
            txn = self._transaction(claim)
        with self._step("files"):
            actions = txn.writeFiles(rows._jdf)
        faults.hit(f"{self.name}_files_written")  # written, not committed: nothing references them yet
        operation = jvm.org.apache.spark.sql.delta.DeltaOperations.Write(
            jvm.org.apache.spark.sql.SaveMode.Append,
            *(self._none,) * 2,
            jvm.scala.Option.apply(user_metadata),
            *(self._none,) * 5,
        )
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            if self._before_commit is not None:
                self._before_commit()  # again: writing the files took a while
            try:
                with self._commit_lock(), self._step("log"):
                    txn.commit(actions, operation)
                break
            except CONFLICTS:
                if attempt == COMMIT_ATTEMPTS:
                    raise
                refusal.first_at = refusal.first_at if refusal.first_at is not None else time.monotonic()
                self._stats.commit_conflicts += 1
                log.info(
                    "%s: another writer committed first (attempt %d): checking again, then committing the same files",
                    self.table_path,
                    attempt,
                )
                time.sleep(random.uniform(0.0, 0.05 * attempt))  # two writers retrying in step would collide again
                faults.hit(f"before_{self.name}_recommit")
                txn = self._transaction(claim)
        self.after_commit()

    def _transaction(self, claim: Claim | None) -> Any:
        """A transaction on the latest snapshot, its claim checked, with a read of the table registered.

        The read makes its commit fail on any data another writer commits after the snapshot
        (Delta checks a non-blind transaction against every file added meanwhile; it reads no file,
        so compaction's removals never conflict with it).
        """
        jvm = self._jvm
        # the transaction commits through the thread's active session: ours, so the version of its
        # commit lands in our session's conf (anything run in this thread meanwhile may have changed it)
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(self.session._jsparkSession)
        txn = self._delta_log().startTransaction(self._none, self._none)
        if claim is not None:
            version = int(txn.snapshot().version())
            claim.index.refresh(until=version)
            held = claim.index.held(claim.offsets)
            if held.count():
                raise ClaimHeld(self.table_path, version, held)
            snapshot = self.session.read.format("delta").option("versionAsOf", version)
            if claim.keys is not None and claim.keys.held(snapshot.load(self.table_path)):
                raise KeysHeld(self.table_path, version)
        read_all = jvm.org.apache.spark.sql.catalyst.expressions.Literal.TrueLiteral()
        txn.trackReadPredicates(jvm.scala.jdk.javaapi.CollectionConverters.asScala([read_all]).toSeq(), False, False)
        return txn

    def after_commit(self) -> None:
        """After each commit of the table (an append's, in its committer thread, or a MERGE's): the
        catalog entry until it is made, the post-commit fault point, the checkpointer told."""
        if self._register_as is not None:
            register_table(self.session, self._register_as, self.table_path)
            self._register_as = None
        faults.hit(f"{self.name}_post_commit")  # committed, maybe decided; Delta's post-commit work done, ours next
        self._checkpointer.checkpoint_if_due(self.last_commit())

    def exists(self) -> bool:
        """Whether the table has its first commit (asked of the store until it has)."""
        if not self._created:
            self._created = bool(self._latest_snapshot().version() >= 0)
        return self._created

    def _delta_log(self) -> Any:
        """Delta's `DeltaLog` of the table (Delta caches one per path)."""
        return self._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.session._jsparkSession, self.table_path)

    def _latest_snapshot(self) -> Any:
        """The table's latest snapshot (version -1 before its first commit), read from the store."""
        return self._delta_log().update(False, self._none, self._none)

    def prepare_schema(self, schema: StructType, merge_schema: bool) -> None:
        """Before a frame of a new shape: Delta's schema check on it, and its new columns committed.

        An empty plain append of the shape (with `mergeSchema` when the format allows) commits the
        new columns or widened types, and raises Delta's schema-mismatch error where a plain append
        of the rows would have; the transaction's `writeFiles` then writes a frame the table fits.
        """
        shape = schema.json()
        if shape == self._known_shape:
            return
        if needs_schema_change(schema, self.table_schema()):
            empty = self.session.createDataFrame([], schema).write.format("delta").mode("append")
            with self._commit_lock():
                empty.option("mergeSchema", str(merge_schema).lower()).save(self.table_path)
            log.info("%s: the table's schema changed before the append: %s", self.table_path, schema.simpleString())
        self._known_shape = shape

    def table_schema(self) -> StructType:
        """The table's schema at its latest snapshot, read from the store."""
        return StructType.fromJson(json.loads(self._latest_snapshot().schema().json()))

    def last_commit(self) -> int | None:
        """The version of the session's last commit (Delta sets it once the commit file is written)."""
        value = self.session.conf.get(LAST_COMMIT_CONF, None)
        return int(value) if value not in (None, "", "None") else None

    def close(self) -> None:
        """Let the last append finish its post-commit work, then stop the committer threads."""
        self._checkpointer.wait_idle()
        self._committer.shutdown(wait=True)


def needs_schema_change(data: StructType, table: StructType) -> bool:
    """Whether `data` has a field (at any depth of nested structs) that `table` lacks, or of another type.

    Delta's `writeFiles` writes the frame as it is, without the schema check a plain append makes;
    such a frame goes through that check first (`prepare_schema`)."""
    have = {f.name.lower(): f for f in table.fields}
    for field_ in data.fields:
        held = have.get(field_.name.lower())
        if held is None:
            return True
        if isinstance(field_.dataType, StructType) and isinstance(held.dataType, StructType):
            if needs_schema_change(field_.dataType, held.dataType):
                return True
        elif field_.dataType.simpleString() != held.dataType.simpleString():
            return True
    return False
