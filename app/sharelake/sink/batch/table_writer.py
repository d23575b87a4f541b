"""One destination's part of a micro-batch: write its candidates, diagnose its bad records, say what to decide.

A `TableWriter` is one destination's (`sharelake.sink.write.destinations.Destination`: its topics, its
`DedupTable`, its payload format, its write mode), given the sink's counters; it runs once per
attempt, in a thread of its own when a job writes several tables. `land` decides nothing: it
returns a `Landed` (the `Verdict`s for its rows, its bad records for the dead-letter sink, the
error that stopped it), and the sink decides them in one place. Its steps:

1. the candidates' rows (Arrow), the checks every format shares (`sharelake.formats.base.precheck`:
   no value, too large, delivery cap), then the payload format's own (`PayloadFormat.read`);
2. the rest stamped (`sharelake.table.columns.stamped`) and claimed (their offsets), one Spark job:
   the frame is parsed once by the format, the rows that cannot land are filtered out and collected
   (`DataFrame.observe`), the rest committed by the destination's write mode (`sharelake.sink.write.write_mode`),
   which also says what it adds to its own counters (`ModeWrite.counts`). When the table's
   last write left rows out (a stream carrying poison tends to keep carrying it), the same job
   collects their error class and message too (`BatchRead.bad_row`); otherwise only which rows
   they are: the class and message make a larger plan, which costs every batch some planning;
3. once that commit is durable, the rows left out are exactly those collected; unless the job
   named them, a Spark job over those rows alone (a frame of its own) names them. A left-out row
   it does not name is RELEASEd, never ACCEPTed; when no commit was made, a job names the bad rows
   of the whole frame. The commit is then folded into the table's cache (`DedupTable.settle`);
4. the verdicts: ACCEPT the rows already in the table (PRESENT) with the cache's proof, and those
   the commit holds with its proof; RELEASE the rows that are neither in the commit nor bad.

When another writer committed some of the candidates after the plan (`ClaimHeld`: its transaction
saw them), those are ACCEPTed on that commit and the rest written again (up to `REPLANS` times).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from sharelake.acknowledge.proof import CommitProof, Decision
from sharelake.formats.base import BAD, BadRecord, BatchRead, precheck
from sharelake.sink.batch.plan import PRESENT, BatchPlan, Indices, Verdict
from sharelake.sink.batch.stats import SinkStats, timed
from sharelake.sink.dedup.dedup_table import Appended
from sharelake.sink.delta.writer import ClaimHeld
from sharelake.sink.write.destinations import Destination
from sharelake.sink.write.write_mode import Batch
from sharelake.table.columns import stamped
from sharelake.table.offset_ranges import BatchOffsets, partition_groups

log = logging.getLogger(__name__)

ROW = "_row"  # a candidate's index in the attempt, carried through Spark to name bad records
REPLANS = 3  # writes of one table's candidates in one attempt, each after another writer took some of them


@dataclass
class Landed:
    """What one table's part of an attempt came to: what to decide, what to park, what stopped it."""

    verdicts: list[Verdict] = field(default_factory=list)
    bad: dict[int, BadRecord] = field(default_factory=dict)  # by row of the batch: to the dead-letter sink
    error: BaseException | None = None  # raised again once every table is decided


@dataclass
class _Written:
    """What the main-table write did with the candidates (indices into the attempt's candidates)."""

    proof: CommitProof | None = None
    accepted: Indices = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    bad: dict[int, BadRecord] = field(default_factory=dict)  # to the dead-letter table
    unsure: Indices = field(default_factory=lambda: np.zeros(0, dtype=np.intp))  # neither: RELEASEd


@dataclass(frozen=True)
class _Parsed:
    """The parse of the rows to write: the rows that can land and, when the read judges rows in Spark,
    the observation collecting the bad ones (their class and message too when `named`)."""

    kept: DataFrame
    observed: Observation | None = None
    named: bool = False


class TableWriter:
    def __init__(self, destination: Destination, stats: SinkStats, max_delivery_count: int):
        self.destination = destination
        self.table = destination.table
        self.format = destination.format
        self.topics = destination.topics
        self.mode = destination.mode
        self.stats = stats
        self.max_delivery_count = max_delivery_count
        # whether the last write left rows out: the next one names them in its own job (a stream
        # that carries poison tends to keep carrying it), else it only collects which they are
        self._had_bad = False

    def land(self, plan: BatchPlan, mine: npt.NDArray[np.bool_], batch_id: int) -> Landed:
        """Write this table's candidates among `mine` (a mask over the batch's rows); never raises.

        On an error the verdicts reached before it stand (records another writer's commit holds)
        and the table's other rows stay undecided: the attempt's failure path RELEASEs them.
        """
        landed = Landed()
        try:
            landed.bad = self._land(plan, mine, batch_id, landed.verdicts)
        except BaseException as e:  # noqa: BLE001 - the sink raises it again once every table is decided
            landed.error = e
        return landed

    def _land(
        self, plan: BatchPlan, mine: npt.NDArray[np.bool_], batch_id: int, verdicts: list[Verdict]
    ) -> dict[int, BadRecord]:
        candidates = plan.candidates[mine[plan.candidates]]
        written = _Written()
        for replan in range(REPLANS + 1):
            if not candidates.size:
                break
            try:
                written = self._write(plan, candidates, batch_id)
                break
            except ClaimHeld as taken:  # another writer committed some of them after our plan: they are in
                if replan == REPLANS:  # the table, decided on its commit; the rest are written again
                    raise
                now_present = held(plan.rows.take(pa.array(candidates, pa.int64())), taken.held)
                log.warning("%s: re-planned, %d records committed by another writer first", taken, now_present.sum())
                self.stats.dedup_hits += int(now_present.sum())
                verdicts.append(
                    Verdict(plan.with_copies(candidates[now_present]), Decision.ACCEPT, self.table.proof_of_presence())
                )
                candidates = candidates[~now_present]
        present = plan.of_kind(PRESENT) & mine
        if present.any():
            verdicts.append(Verdict(present, Decision.ACCEPT, self.table.proof_of_presence()))
        verdicts.append(Verdict(plan.with_copies(candidates[written.accepted]), Decision.ACCEPT, written.proof))
        verdicts.append(Verdict(plan.with_copies(candidates[written.unsure]), Decision.RELEASE))
        return {int(candidates[i]): b for i, b in written.bad.items()}

    def _write(self, plan: BatchPlan, candidates: Indices, batch_id: int) -> _Written:
        """Check, stamp and append the candidates; which of them the commit holds, and the bad ones."""
        stamp = datetime.now(UTC)
        rows, bad, read = self._read(plan, candidates)
        with timed(self.stats, "arrow"):
            to_write = _stamped(rows, bad, batch_id, stamp)
            claim = BatchOffsets.of_rows(to_write)
        if to_write.num_rows == 0:
            return _Written(bad=bad)
        with timed(self.stats, "frame"):
            frame = self.destination.frames.frame(to_write)
        parsed = self._parse(read, frame)
        with timed(self.stats, "wait"):
            self.destination.checkpointer.wait_for_room()
        with timed(self.stats, "write"):
            done = self.mode.write(
                self.table,
                Batch(
                    parsed.kept, read, ROW, claim, batch_id, stamp, self.format.merge_schema, self.destination.frames
                ),
            )
            self.stats.add(done.counts)  # the mode's own counters
        with timed(self.stats, "diagnose"):
            unreadable, filtered = self._left_out(parsed, read, frame, to_write, done.appended)
            self._had_bad = bool(filtered or unreadable)
        bad |= unreadable | done.bad  # the mode's own (an upsert's missing keys): never in its commit
        filtered += list(done.bad)
        return self._settle(rows, claim, done.appended, bad, filtered)

    def _read(self, plan: BatchPlan, candidates: Indices) -> tuple[pa.Table, dict[int, BadRecord], BatchRead]:
        """The candidates' rows, the bad ones the driver finds (the shared checks', then the format's),
        and how the format reads the rest."""
        with timed(self.stats, "arrow"):
            rows = plan.rows.take(pa.array(candidates, pa.int64()))
            bad = {b.index: b for b in precheck(rows, self.format.settings, self.max_delivery_count)}
        with timed(self.stats, "read"):
            found, read = self.format.read(rows)  # DependencyUnavailable: nothing written, all RELEASEd
            bad = {**{b.index: b for b in found}, **bad}  # a shared check's class wins
        return rows, bad, read

    def _parse(self, read: BatchRead, frame: DataFrame) -> _Parsed:
        """The rows of `frame` that can land, parsed; when the read judges rows in Spark, the bad ones
        filtered out and which they are observed (named too, in a stream carrying poison)."""
        if not read.needs_spark:
            return _Parsed(read.parse(frame))
        observed, named = Observation(), self._had_bad
        bad_rows = read.bad_row(ROW) if named else F.when(F.col(BAD), F.col(ROW))
        parsed = read.parse(frame).observe(observed, F.collect_list(bad_rows).alias("bad"))
        return _Parsed(parsed.where(~F.col(BAD)), observed, named)

    def _left_out(
        self, parsed: _Parsed, read: BatchRead, frame: DataFrame, to_write: pa.Table, appended: Appended | None
    ) -> tuple[dict[int, BadRecord], list[int]]:
        """The bad rows the Spark parse found, named (class and message), and the rows the write left out."""
        if parsed.observed is None:
            return {}, []  # nothing judged in Spark
        if appended is None:  # no commit (maybe every row was bad): the job may not have run
            return self._diagnose(read, frame), []
        if parsed.named:
            unreadable = {int(r[0]): BadRecord(int(r[0]), r[1], r[2]) for r in parsed.observed.get["bad"]}
            return unreadable, list(unreadable)
        filtered = [int(r) for r in parsed.observed.get["bad"]]
        if not filtered:
            return {}, []
        left_out = np.isin(to_write.column(ROW).to_numpy(), filtered)  # named by a job over those rows only
        return self._diagnose(read, self.destination.frames.frame(to_write.filter(pa.array(left_out)))), filtered

    def _settle(
        self,
        rows: pa.Table,
        claim: BatchOffsets,
        appended: Appended | None,
        bad: dict[int, BadRecord],
        filtered: list[int],
    ) -> _Written:
        """Fold the commit (the claim, but the rows it left out) and say which rows it holds."""
        written = claim
        if appended is None:
            written = BatchOffsets()  # no commit: nothing was written
        elif filtered:  # a left-out row the diagnosis does not name is RELEASEd below
            written = claim.difference(BatchOffsets.of_rows(rows.take(pa.array(sorted(filtered), pa.int64()))))
        with timed(self.stats, "fold"):
            proof = self.table.settle(appended, written) if appended is not None else None
        holds = held(rows, written)
        accepted = np.flatnonzero(holds)
        unsure = np.flatnonzero(~holds & ~np.isin(np.arange(rows.num_rows), list(bad)))
        if unsure.size:
            log.error("%d records are neither in the commit nor unreadable: RELEASEd", unsure.size)
        return _Written(proof, accepted, bad, unsure)

    def _diagnose(self, read: BatchRead, frame: DataFrame) -> dict[int, BadRecord]:
        """The bad records with their error class and message, in a Spark job of their own."""
        verdicts = read.parse(frame).where(F.col(BAD)).select(read.bad_row(ROW).alias("bad")).collect()
        return {int(r.bad[0]): BadRecord(int(r.bad[0]), r.bad[1], r.bad[2]) for r in verdicts}


def _stamped(rows: pa.Table, bad: dict[int, BadRecord], batch_id: int, stamp: datetime) -> pa.Table:
    """The rows but the bad ones, with their row number (`ROW`) and the write's stamp."""
    keep = np.ones(rows.num_rows, dtype=np.bool_)
    keep[list(bad)] = False
    kept = np.flatnonzero(keep)
    return stamped(rows.filter(pa.array(keep)).append_column(ROW, pa.array(kept, pa.int64())), batch_id, stamp)


def held(rows: pa.Table, written: BatchOffsets) -> npt.NDArray[np.bool_]:
    """Which of `rows` (topic, partition, offset) the offsets `written` hold."""
    out = np.zeros(rows.num_rows, dtype=np.bool_)
    for key, (at, offsets) in partition_groups(rows):
        if key in written:
            out[at] = written[key].contains_many(offsets)
    return out
