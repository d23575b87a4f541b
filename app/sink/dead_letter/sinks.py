"""Where the records that cannot land go before they are REJECTed: the `DeadLetterSink` seam.

The foreachBatch sink (`app.sink.batch.delta_sink.DeltaSink`) is given one when it is built and uses it
for three things: the batch plan asks it which records it
already holds (PARKED: REJECTed again without a write, with `proof_of_presence`), the attempt
hands it every table's bad records in one `park` (then REJECTs them with the proof it returns), and
a failed attempt tells it which records it saw (`seen`), so a record parked later says when it was
first seen. `park` runs in the sink's dead-letter thread, one at a time, while the next batch runs;
the sink calls `refresh`, `contains_many` and `proof_of_presence` only when no `park` runs; `seen`
may come from the sink's thread during a `park`. INVARIANT 1 holds for REJECT as for ACCEPT: `park`
returns only once the records are durably where it keeps them, with a `CommitProof` that says so.

`DeltaDeadLetters`, the one implementation today, appends them to the shared dead-letter table
(`app.sink.dead_letter.rows` has its row layout) through a `DedupTable`, so a record is parked once
however often it comes back. This protocol is also where the other destinations for bad records
would fit: the broker's own dead-letter topic (KIP-1191, Kafka 4.4: a share group's REJECTed
record is written there by the broker, `app.consume.broker_dead_letter_topic`; `park` would write
nothing and `contains_many` hold nothing), or a log-only mode (each bad record logged, then
REJECTed). Both need a proof that is not a Delta commit's, which `CommitProof` does not offer
yet: the seam is drawn, the second implementation is not written.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from app.acknowledge.proof import CommitProof
from app.formats.base import BadRecord
from app.sink.dead_letter.rows import dead_letter_rows
from app.sink.dedup.dedup_table import DedupTable
from app.sink.dedup.offset_ranges import BatchOffsets, PartitionKey
from app.sink.delta.frames import FrameBuilder

FIRST_SEEN_MAX = 100_000  # records remembered from failed attempts, for the dead-letter first_seen


class DeadLetterSink(Protocol):
    """Takes the records that cannot land, durably, before they are REJECTed. What it writes to is
    opened and closed by the run (`app.run.pipeline.IngestRun`), not by the sink."""

    def refresh(self) -> None:
        """Before a batch is planned: learn what other writers parked meanwhile."""

    def contains_many(self, key: PartitionKey, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of `offsets` (of one topic-partition) are parked already (the plan's PARKED)."""

    def proof_of_presence(self) -> CommitProof:
        """The proof the already parked records are REJECTed with."""

    def park(self, records: pa.Table, verdicts: Sequence[BadRecord], job: str, batch_id: int) -> CommitProof:
        """Park `records` (rows of `arrow_rows.RECORD_SCHEMA`), each with its verdict; the proof once durable."""

    def seen(self, records: Iterable[pa.Table], at: datetime) -> None:
        """Records of a failed attempt (RELEASEd, they come back): first seen `at`."""

    def repair_pending(self) -> None:
        """At start: undo what a writer that died mid-way left behind."""


class DeltaDeadLetters:
    """The dead-letter table: one Delta commit per batch for every table's bad records."""

    def __init__(self, table: DedupTable, frames: FrameBuilder):
        """`frames`: the builder of the frames written to `table` (on its writer's session)."""
        self.table = table
        self._frames = frames
        self._first_seen: dict[tuple[str, int, int], datetime] = {}
        self._seen_lock = threading.Lock()  # `seen` (the sink's thread) beside `park` (its dead-letter thread)

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
