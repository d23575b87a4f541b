"""The foreachBatch function: drain the RecordBuffer, plan, land each table, then ACCEPT / REJECT.

Spark calls `DeltaSink.__call__` in the driver once per micro-batch of the clock stream (its
DataFrame is ignored). It orchestrates three collaborators it is given or builds:

- the attempt policy (`sharelake.sink.batch.attempt_policy`): retries with backoff, and when the members
  pause, resume or stop polling;
- one table writer per destination (`sharelake.sink.batch.table_writer`): each writes its candidates in one
  Spark job and commit, diagnoses its bad records, and returns what to decide;
- the dead-letter parking (`sharelake.sink.batch.parking`): every table's bad records of a round in one
  append to the dead-letter sink, beside the next round; it returns what each append decided.

The destinations are split into lanes (`Lane`: by default one lane of them all; a routed job's pipeline gives each
table a lane of its own), each with its lane of the buffer, where only its topics' polls arrive. A micro-batch runs
every lane's rounds, the lanes in parallel threads, each on its own: a slow table (a MERGE, a remote store) holds
back no other table's rounds. A lane lands round after round while its members refill its lane of the buffer
within `batch.max_wait_ms`, for at most `batch.micro_batch_max_ms`, so Spark's own work of a micro-batch (its
offset and commit logs, the planning) is paid once per micro-batch, not once per commit.

One round (an attempt; a failed one is tried again by the policy):

1. take whole polls from the lane of the buffer (their Arrow rows were built by the members at poll time);
2. plan (`sharelake.sink.batch.plan`): fold other writers' new commits into the lane's tables and the
   dead-letter sink, then sort every row: already in its main table (ACCEPT, no write), already
   parked (REJECT, no write), a second copy inside this batch (decided like the first), or a candidate;
3. each of the lane's table writers lands its candidates (in parallel threads when there are
   several) and its verdicts are decided as soon as it is done: ACCEPT only what a durable commit
   holds (INVARIANT 1), each table's records on that table's commit alone;
4. every table's bad records go to the dead-letter sink in one append, in a thread of their own while the
   next round runs: the next round waits for that append only before its own, or when its plan must read
   the dead-letter table (records redelivered, or a group that does not count deliveries: a share group's
   first delivery cannot be parked yet). The lane decides the append's outcome when it is over, at its
   next round's start or after a drain that found nothing: REJECT with the append's proof, or, when it
   failed, RELEASE (they come back) and fail the lane's next attempt.

Decisions come from one place, `_decide`, in the thread of the lane whose round they are, whether a table writer,
the plan or the parking produced them; a failed attempt RELEASEs the attempt's undecided records, never ACCEPTs
or REJECTs them, and the policy retries it on whatever the buffer holds then. A record that keeps failing
comes back with a higher delivery count and is dead-lettered at `dead_letter.max_delivery_count`,
before the broker would archive it unseen.

No `txnAppId`/`txnVersion` keyed on the Spark batch id: after a crash Spark re-runs the last
batch id with whatever the buffer holds now, and Delta would silently skip that write; the
records' own identity in the dedup caches makes the re-run safe instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed, wait
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from sharelake.acknowledge.lifecycle import PollBatch
from sharelake.acknowledge.proof import Decision
from sharelake.acknowledge.window import DecisionWindow
from sharelake.bridge.record_buffer import Poll, RecordBuffer
from sharelake.config.settings import BatchConfig
from sharelake.failures import faults
from sharelake.failures.errors import ConfigError
from sharelake.formats.base import SHARED_ERROR_CLASSES, BadRecord
from sharelake.sink.batch.attempt_policy import NEVER_RETRIED, AttemptPolicy
from sharelake.sink.batch.budget import BatchBudget
from sharelake.sink.batch.parking import DeadLetterParking, Parked
from sharelake.sink.batch.plan import COPY, PARKED, PRESENT, BatchPlan, Verdict, plan_batch
from sharelake.sink.batch.stats import SinkStats, timed
from sharelake.sink.batch.table_writer import Landed, TableWriter
from sharelake.sink.dead_letter.sinks import DeadLetterSink
from sharelake.sink.write.destinations import Destination

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lane:
    """Tables the sink lands on their own: the buffer's lane `index` holds only their topics' polls."""

    index: int
    destinations: list[Destination]
    writers: list[TableWriter]
    budget: BatchBudget | None  # the records a round may take, when a table's batches must be split


class LaneRoster:
    """The lanes of one micro-batch: whether each is idle (its last drain found nothing, or it has ended its
    rounds). A lane that found nothing may end its rounds once every other lane is idle too."""

    def __init__(self, lanes: Iterable[int]):
        self._idle = dict.fromkeys(lanes, False)
        self._lock = threading.Lock()

    def landed(self, lane: int) -> None:
        with self._lock:
            self._idle[lane] = False

    def may_end(self, lane: int) -> bool:
        """`lane`'s drain found nothing: whether no other lane still lands rounds."""
        with self._lock:
            self._idle[lane] = True
            return all(self._idle.values())

    def ended(self, lane: int) -> None:
        with self._lock:
            self._idle[lane] = True


class DeltaSink:
    def __init__(
        self,
        buffer: RecordBuffer,
        destinations: list[Destination],
        dead_letters: DeadLetterSink,
        batch: BatchConfig,
        max_delivery_count: int,
        window: DecisionWindow,
        job_name: str,
        on_fatal: Callable[[], None] = lambda: None,
        on_pause: Callable[[], None] = lambda: None,
        on_resume: Callable[[], None] = lambda: None,
        counts_deliveries: bool = False,
        lanes: list[list[Destination]] | None = None,
        lane_members: Callable[[int], int | None] = lambda lane: None,
    ):
        """`lanes`: the destinations of each lane of the buffer (default: one lane of them all);
        `lane_members(k)`: how many members poll for lane k (None: unknown)."""
        self.buffer = buffer
        self.destinations = destinations
        self.dead_letters = dead_letters
        self.batch = batch
        self.window = window
        self.stats = SinkStats(record_lock_seconds=window.seconds)
        self.config_error: ConfigError | None = None  # a batch found the config wrong: the run stops with it
        classes = {
            *SHARED_ERROR_CLASSES,
            *(c for d in destinations for c in (*d.format.error_classes, *d.mode.error_classes)),
        }
        self.stats.dead_lettered_by_class.update(dict.fromkeys(sorted(classes), 0))  # each class's series from start
        writer_of = {id(d): TableWriter(d, self.stats, max_delivery_count) for d in destinations}
        self._lanes = [
            Lane(
                k,
                ds,
                [writer_of[id(d)] for d in ds],
                BatchBudget(window) if any(d.mode.splits_batches for d in ds) else None,
            )
            for k, ds in enumerate(lanes or [destinations])
        ]
        self._lane_members = lane_members
        self._table_of = {t: d.table for d in destinations for t in d.topics}
        widest = max(len(lane.writers) for lane in self._lanes)
        self._parallel = ThreadPoolExecutor(widest, "sink-table") if widest > 1 else None
        self._lane_threads = ThreadPoolExecutor(len(self._lanes), "sink-lane") if len(self._lanes) > 1 else None
        self.policy = AttemptPolicy(
            batch.write_attempts, [d.format.probe for d in destinations], on_fatal, on_pause, on_resume
        )
        self._closed = threading.Event()
        # each batch's bad records are parked beside the next batch, in a thread of their own
        self.parking = DeadLetterParking(dead_letters, self.stats, job_name)
        # a share group's delivery count of 1: the record was never delivered, so it cannot be parked yet
        self._counts_deliveries = counts_deliveries
        self._append_errors: dict[int, BaseException] = {}  # by lane: its failed append, failing its next attempt

    def close(self) -> None:
        """From now on micro-batches write nothing (used while the job stops)."""
        self._closed.set()

    def finish(self) -> None:
        """Once the query has stopped: the last dead-letter append ends, then the write threads (the
        tables are their opener's to close: `sharelake.run.pipeline.IngestRun`, the warm-up)."""
        self._decide_parked(self.parking.finish(), raise_error=False)
        for threads in (self._parallel, self._lane_threads):
            if threads is not None:
                threads.shutdown(wait=True)

    def repair_pending(self) -> None:
        """At start: duplicates that a writer which died before repairing them left in any table."""
        for d in self.destinations:
            d.table.repair_pending()
        self.dead_letters.repair_pending()

    def __call__(self, clock_df: DataFrame, batch_id: int) -> None:
        """One micro-batch: each lane's rounds (the lanes in parallel threads, each on its own)."""
        roster = LaneRoster(lane.index for lane in self._lanes)
        if self._lane_threads is None:
            self._rounds(self._lanes[0], batch_id, roster)
            return
        futures = [self._lane_threads.submit(self._rounds, lane, batch_id, roster) for lane in self._lanes]
        wait(futures)
        failed = _first_fatal([e for e in (f.exception() for f in futures) if e is not None])
        if failed is not None:
            raise failed

    def _rounds(self, lane: Lane, batch_id: int, roster: LaneRoster) -> None:
        """A lane's rounds of drain -> land -> decide while the buffer refills within `batch.max_wait_ms`,
        for at most `batch.micro_batch_max_ms` (each round its own commit per table and its own attempts):
        Spark's own work runs once per micro-batch, not once per commit. A lane whose drain found nothing
        goes on waiting for its polls while another lane still lands rounds (the micro-batch lasts as
        long as that lane anyway)."""
        ends = time.monotonic() + self.batch.micro_batch_max_ms / 1000
        landed_any = False
        try:
            while not self._closed.is_set():
                for attempt in self.policy.retrying(batch_id):
                    with attempt:
                        landed = self._attempt(lane, batch_id, self.policy.is_last(attempt.retry_state.attempt_number))
                if time.monotonic() >= ends:
                    break
                if landed:
                    landed_any = True
                    roster.landed(lane.index)
                elif roster.may_end(lane.index):
                    break
        finally:
            roster.ended(lane.index)
        if not landed_any and lane.index == 0:  # a micro-batch that found nothing (counted once, not per lane)
            self.stats.empty_batches += 1

    def _attempt(self, lane: Lane, batch_id: int, last: bool = False) -> bool:
        """One round of a lane: whether it took polls (and landed them; a failure raises)."""
        if self._closed.is_set():
            return False
        self.stats.start_cycle(batch_id)
        self.policy.before_attempt()  # raises DependencyUnavailable again while it is still down
        self._decide_parked(self.parking.outcomes(lane.index))
        limit = self.batch.max_records if lane.budget is None else lane.budget.records(self.batch.max_records)
        with timed(self.stats, "drain"):
            linger = self.batch.max_wait_ms / 1000, self.batch.linger_ms / 1000
            polls = self.buffer.drain(limit, *linger, self._lane_members(lane.index), lane.index)
        if not polls:
            self._decide_parked(self.parking.outcomes(lane.index))
            return False
        drained_at, began = datetime.now(UTC), time.monotonic()
        drained = sum(len(p) for p in polls)
        self.stats.add_drained(batch_id, drained)
        try:
            self._run(polls, batch_id, lane)
        except BaseException as e:
            self.stats.failed_attempts += 1
            self.policy.failed(e, last)
            # its bad records decided first (REJECT, or RELEASE on a failure), then whatever else is undecided
            self._decide_parked(self.parking.outcomes(lane.index, wait=True), raise_error=False)
            self._release_undecided(p.batch for p in polls)
            self.dead_letters.seen((p.rows for p in polls), drained_at)
            raise
        if lane.budget is not None:
            lane.budget.observe(drained, time.monotonic() - began)
        return True

    def _run(self, polls: list[Poll], batch_id: int, lane: Lane) -> None:
        # a plan that reads the dead-letter table waits for the lane's append in flight, and decides it
        could_be_parked = not (self._counts_deliveries and all(_first_deliveries(p.rows) for p in polls))
        self._decide_parked(self.parking.outcomes(lane.index, wait=could_be_parked))
        failed_append = self._append_errors.pop(lane.index, None)
        if failed_append is not None:  # the lane's last dead-letter append failed: this attempt fails with it
            raise failed_append
        with timed(self.stats, "plan"), self.parking.parked_holder(could_be_parked) as holder:
            for d in lane.destinations:
                d.table.refresh()
            plan = plan_batch(polls, self._table_of, holder)
        found = {"dedup_hits": PRESENT, "dead_letter_hits": PARKED, "in_batch_duplicates": COPY}
        self.stats.add({counter: plan.count(kind) for counter, kind in found.items()})
        # each table's rows are written and decided on that table's commit alone: a failing table's
        # records stay undecided (the attempt's failure path RELEASEs them), the others' are decided
        bad: dict[int, BadRecord] = {}
        errors: dict[int, BaseException] = {}  # by destination
        for n, landed in self._land(plan, batch_id, lane.writers):  # each table decided as soon as it is done
            self._decide(plan, landed.verdicts)
            bad |= landed.bad
            if landed.error is not None:
                errors[n] = landed.error
        parked = plan.of_kind(PARKED)
        if parked.any():  # the plan read the dead-letter table: no append of it runs now
            self._decide(plan, [Verdict(parked, Decision.REJECT, self.dead_letters.proof_of_presence())])
        self._account_locks(polls)
        if bad:
            self.parking.park_beside(lane.index, plan, bad, batch_id)
        failed = _first_fatal([errors[n] for n in sorted(errors)])
        if isinstance(failed, ConfigError):  # the run ends with its one line (exit 2), not a query failure
            self.config_error = failed
        if failed is not None:
            raise failed
        if faults.active("after_accept"):
            self._decide_parked(self.parking.outcomes(lane.index, wait=True))
            for p in polls:
                p.batch.acks_committed.wait(30)
            faults.hit("after_accept")

    def _land(self, plan: BatchPlan, batch_id: int, writers: list[TableWriter]) -> Iterator[tuple[int, Landed]]:
        """Each table's outcome with its index among `writers`, as soon as it is done (tables in parallel)."""
        if len(writers) == 1 or self._parallel is None:  # one table: every row is its own
            yield 0, writers[0].land(plan, np.ones(plan.rows.num_rows, dtype=np.bool_), batch_id)
            return
        topics = plan.rows.column("topic").to_numpy(zero_copy_only=False)
        futures = {
            self._parallel.submit(w.land, plan, np.isin(topics, w.topics), batch_id): n for n, w in enumerate(writers)
        }
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:  # a decision that raised ends the attempt only once no table thread still writes
            wait(futures)

    # -- the one place records are decided ------------------------------------------------------------

    def _decide(self, plan: BatchPlan, verdicts: Iterable[Verdict]) -> None:
        """Send the verdicts: ACCEPT / REJECT (each with the proof of the commit that holds its rows) and
        RELEASE, one command per poll and verdict. The only caller of `BatchPlan.decide`."""
        with timed(self.stats, "decide"):
            for v in verdicts:
                plan.decide(v.rows, v.decision, v.proof)

    def _decide_parked(self, outcomes: list[Parked], raise_error: bool = True) -> None:
        """Decide what dead-letter appends that are over decided: REJECT with the append's proof, or, when it
        failed (or its records were decided meanwhile: a stop past its bound RELEASEd them), RELEASE what is
        still undecided of the round. A failure fails the lane's next attempt (`raise_error`), or is logged."""
        for parked in outcomes:
            error = parked.error
            if parked.verdict is not None:
                try:
                    self._decide(parked.plan, [parked.verdict])
                except BaseException as e:  # noqa: BLE001 - raised again in the lane's next attempt
                    error = e
            if error is None:
                continue
            self._release_undecided(parked.plan.batches)
            if raise_error:
                self._append_errors.setdefault(parked.lane, error)
            else:
                log.warning("a dead-letter append failed, its records were RELEASEd: %s", error)

    def _release_undecided(self, batches: Iterable[PollBatch]) -> None:
        """A failed attempt: RELEASE whatever of its records no verdict reached (never ACCEPT or REJECT)."""
        for batch in batches:
            batch.release_undecided()

    def _account_locks(self, polls: list[Poll]) -> None:
        now = time.monotonic()
        oldest = max(now - p.batch.acquired_at for p in polls)
        window = self.window.seconds
        late = sum(len(p) for p in polls if now - p.batch.acquired_at >= window)
        self.stats.cycle_done(oldest, late, near_lock=oldest > 0.5 * window)
        if oldest > 0.5 * window:
            log.warning(
                "a poll took %.1fs from acquisition to ACCEPT, over half the %s: "
                "lower batch.max_records or pump.max_poll_records",
                oldest,
                self.window,
            )


def _first_fatal(errors: list[BaseException]) -> BaseException | None:
    """The error a failed attempt raises: the first that no retry mends (a lost lease, a config a batch
    found wrong, a commit another writer replaced: `NEVER_RETRIED`), else the first; None without errors."""
    return next((e for e in errors if isinstance(e, NEVER_RETRIED)), errors[0] if errors else None)


def _first_deliveries(rows: pa.Table) -> bool:
    """Whether every row's delivery count is 1 (none missing)."""
    counts = rows.column("delivery_count")
    return counts.null_count == 0 and bool((counts.to_numpy() == 1).all())
