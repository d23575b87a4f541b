"""One Delta table that Sharelake appends Kafka records to, deduplicated by (topic, partition, offset).

It is the face of the table's commits (for a main table and the Delta dead-letter table alike; the batch
plan reads it as a `Holder`; `next_offsets` and `stats` say where it is and what it counted): it owns
the table's `DeltaWriter` (appends), its `DeltaMerge` (MERGEs and DELETEs) and its `DedupCache`, which
nobody else reaches, and keeps the cache current, so every append is a provable commit that never holds
an offset twice:

1. the append's `userMetadata` carries a `write_id`, the offsets it claims and the write's stamp
   (every row's `stamp_column`, to the microsecond);
2. the writer's transaction checks the append's `Claim` (the claimed offsets and the cache) on the
   snapshot it starts on: the cache folds every commit up to that version, and if one holds a
   claimed offset (another job in the share group acquired those records after our record locks
   expired, and committed them first) the append raises
   `ClaimHeld` and writes nothing; the sink then decides those records on the other commit and
   writes the rest. Delta fails our commit if another writer commits after that snapshot, and
   the check runs again: no commit of ours ever duplicates a row, and readers downstream never
   see a duplicate or a DELETE;
3. the writer returns the commit's `CommitProof` as soon as it is durable; the cache then folds
   any commit before ours it has not read (a version gap) and ours from what we know, with the
   offsets the commit really holds (`written`: fewer than claimed when Spark filtered unreadable
   rows out of the same job).

An upserted table's commits are MERGEs (`merge`): the claim is checked before the MERGE, which runs
Delta's own transaction; a record merged twice changes the table once, so such a table has nothing
to repair.

Tables written by older Sharelake versions (blind appends, which Delta never checks against each
other) may hold duplicates: the cache notes them as `Repair`s, and `repair_pending` deletes them
at start, one DELETE keyed on offset and the duplicate commit's stamp.

`open_table` builds the table with its writers, on a session of their own, and hands the table's
`FrameBuilder` and `Checkpointer` (`OpenedTable`) to whoever makes its frames or waits for room
before an append; the table's `close` ends its checkpointer with its writer.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt
from pyspark.sql import DataFrame, SparkSession
from tenacity import Retrying, stop_after_attempt, wait_exponential_jitter

from sharelake.acknowledge.proof import CommitProof
from sharelake.failures import faults
from sharelake.observe.counters import counter, gauge
from sharelake.sink.dedup.cache import DedupCache, Repair
from sharelake.sink.dedup.commit_log import DeltaCommitLog, SharelakeCommit, repair_metadata_json, user_metadata_json
from sharelake.sink.delta.checkpointer import Checkpointer
from sharelake.sink.delta.commit_lock import commit_lock
from sharelake.sink.delta.frames import FrameBuilder
from sharelake.sink.delta.merge import DeltaMerge, MergeRows
from sharelake.sink.delta.writer import Claim, ClaimHeld, DeltaWriter, KeyProbe, writer_session
from sharelake.table.layout import TableLayout
from sharelake.table.location import TableLocation
from sharelake.table.offset_ranges import BatchOffsets, OffsetRanges, PartitionKey

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
REPAIR_ATTEMPTS = 8


def micros(t: datetime) -> int:
    """Exact microseconds since the epoch (integer arithmetic: names a write's rows in a DELETE)."""
    return (t - EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True)
class Appended:
    """A durable commit of ours, not yet folded into the cache (`DedupTable.settle`)."""

    proof: CommitProof
    write_id: str
    claim: BatchOffsets
    stamp_us: int


@dataclass
class TableStats:
    """What one table's writer counts (see sharelake.observe.counters); `prefix` names the table's role."""

    prefix: str = ""  # "" for the main table, "dead_letter_" for the dead-letter table
    commits: int = counter("Delta commits of Sharelake's appends", name="{prefix}delta_commits")
    rows: int = counter("rows written", name="{prefix}rows_written")
    concurrent_claims: int = counter(
        "offsets another writer committed after we planned them: decided on its commit, not written again"
    )
    commit_conflicts: int = counter(
        "commits another writer's concurrent commit sent back: checked again, the same files committed"
    )
    commit_conflict_s: float = counter(
        "seconds from an append's first commit another writer sent back until its commit was durable, summed",
        default=0.0,
    )
    duplicates_repaired: int = counter("duplicate rows an older Sharelake version left, deleted at start")
    key_appends: int = counter(
        "an upserted table's commits that appended keys the table did not hold, in a checked append, not a MERGE"
    )
    commit_step_s: dict[str, float] = counter(
        "seconds Sharelake's appends spent in each step of their commit, summed (`commit_<step>_s` in the run's "
        "last line): `start` (the snapshot, the claim checked, an upsert's keys looked for), `files` (the Spark "
        "job writing the data files), "
        "`log` (Delta's commit with its post-commit work, the checksum and a due checkpoint, which the caller "
        "does not wait for), `read_back` (the commit file read back before its proof); `create`: the table's "
        "first commit, a plain append that creates it",
        name="{prefix}commit_step_s",
        prometheus="{prefix}delta_commit_step_seconds",
        label="step",
        default=Counter,
    )
    last_version: int = gauge("the table version of our last commit", name="{prefix}last_version", default=-1)
    last_commit_timestamp: float = gauge(
        "when our last commit was durable, seconds since the epoch (before the first: the job's start)",
        name="{prefix}last_commit_timestamp_seconds",
        default=time.time,
    )
    last_commit_at: float | None = None  # time.monotonic() when our last commit was durable


class DedupTable:
    def __init__(
        self,
        location: TableLocation,
        writer: DeltaWriter,
        merger: DeltaMerge,
        cache: DedupCache,
        stamp_column: str,
        stats: TableStats,
        *,
        checkpointer: Checkpointer,
        upserted: bool = False,
    ):
        """`checkpointer` (its writer's): what `close` ends besides the writer."""
        self._writer = writer
        self._merger = merger
        self._checkpointer = checkpointer
        self.upserted = upserted  # its commits are MERGEs by key (`merge`), not appends
        self.location = location
        self.table_path = location.path
        self._cache = cache
        self.stamp_column = stamp_column
        self.stats = stats  # the writer counts its commit conflicts in them too

    def load(self) -> None:
        """At start: the recent commits' offsets into the cache."""
        self._cache.load()

    def refresh(self) -> None:
        """Fold other writers' new commits into the cache (before a batch is planned)."""
        self._cache.refresh()

    def contains_many(self, key: PartitionKey, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of `offsets` (of one topic-partition) a commit of the table holds (numpy bool array)."""
        return self._cache.contains_many(key, offsets)

    def next_offsets(self) -> dict[PartitionKey, int]:
        """Per partition, the offset after the highest one the table holds (of the commits loaded)."""
        return self._cache.next_offsets()

    @property
    def version(self) -> int:
        """The highest table version the cache has read."""
        return self._cache.version

    def repairs(self) -> list[Repair]:
        """Duplicate commits an older Sharelake left, not repaired yet (oldest first)."""
        return self._cache.repairs()

    def close(self) -> None:
        """The last commit's post-commit work and any checkpoint end."""
        self._writer.close()
        self._checkpointer.close()

    def proof_of_presence(self) -> CommitProof:
        """For records the cache already holds: the table version the cache has read up to."""
        return self._writer.proof_of_presence(self._cache.version)

    def append(
        self, rows: DataFrame, claim: BatchOffsets, batch_id: int, stamp: datetime, merge_schema: bool = False
    ) -> Appended | None:
        """Append `rows` (every row's `stamp_column` == `stamp`, offsets within `claim`) as one commit.

        Returns as soon as the commit is durable (None when Delta recorded no commit: nothing was
        written); `settle` must follow before the records are decided. Raises `ClaimHeld`, having
        committed nothing, when a commit of another writer holds some of `claim`.
        """
        write_id = uuid.uuid4().hex
        metadata = user_metadata_json(write_id, batch_id, claim, micros(stamp))
        try:  # the claim is checked in the writer's transaction, on the snapshot it starts on
            proof = self._writer.append(
                rows, metadata, batch_id, merge_schema=merge_schema, claim=Claim(claim, self._cache)
            )
        except ClaimHeld as taken:
            self.stats.concurrent_claims += taken.held.count()
            raise
        return Appended(proof, write_id, claim, micros(stamp)) if proof is not None else None

    def merge(
        self, rows: MergeRows, claim: BatchOffsets, batch_id: int, stamp: datetime, new_keys: KeyProbe | None = None
    ) -> Appended | None:
        """An upsert's commit: MERGE `rows` into the table (`DeltaMerge.merge`), claiming `claim`;
        or, when the table holds none of `new_keys`, an append of their source checked as `append`'s.

        As `append`, but a MERGE runs Delta's own transaction, where no claim can be checked: the
        claim is checked first, on the cache refreshed to the latest commit (`ClaimHeld` when a
        commit holds some of it). A commit of another writer landing meanwhile with some of the
        same records is harmless: the MERGE replaces a row only with a newer record, so applying a
        record twice changes nothing the first time did not.
        """
        self._cache.refresh()
        held = self._cache.held(claim)
        if held.count():
            self.stats.concurrent_claims += held.count()
            raise ClaimHeld(self.table_path, self._cache.version, held)
        write_id = uuid.uuid4().hex
        metadata = user_metadata_json(write_id, batch_id, claim, micros(stamp))
        try:
            proof = self._merger.merge(rows, metadata, batch_id, claim=Claim(claim, self._cache), new_keys=new_keys)
        except ClaimHeld as taken:  # checked again in an append's transaction
            self.stats.concurrent_claims += taken.held.count()
            raise
        return Appended(proof, write_id, claim, micros(stamp)) if proof is not None else None

    def settle(self, appended: Appended, written: BatchOffsets) -> CommitProof:
        """Fold our commit (holding `written` of its claim) and any other writer's before it.

        Returns the proof the records in `written` are decided with.
        """
        version = appended.proof.version
        self._cache.refresh(until=version - 1)  # other writers' commits before ours: the gap, read from the log
        commit = SharelakeCommit(version, appended.write_id, appended.claim, ingested_at_us=appended.stamp_us)
        self._cache.fold(commit, written=written)
        if self.upserted:  # a record merged twice changed the table once: nothing to repair
            self._cache.repaired(version)
        if any(r.commit.version == version for r in self._cache.repairs()):  # the transaction rules it out
            log.error(
                "%s version %d holds offsets an earlier commit holds: deleted at the next start",
                self.table_path,
                version,
            )
        self.stats.commits += 1
        self.stats.rows += written.count()
        self.stats.last_version = version
        self.stats.last_commit_at = time.monotonic()
        self.stats.last_commit_timestamp = time.time()
        return appended.proof

    def repair_pending(self) -> None:
        """At start: delete the duplicates of commits whose writer died before repairing them."""
        for repair in self._cache.repairs():
            if self.upserted:  # its later commit found the rows newer and changed none of them
                self._cache.repaired(repair.commit.version)
                continue
            log.warning(
                "%s version %d holds %d offsets an earlier commit already held, unrepaired (an older "
                "Sharelake wrote it and stopped before deleting them): deleting them now",
                self.table_path,
                repair.commit.version,
                repair.count(),
            )
            self._repair(repair)

    def _repair(self, repair: Repair) -> None:
        """One DELETE of `repair.commit`'s rows at the duplicate offsets; its commit says what it repaired.

        The rows are named by offset and by the commit's stamp (one value per write, to the
        microsecond), so the earlier commit's rows for the same offsets are never touched. Running
        it again deletes nothing.
        """
        commit = repair.commit
        if commit.ingested_at_us is None:
            log.error("version %d has duplicates but no write stamp in its metadata: not repaired", commit.version)
            self._cache.repaired(commit.version)
            return
        faults.hit("before_repair")
        condition = (
            f"`{self.stamp_column}` = timestamp_micros({commit.ingested_at_us}) AND ({_where(repair.duplicates)})"
        )
        metadata = repair_metadata_json(uuid.uuid4().hex, commit.version, repair.duplicates)
        # Delta checks a DELETE against every file appended meanwhile (Serializable isolation), so
        # the other writer's appends make it conflict: retry the DELETE alone, briefly
        for attempt in Retrying(
            stop=stop_after_attempt(REPAIR_ATTEMPTS),
            wait=wait_exponential_jitter(multiplier=0.2, max=5, jitter=0.5),
            reraise=True,
            before_sleep=lambda state: log.info(
                "repair of version %d conflicted (attempt %d), retrying", commit.version, state.attempt_number
            ),
        ):
            with attempt:
                rows = self._merger.delete(condition, metadata)
        faults.hit("after_repair")  # the DELETE is committed; this writer has not noted it yet
        self.stats.duplicates_repaired += rows
        self._cache.repaired(commit.version)
        log.warning("repaired version %d of %s: deleted %d duplicate rows", commit.version, self.table_path, rows)


@dataclass(frozen=True)
class OpenedTable:
    """One table as `open_table` builds it: the table (its appends, MERGEs and cache; closing it
    ends its writer's work), the builder of the frames written to it (on its writer's session) and
    its writer's checkpointer (`wait_for_room`: until an append may start)."""

    table: DedupTable
    frames: FrameBuilder
    checkpointer: Checkpointer


def open_table(
    spark: SparkSession,
    location: TableLocation,
    name: str,
    stamp_column: str,
    *,
    checkpoint_every: int,
    lookback_commits: int | None,
    stats_columns: tuple[str, ...] = (),
    prefix: str = "",
    log_retention: str | None = None,
    before_commit: Callable[[], None] | None = None,
    register_as: str | None = None,
    layout: TableLayout | None = None,
    upserted: bool = False,
) -> OpenedTable:
    """A table with its writers (on a session of their own), its cache, its frame builder and its
    checkpointer; `lookback_commits` None: a cache that reads no log (a table this process alone
    writes, as the warm-up's). `before_commit` raises when this job may not commit now (its writer
    lease); `register_as`: the table's catalog name; `layout`: the partitioning or clustering the
    table is created with; `upserted`: its commits are MERGEs."""
    log_reader = DeltaCommitLog(spark, location, stamp_column) if lookback_commits is not None else None
    cache = DedupCache(log_reader, lookback_commits or 1)
    stats = TableStats(prefix=prefix)
    session = writer_session(spark, checkpoint_every, stats_columns, log_retention, layout)
    frames = FrameBuilder(session)
    checkpointer = Checkpointer(session, location, name, checkpoint_every)
    lock = commit_lock(location)
    writer = DeltaWriter(
        session,
        location,
        name,
        checkpointer,
        lock,
        before_commit=before_commit,
        register_as=register_as,
        stats=stats,
        layout=layout,
    )
    merger = DeltaMerge(session, location, name, writer, checkpointer, lock, stats, before_commit)
    table = DedupTable(
        location,
        writer,
        merger,
        cache,
        stamp_column,
        stats,
        checkpointer=checkpointer,
        upserted=upserted,
    )
    return OpenedTable(table, frames, checkpointer)


def _where(offsets: Mapping[PartitionKey, OffsetRanges]) -> str:
    """A SQL condition matching `offsets` (by topic, partition and offset ranges)."""
    return " OR ".join(
        f"(`topic` = '{_sql_string(topic)}' AND `partition` = {partition} AND ("
        + " OR ".join(f"`offset` BETWEEN {s} AND {e}" for s, e in spans)
        + "))"
        for (topic, partition), spans in sorted(offsets.items())
    )


def _sql_string(text: str) -> str:
    """Escape for a single-quoted Spark SQL literal (backslash escapes)."""
    return text.replace("\\", "\\\\").replace("'", "\\'")
