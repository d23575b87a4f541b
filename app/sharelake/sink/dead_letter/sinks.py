"""Where the records that cannot land go before they are REJECTed: the `DeadLetterSink` seam, and its
Delta implementation, the dead-letter table.

A sink is used for three things: the batch plan asks it which records it already holds (PARKED:
REJECTed again without a write, with `proof_of_presence`), the attempt hands it every table's bad
records in one `park` (then REJECTs them with the proof it returns), and a failed attempt tells it
which records it saw (`seen`), so a record parked later says when it was first seen. `park` runs in
the sink's dead-letter thread, one at a time, while the next batch runs; `refresh`, `contains_many`
and `proof_of_presence` are asked only when no `park` runs; `seen` may come during a `park`.
INVARIANT 1 holds for REJECT as for ACCEPT: `park` returns only once the records are durably where
it keeps them, with a proof that says so. The tables a sink writes (`tables`) are its opener's to
load and close, like the main tables.

A sink type declares what the rest of the job would otherwise ask of it by its `dead_letter.sink` value:
`name` (that value), `writes_table` (whether its dead letters go to the dead-letter table the routes
name: no table, no lease, no replay from one), `kept` (where its dead letters are, and how they are
replayed), `open` (the sink a config asks for, built and loaded) and `named` (`sharelake check`'s words
for it).

`DeltaDeadLetters` appends them to the shared dead-letter table (`sharelake.sink.dead_letter.rows` has its
row layout) through a `DedupTable`, so a record is parked once however often it comes back, and
proves each park with the commit's `CommitProof`. The other kind, the broker's own dead-letter
topic, is `sharelake.sink.dead_letter.broker_topic`; `sharelake.sink.dead_letter.factory` lists the
sink types by name and opens the one the config asks for.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import ClassVar, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql import SparkSession

from sharelake.acknowledge.proof import CommitProof, Proof
from sharelake.config.routes import Routes
from sharelake.config.settings import SharelakeConfig
from sharelake.formats.base import BadRecord
from sharelake.sink.dead_letter.rows import STAMP_COLUMN, STATS_COLUMNS, dead_letter_rows
from sharelake.sink.dedup.dedup_table import DedupTable, OpenedTable, open_table
from sharelake.sink.delta.frames import FrameBuilder
from sharelake.sink.delta.writer_lease import LeaseCheck
from sharelake.table.location import TableLocation
from sharelake.table.offset_ranges import BatchOffsets, PartitionKey

FIRST_SEEN_MAX = 100_000  # records remembered from failed attempts, for the dead-letter first_seen


class DeadLetterSink(Protocol):
    """Takes the records that cannot land, durably, before they are REJECTed. What it writes to is
    opened and closed by the run (`sharelake.run.pipeline.IngestRun`), not by the sink."""

    name: ClassVar[str]  # its `dead_letter.sink` value
    writes_table: ClassVar[bool]  # its dead letters go to the dead-letter table the routes name
    kept: ClassVar[str]  # where its dead letters are, and how `replay-dead-letters` replays them

    @classmethod
    def open(
        cls, spark: SparkSession, cfg: SharelakeConfig, routes: Routes, checks: Mapping[TableLocation, LeaseCheck]
    ) -> DeadLetterSink:
        """The sink of `cfg`, ready to park (its tables' caches loaded); `checks`: the writer lease check of
        each table that has one, run before every commit."""

    def named(self) -> str:
        """Where the dead letters go, in a few words (`sharelake check`'s line)."""

    def describe(self) -> str:
        """Where the dead letters go, for the start's banner."""

    def tables(self) -> list[DedupTable]:
        """The Delta tables it writes (their counters, positions and close are the run's); none for a
        sink that writes no table."""

    def refresh(self) -> None:
        """Before a batch is planned: learn what other writers parked meanwhile."""

    def contains_many(self, key: PartitionKey, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of `offsets` (of one topic-partition) are parked already (the plan's PARKED)."""

    def proof_of_presence(self) -> Proof:
        """The proof the already parked records are REJECTed with."""

    def park(self, records: pa.Table, verdicts: Sequence[BadRecord], job: str, batch_id: int) -> Proof:
        """Park `records` (rows of `arrow_rows.RECORD_SCHEMA`), each with its verdict; the proof once durable."""

    def seen(self, records: Iterable[pa.Table], at: datetime) -> None:
        """Records of a failed attempt (RELEASEd, they come back): first seen `at`."""

    def repair_pending(self) -> None:
        """At start: undo what a writer that died mid-way left behind."""


def dead_letter_table(
    spark: SparkSession,
    location: TableLocation,
    *,
    checkpoint_every: int,
    lookback_commits: int | None,
    name: str = "dead_letter",
    log_retention: str | None = None,
    before_commit: LeaseCheck | None = None,
) -> OpenedTable:
    """The dead-letter table at `location`, opened with its parts (its cache not loaded yet)."""
    return open_table(
        spark,
        location,
        name,
        STAMP_COLUMN,
        checkpoint_every=checkpoint_every,
        lookback_commits=lookback_commits,
        stats_columns=STATS_COLUMNS,
        prefix="dead_letter_",
        log_retention=log_retention,
        before_commit=before_commit,
        register_as=location.name,
    )


class DeltaDeadLetters:
    """The dead-letter table: one Delta commit per batch for every table's bad records."""

    name: ClassVar[str] = "table"
    writes_table: ClassVar[bool] = True
    kept: ClassVar[str] = "in the dead-letter table the routes name"

    def __init__(self, table: DedupTable, frames: FrameBuilder):
        """`frames`: the builder of the frames written to `table` (on its writer's session)."""
        self.table = table
        self._frames = frames
        self._first_seen: dict[tuple[str, int, int], datetime] = {}
        self._seen_lock = threading.Lock()  # `seen` (the sink's thread) beside `park` (its dead-letter thread)

    @classmethod
    def open(
        cls, spark: SparkSession, cfg: SharelakeConfig, routes: Routes, checks: Mapping[TableLocation, LeaseCheck]
    ) -> DeltaDeadLetters:
        """The Delta dead-letter table of `routes`, its dedup cache loaded from its recent commits."""
        assert routes.dead_letter is not None, "resolve_routes: a sink that writes a table has its table"
        opened = dead_letter_table(
            spark,
            routes.dead_letter,
            checkpoint_every=cfg.delta.checkpoint_interval,
            lookback_commits=cfg.delta.dedup_lookback_commits,
            log_retention=cfg.delta.log_retention,
            before_commit=checks.get(routes.dead_letter),
        )
        opened.table.load()
        return cls(opened.table, opened.frames)

    def named(self) -> str:
        return self.table.location.name or self.table.location.path

    def describe(self) -> str:
        return self.table.location.describe()

    def tables(self) -> list[DedupTable]:
        return [self.table]

    def refresh(self) -> None:
        self.table.refresh()

    def contains_many(self, key: PartitionKey, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        return self.table.contains_many(key, offsets)

    def proof_of_presence(self) -> CommitProof:
        return self.table.proof_of_presence()

    def park(self, records: pa.Table, verdicts: Sequence[BadRecord], job: str, batch_id: int) -> CommitProof:
        stamp = datetime.now(UTC)
        keys = list(zip(*(records.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
        with self._seen_lock:
            first = [self._first_seen.pop(k, stamp) for k in keys]
        rows = dead_letter_rows(records, verdicts, first, stamp, job, batch_id)
        claim = BatchOffsets.of_rows(rows)
        appended = self.table.append(self._frames.frame(rows), claim, batch_id, stamp)
        if appended is None:
            raise RuntimeError(f"{self.table.table_path}: the dead-letter append recorded no commit")
        return self.table.settle(appended, claim)

    def seen(self, records: Iterable[pa.Table], at: datetime) -> None:
        with self._seen_lock:
            for rows in records:
                columns = (rows.column(c).to_pylist() for c in ("topic", "partition", "offset"))
                for key in zip(*columns, strict=True):
                    self._first_seen.setdefault(key, at)
            while len(self._first_seen) > FIRST_SEEN_MAX:
                del self._first_seen[next(iter(self._first_seen))]

    def repair_pending(self) -> None:
        self.table.repair_pending()
