"""The foreachBatch function: drain the RecordBuffer, dedup, write, then ACCEPT / REJECT.

Spark calls `DeltaSink.__call__` in the driver once per micro-batch of the clock stream (its
DataFrame is ignored). One attempt:

1. take whole polls from the buffer (their Arrow rows were built by the members at poll time);
2. plan (`app.sink.batch_plan`): fold other writers' new commits into both dedup caches, then sort
   every row: already in the main table (ACCEPT, no write), already in the dead-letter table
   (REJECT, no write), a second copy inside this batch (decided like the first), or a candidate;
3. the driver checks on Arrow: those every format shares (`app.sink.formats.base.precheck`: no
   value, too large, delivery cap), then the payload format's own (`PayloadFormat.read`: for Avro the
   wire-format header and each schema id, fetched from the registry once);
4. one Spark job: the candidates' data frame is parsed once by the format, the rows that cannot
   land are filtered out and counted (`DataFrame.observe`), the rest appended to the main table;
5. once that commit is durable, and only when the job counted bad records: a second Spark job
   names them and their error class (`BatchRead.classify`);
6. ACCEPT what the main commit holds (INVARIANT 1); the bad records go to the dead-letter table
   (the driver-check failures with them), then are REJECTed with that commit's proof.

Bad records are diagnosed before any decision is sent, so a record the commit did not hold is
never ACCEPTed; the commit is durable before either.

A failed attempt RELEASEs the attempt's undecided records (never ACCEPTs or REJECTs them) and is
retried with exponential backoff (tenacity) on whatever the buffer holds then; after
`batch.write_attempts` failures in a row the error propagates and the query (and job) fails.
A lost writer lease (`app.sink.writer_lease`) fails it at the first attempt: it does not come back,
and each retry would cost the released records a delivery.
A record that keeps failing comes back with a higher delivery count and is dead-lettered at
`dead_letter.max_delivery_count`, before the broker would archive it unseen.

A dependency of the format that is down (`DependencyUnavailable`: the schema registry) is never
the record's fault: the members stop polling first (`on_pause`), so the RELEASEd records are not
delivered again meanwhile and spend no delivery attempt; each retry first asks the format whether
its dependency answers again (`PayloadFormat.probe`), and only then do the members poll again
(`on_resume`). When the attempts run out the job stops with the dependency's one line.

No `txnAppId`/`txnVersion` keyed on the Spark batch id: after a crash Spark re-runs the last
batch id with whatever the buffer holds now, and Delta would silently skip that write; the
records' own identity in the dedup caches makes the re-run safe instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F
from tenacity import (
    Retrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from app import faults
from app.acknowledge.proof import CommitProof, Decision
from app.bridge.record_buffer import Poll, RecordBuffer
from app.config import BatchConfig
from app.counters import counter, gauge
from app.sink.batch_plan import COPY, PARKED, PRESENT, BatchPlan, Indices, plan_batch
from app.sink.dead_letter import dead_letter_rows
from app.sink.dedup_table import DedupTable
from app.sink.delta_writer import ClaimHeld
from app.sink.destinations import Destination
from app.sink.formats.base import (
    BAD,
    ERROR_CLASS,
    ERROR_MESSAGE,
    SHARED_ERROR_CLASSES,
    BadRecord,
    BatchRead,
    DependencyUnavailable,
    precheck,
)
from app.sink.offset_ranges import BatchOffsets, partition_groups
from app.sink.write_columns import stamped
from app.sink.writer_lease import LeaseLostError

log = logging.getLogger(__name__)

RecordKey = tuple[str, int, int]
FIRST_SEEN_MAX = 100_000  # records remembered from failed attempts, for the dead-letter first_seen
ROW = "_row"  # a candidate's index in the attempt, carried through Spark to name bad records

# the steps of one attempt, in order, that `SinkStats.phase_s` times
PHASES = (
    "drain",  # waiting for the buffer's polls
    "plan",  # folding other writers' new commits into the dedup caches; sorting the rows
    "arrow",  # the candidates' rows, the shared driver checks, the write stamp, the claimed offsets
    "read",  # the payload format's driver checks (Avro: headers, schema ids, the registry)
    "frame",  # the rows as a data frame (DeltaWriter.frame: broadcasts read by mapInArrow)
    "wait",  # waiting for a committer: the last two commits' post-commit work (a checkpoint) still running
    "write",  # the Spark job and the Delta commit, until the commit is durable
    "fold",  # folding our commit (and any gap before it) into the cache; a repair if another writer won
    "diagnose",  # batches with bad records only: naming them and their error class (a second job)
    "dead_letter",  # batches with bad records only: the dead-letter append
    "decide",  # ACCEPT / REJECT commands to the members
)
RECENT_CYCLES = 256  # per-batch step times kept for the progress line (by Spark batch id)
REPLANS = 3  # writes of one table's candidates in one attempt, each after another writer took some of them


@dataclass
class SinkStats:
    """What the sink counts (see app.counters)."""

    records_in: int = counter("records drained from the buffer into micro-batches (failed attempts included)")
    dedup_hits: int = counter("redelivered records already in the table: ACCEPTed without a write")
    in_batch_duplicates: int = counter("second copies inside one micro-batch: decided like the first")
    dead_lettered: int = counter("records written to the dead-letter table (and REJECTed)")
    dead_letter_hits: int = counter("records already in the dead-letter table: REJECTed without a write")
    late_accepts: int = counter("records ACCEPTed after their lock duration: the ACCEPT likely failed")
    failed_attempts: int = counter("micro-batch attempts that failed and RELEASEd their records")
    empty_batches: int = counter("micro-batches that found no poll in the buffer")
    max_cycle_s: float = gauge("longest acquire -> decision time of any poll (seconds)", default=0.0)
    last_cycle_s: float = gauge("the same, for the last micro-batch with records (seconds)", default=0.0)
    cycle_s_sum: float = counter("of last_cycle_s over the micro-batches with records (seconds)", default=0.0)
    cycles: int = counter("micro-batches with records")
    # seconds spent per step of an attempt, summed (see PHASES): where a batch cycle goes
    phase_s: dict[str, float] = counter(
        "seconds the sink spent per step of its micro-batches",
        prometheus="sink_phase_seconds",
        default=lambda: dict.fromkeys(PHASES, 0.0),
    )
    dead_lettered_by_class: Counter[str] = counter(
        "records written to the dead-letter table, by error class", label="error_class", default=Counter
    )
    record_lock_seconds: float = gauge("the share group's record lock duration (seconds)", default=0.0)
    cycles_near_lock: int = counter("micro-batches whose oldest poll took over half the record lock to be decided")
    # the same per Spark batch id, for the recent batches (the progress line reads them), with the
    # records each drained (the line's `in`: exact, where a counter's delta read later is not)
    recent: dict[int, dict[str, float]] = field(default_factory=dict)
    recent_in: dict[int, int] = field(default_factory=dict)
    cycle: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))  # the running one

    def start_cycle(self, batch_id: int) -> None:
        self.cycle = self.recent.setdefault(batch_id, dict.fromkeys(PHASES, 0.0))
        self.recent_in.setdefault(batch_id, 0)
        while len(self.recent) > RECENT_CYCLES:
            self.recent_in.pop(next(iter(self.recent)), None)
            del self.recent[next(iter(self.recent))]

    def batch_report(self, batch_id: int) -> tuple[int, dict[str, float]] | None:
        """(records drained, seconds per step) of a recent Spark batch id, for the progress line."""
        steps = self.recent.get(batch_id)
        return None if steps is None else (self.recent_in.get(batch_id, 0), steps)


_TIMING = threading.Lock()  # tables are written in parallel threads: their step times add up here


@contextmanager
def _timed(stats: SinkStats, phase: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        spent = time.perf_counter() - start
        with _TIMING:
            stats.phase_s[phase] += spent
            stats.cycle[phase] += spent


Landed = tuple[dict[int, BadRecord], BaseException | None]


def _outcome_of(land: Callable[..., dict[int, BadRecord]], *args: object) -> Landed:
    """A table's bad records, or the error that stopped it (the other tables go on)."""
    try:
        return land(*args), None
    except BaseException as e:  # noqa: BLE001 - raised again once every table is decided
        return {}, e


@dataclass
class _Written:
    """What the main-table write did with the candidates (indices into the attempt's candidates)."""

    proof: CommitProof | None = None
    accepted: Indices = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    bad: dict[int, BadRecord] = field(default_factory=dict)  # to the dead-letter table
    unsure: Indices = field(default_factory=lambda: np.zeros(0, dtype=np.intp))  # neither: RELEASEd


class DeltaSink:
    def __init__(
        self,
        buffer: RecordBuffer,
        destinations: list[Destination],
        dead: DedupTable,
        batch: BatchConfig,
        max_delivery_count: int,
        lock_duration_s: float,
        job_name: str,
        on_fatal: Callable[[], None] = lambda: None,
        on_pause: Callable[[], None] = lambda: None,
        on_resume: Callable[[], None] = lambda: None,
    ):
        self.buffer = buffer
        self.destinations = destinations
        self.dead = dead
        self.batch = batch
        self._table_of = {t: d.table for d in destinations for t in d.topics}
        self._parallel = ThreadPoolExecutor(len(destinations), "sink-table") if len(destinations) > 1 else None
        self.max_delivery_count = max_delivery_count
        self.lock_duration_s = lock_duration_s
        self.job_name = job_name
        self.stats = SinkStats(record_lock_seconds=lock_duration_s)
        classes = {*SHARED_ERROR_CLASSES, *(c for d in destinations for c in d.format.error_classes)}
        self.stats.dead_lettered_by_class.update(dict.fromkeys(sorted(classes), 0))  # each class's series from start
        self._on_fatal = on_fatal  # the attempts are exhausted: the members must stop acquiring records
        self._on_pause = on_pause  # a dependency is down: the members stop polling until it is back
        self._on_resume = on_resume
        self._dependency_down = False
        self._closed = threading.Event()
        self._first_seen: dict[RecordKey, datetime] = {}

    def close(self) -> None:
        """From now on micro-batches write nothing (used while the job stops)."""
        self._closed.set()

    def finish(self) -> None:
        """Once the query has stopped: the last commit's post-commit work and any checkpoint end."""
        for table in self._tables():
            table.close()
        if self._parallel is not None:
            self._parallel.shutdown(wait=True)

    def repair_pending(self) -> None:
        """At start: duplicates that a writer which died before repairing them left in any table."""
        for table in self._tables():
            table.repair_pending()

    def _tables(self) -> list[DedupTable]:
        return [*(d.table for d in self.destinations), self.dead]

    def __call__(self, clock_df: DataFrame, batch_id: int) -> None:
        retrying = Retrying(
            stop=stop_after_attempt(self.batch.write_attempts),
            wait=wait_exponential_jitter(multiplier=0.5, max=30, jitter=0.5),
            # a lost writer lease does not come back: retrying would only burn the records' deliveries
            retry=retry_if_exception_type(Exception) & retry_if_not_exception_type(LeaseLostError),
            reraise=True,
            before_sleep=lambda state: log.warning(
                "micro-batch %d attempt %d failed, records RELEASEd, retrying: %s",
                batch_id,
                state.attempt_number,
                state.outcome.exception() if state.outcome else None,
            ),
        )
        for attempt in retrying:
            with attempt:
                self._attempt(batch_id, last=attempt.retry_state.attempt_number >= self.batch.write_attempts)

    def _attempt(self, batch_id: int, last: bool = False) -> None:
        if self._closed.is_set():
            return
        self.stats.start_cycle(batch_id)
        if self._dependency_down:  # raises DependencyUnavailable again while it is still down
            for d in self.destinations:
                d.format.probe()
            self._dependency_down = False
            log.warning("the payload format's dependency answers again: the members poll again")
            self._on_resume()
        with _timed(self.stats, "drain"):
            polls = self.buffer.drain(
                self.batch.max_records, self.batch.max_wait_ms / 1000, self.batch.linger_ms / 1000
            )
        if not polls:
            self.stats.empty_batches += 1
            return
        drained_at = datetime.now(UTC)
        drained = sum(len(p) for p in polls)
        self.stats.records_in += drained
        self.stats.recent_in[batch_id] = self.stats.recent_in.get(batch_id, 0) + drained
        try:
            self._run(polls, batch_id)
        except BaseException as e:
            self.stats.failed_attempts += 1
            if isinstance(e, DependencyUnavailable) and not last:
                self._dependency_down = True  # stop polling first: released records are not delivered again
                self._on_pause()
            if last or isinstance(e, LeaseLostError):  # the job fails now: stop the members first, or they
                self._on_fatal()  # poll the released records again at once, each poll costing a delivery
            for p in polls:
                p.batch.release_undecided()
            self._remember_first_seen(polls, drained_at)
            raise

    def _run(self, polls: list[Poll], batch_id: int) -> None:
        with _timed(self.stats, "plan"):
            for table in self._tables():
                table.refresh()
            plan = plan_batch(polls, self._table_of, self.dead)
        self.stats.dedup_hits += plan.count(PRESENT)
        self.stats.dead_letter_hits += plan.count(PARKED)
        self.stats.in_batch_duplicates += plan.count(COPY)
        # each table's rows are written and decided on that table's commit alone: a failing table's
        # records stay undecided (the attempt's failure path RELEASEs them), the others' are decided
        if self._parallel is not None:
            topics = plan.rows.column("topic").to_numpy(zero_copy_only=False)
            jobs = [(d, np.isin(topics, d.topics)) for d in self.destinations]
            futures = [self._parallel.submit(_outcome_of, self._land, d, mine, plan, batch_id) for d, mine in jobs]
            outcomes = [f.result() for f in futures]
        else:  # one table: every row is its own
            jobs = [(self.destinations[0], np.ones(plan.rows.num_rows, dtype=np.bool_))]
            outcomes = [_outcome_of(self._land, d, mine, plan, batch_id) for d, mine in jobs]
        bad: dict[int, BadRecord] = {}
        for landed, _ in outcomes:
            bad |= landed
        dead_proof = self._write_dead_letters(plan, bad, batch_id) if bad else None
        with _timed(self.stats, "decide"):
            if plan.count(PARKED):
                plan.decide(plan.of_kind(PARKED), Decision.REJECT, self.dead.proof_of_presence())
            bad_rows = np.fromiter(sorted(bad), dtype=np.intp, count=len(bad))
            plan.decide(plan.with_copies(bad_rows), Decision.REJECT, dead_proof)
            self._account_locks(polls)
        errors = [error for _, error in outcomes if error is not None]
        failed = next((e for e in errors if isinstance(e, LeaseLostError)), errors[0] if errors else None)
        if failed is not None:
            raise failed
        if faults.active("after_accept"):
            for p in polls:
                p.batch.acks_committed.wait(30)
            faults.hit("after_accept")

    def _land(
        self, dest: Destination, mine: npt.NDArray[np.bool_], plan: BatchPlan, batch_id: int
    ) -> dict[int, BadRecord]:
        """Write one table's candidates and decide its rows; its bad records, by row of the batch."""
        candidates = plan.candidates[mine[plan.candidates]]
        written = _Written()
        for replan in range(REPLANS + 1):
            if not candidates.size:
                break
            try:
                written = self._write_main(dest, plan, candidates, batch_id)
                break
            except ClaimHeld as taken:  # another writer committed some of them after our plan: they are in
                if replan == REPLANS:  # the table, decided on its commit; the rest are written again
                    raise
                now_present = _held(plan.rows.take(pa.array(candidates, pa.int64())), taken.held)
                log.warning("%s: re-planned, %d records committed by another writer first", taken, now_present.sum())
                self.stats.dedup_hits += int(now_present.sum())
                with _timed(self.stats, "decide"):
                    plan.decide(
                        plan.with_copies(candidates[now_present]), Decision.ACCEPT, dest.table.proof_of_presence()
                    )
                candidates = candidates[~now_present]
        with _timed(self.stats, "decide"):
            present = plan.of_kind(PRESENT) & mine
            if present.any():
                plan.decide(present, Decision.ACCEPT, dest.table.proof_of_presence())
            plan.decide(plan.with_copies(candidates[written.accepted]), Decision.ACCEPT, written.proof)
            plan.decide(plan.with_copies(candidates[written.unsure]), Decision.RELEASE)
        return {int(candidates[i]): b for i, b in written.bad.items()}

    # -- the main table --------------------------------------------------------------------------------

    def _write_main(self, dest: Destination, plan: BatchPlan, candidates: Indices, batch_id: int) -> _Written:
        """Check, stamp and append the candidates; which of them the commit holds, and the bad ones."""
        stamp = datetime.now(UTC)
        with _timed(self.stats, "arrow"):
            rows = plan.rows.take(pa.array(candidates, pa.int64()))
            bad = {b.index: b for b in precheck(rows, dest.format.settings, self.max_delivery_count)}
        with _timed(self.stats, "read"):
            found, read = dest.format.read(rows)  # DependencyUnavailable: nothing written, all RELEASEd
            bad = {**{b.index: b for b in found}, **bad}  # a shared check's class wins
        with _timed(self.stats, "arrow"):
            keep = np.ones(rows.num_rows, dtype=np.bool_)
            keep[list(bad)] = False
            kept = np.flatnonzero(keep)
            to_write = stamped(
                rows.filter(pa.array(keep)).append_column(ROW, pa.array(kept, pa.int64())), batch_id, stamp
            )
            claim = BatchOffsets.of_rows(to_write)
        if to_write.num_rows == 0:
            return _Written(bad=bad)
        with _timed(self.stats, "frame"):
            frame = dest.table.frame(to_write)
        parsed = read.parse(frame)
        observed = None
        if read.needs_spark:
            observed = Observation()
            parsed = parsed.observe(observed, F.count_if(F.col(BAD)).alias("bad"))
            main_rows = read.main_rows(parsed.where(~F.col(BAD)))
        else:
            main_rows = read.main_rows(parsed)
        with _timed(self.stats, "wait"):
            dest.table.wait_for_room()
        with _timed(self.stats, "write"):
            appended = dest.table.append(main_rows, claim, batch_id, stamp, merge_schema=dest.format.merge_schema)
        with _timed(self.stats, "diagnose"):
            counted = int(observed.get["bad"]) if observed is not None and appended is not None else 0
            unsure_commit = appended is None and observed is not None  # no commit: maybe every row was bad
            unreadable = self._diagnose(read, frame) if counted or unsure_commit else {}
        bad |= unreadable
        written = claim
        if appended is None:
            written = BatchOffsets()  # no commit: nothing was written
        elif unreadable:
            written = claim.difference(BatchOffsets.of_rows(rows.take(pa.array(sorted(unreadable), pa.int64()))))
            if len(unreadable) != counted:  # the two jobs disagree: ask the table what the commit holds
                log.error("the write counted %d unreadable records, the diagnosis %d", counted, len(unreadable))
                written = dest.table.written_offsets(appended)
        with _timed(self.stats, "fold"):
            proof = dest.table.settle(appended, written) if appended is not None else None
        held = _held(rows, written)
        accepted = np.flatnonzero(held)
        unsure = np.flatnonzero(~held & ~np.isin(np.arange(rows.num_rows), list(bad)))
        if unsure.size:
            log.error("%d records are neither in the commit nor unreadable: RELEASEd", unsure.size)
        return _Written(proof, accepted, bad, unsure)

    def _diagnose(self, read: BatchRead, frame: DataFrame) -> dict[int, BadRecord]:
        """The records the write filtered out, with their error class (a second Spark job, bad batches only)."""
        verdicts = read.classify(frame).where(F.col(BAD)).select(ROW, ERROR_CLASS, ERROR_MESSAGE).collect()
        return {int(r[ROW]): BadRecord(int(r[ROW]), r[ERROR_CLASS], r[ERROR_MESSAGE]) for r in verdicts}

    # -- the dead-letter table -------------------------------------------------------------------------

    def _write_dead_letters(self, plan: BatchPlan, bad: dict[int, BadRecord], batch_id: int) -> CommitProof:
        """One commit to the shared dead-letter table for every table's bad records (rows of the batch)."""
        stamp = datetime.now(UTC)
        with _timed(self.stats, "dead_letter"):
            order = sorted(bad)
            records = plan.rows.take(pa.array(order, pa.int64()))
            keys = list(zip(*(records.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))
            rows = dead_letter_rows(
                records,
                [bad[n] for n in order],
                [self._first_seen.pop(k, stamp) for k in keys],
                stamp,
                self.job_name,
                batch_id,
            )
            claim = BatchOffsets.of_rows(rows)
            appended = self.dead.append(self.dead.frame(rows), claim, batch_id, stamp)
            if appended is None:
                raise RuntimeError(f"{self.dead.table_path}: the dead-letter append recorded no commit")
            proof = self.dead.settle(appended, claim)
        self.stats.dead_lettered += len(order)
        classes = Counter(b.error_class for b in bad.values())
        self.stats.dead_lettered_by_class.update(classes)
        log.warning("dead-lettered %d records: %s", len(order), ", ".join(f"{c}={n}" for c, n in classes.items()))
        return proof

    def _remember_first_seen(self, polls: list[Poll], drained_at: datetime) -> None:
        """Records of a failed attempt come back later; the dead-letter row says when we first saw them."""
        for p in polls:
            columns = (p.rows.column(c).to_pylist() for c in ("topic", "partition", "offset"))
            for key in zip(*columns, strict=True):
                self._first_seen.setdefault(key, drained_at)
        while len(self._first_seen) > FIRST_SEEN_MAX:
            del self._first_seen[next(iter(self._first_seen))]

    def _account_locks(self, polls: list[Poll]) -> None:
        now = time.monotonic()
        oldest = max(now - p.batch.acquired_at for p in polls)
        self.stats.max_cycle_s = max(self.stats.max_cycle_s, oldest)
        self.stats.last_cycle_s = oldest
        self.stats.cycle_s_sum += oldest
        self.stats.cycles += 1
        self.stats.late_accepts += sum(len(p) for p in polls if now - p.batch.acquired_at >= self.lock_duration_s)
        if oldest > 0.5 * self.lock_duration_s:
            self.stats.cycles_near_lock += 1
            log.warning(
                "a poll took %.1fs from acquisition to ACCEPT, over half the %.1fs record lock: "
                "lower batch.max_records or pump.max_poll_records",
                oldest,
                self.lock_duration_s,
            )


def _held(rows: pa.Table, written: BatchOffsets) -> npt.NDArray[np.bool_]:
    """Which of `rows` (topic, partition, offset) the offsets `written` hold."""
    out = np.zeros(rows.num_rows, dtype=np.bool_)
    for key, (at, offsets) in partition_groups(rows):
        if key in written:
            out[at] = written[key].contains_many(offsets)
    return out
