"""The foreachBatch function: drain the RecordBuffer, plan, land each table, then ACCEPT / REJECT.

Spark calls `DeltaSink.__call__` in the driver once per micro-batch of the clock stream (its
DataFrame is ignored). It orchestrates three collaborators it is given or builds:

- the attempt policy (`app.sink.batch.attempt_policy`): retries with backoff, and when the members
  pause, resume or stop polling;
- one table writer per destination (`app.sink.write.table_writer`): each writes its candidates in one
  Spark job and commit, diagnoses its bad records, and returns what to decide;
- the dead-letter sink (`app.sink.dead_letter.sinks`): every table's bad records in one append,
  beside the next batch.

One attempt:

1. take whole polls from the buffer (their Arrow rows were built by the members at poll time);
2. plan (`app.sink.batch.plan`): fold other writers' new commits into the tables and the
   dead-letter sink, then sort every row: already in its main table (ACCEPT, no write), already
   parked (REJECT, no write), a second copy inside this batch (decided like the first), or a candidate;
3. each destination's table writer lands its candidates (in parallel threads when there are
   several) and its verdicts are decided as soon as it is done: ACCEPT only what a durable commit
   holds (INVARIANT 1), each table's records on that table's commit alone;
4. every table's bad records go to the dead-letter sink in one append, then are REJECTed with its
   proof, in a thread of their own while the next batch runs: the next batch waits for that append
   only before its own, or when its plan must read the dead-letter table (records redelivered,
   or a group that does not count deliveries: a share group's first delivery cannot be parked
   yet). A failed append RELEASEs its records (they come back) and fails the next attempt.

Decisions come from one place, `_decide` (the only caller of `BatchPlan.decide`); a failed
attempt RELEASEs the attempt's undecided records (`_release_undecided`), never ACCEPTs or REJECTs
them, and the policy retries it on whatever the buffer holds then. A record that keeps failing
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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait
from contextlib import nullcontext
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from app.acknowledge.proof import Decision, Proof
from app.acknowledge.window import DecisionWindow
from app.bridge.record_buffer import Poll, RecordBuffer
from app.config.settings import BatchConfig
from app.failures import faults
from app.failures.errors import ConfigError
from app.formats.base import SHARED_ERROR_CLASSES, BadRecord
from app.sink.batch.attempt_policy import AttemptPolicy
from app.sink.batch.budget import BatchBudget
from app.sink.batch.plan import COPY, NOTHING_PARKED, PARKED, PRESENT, BatchPlan, Holder, Verdict, plan_batch
from app.sink.batch.stats import SinkStats, timed
from app.sink.dead_letter.sinks import DeadLetterSink
from app.sink.delta.writer_lease import LeaseLostError
from app.sink.write.destinations import Destination
from app.sink.write.table_writer import Landed, TableWriter

log = logging.getLogger(__name__)


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
    ):
        self.buffer = buffer
        self.destinations = destinations
        self.dead_letters = dead_letters
        self.batch = batch
        self.window = window
        self.job_name = job_name
        self.stats = SinkStats(record_lock_seconds=window.seconds)
        # the records a batch may take, when a destination's batches must be split to stay inside the lock
        self._budget = BatchBudget(window) if any(d.mode.splits_batches for d in destinations) else None
        self.config_error: ConfigError | None = None  # a batch found the config wrong: the run stops with it
        classes = {
            *SHARED_ERROR_CLASSES,
            *(c for d in destinations for c in (*d.format.error_classes, *d.mode.error_classes)),
        }
        self.stats.dead_lettered_by_class.update(dict.fromkeys(sorted(classes), 0))  # each class's series from start
        self._writers = [TableWriter(d, self.stats, max_delivery_count) for d in destinations]
        self._table_of = {t: d.table for d in destinations for t in d.topics}
        self._parallel = ThreadPoolExecutor(len(destinations), "sink-table") if len(destinations) > 1 else None
        self.policy = AttemptPolicy(
            batch.write_attempts, [d.format.probe for d in destinations], on_fatal, on_pause, on_resume
        )
        self._closed = threading.Event()
        # the dead-letter append of a batch runs in this thread beside the next batch; one at a time
        self._parking = ThreadPoolExecutor(1, "sink-dead-letters")
        self._parked: Future[BaseException | None] | None = None
        # a share group's delivery count of 1: the record was never delivered, so it cannot be parked yet
        self._counts_deliveries = counts_deliveries

    def close(self) -> None:
        """From now on micro-batches write nothing (used while the job stops)."""
        self._closed.set()

    def finish(self) -> None:
        """Once the query has stopped: the last dead-letter append ends, then the write threads (the
        tables are their opener's to close: `app.run.pipeline.IngestRun`, the warm-up)."""
        self._wait_parked(raise_error=False)
        self._parking.shutdown(wait=True)
        if self._parallel is not None:
            self._parallel.shutdown(wait=True)

    def repair_pending(self) -> None:
        """At start: duplicates that a writer which died before repairing them left in any table."""
        for d in self.destinations:
            d.table.repair_pending()
        self.dead_letters.repair_pending()

    def __call__(self, clock_df: DataFrame, batch_id: int) -> None:
        """One micro-batch: rounds of drain -> land -> decide while the buffer refills within
        `batch.max_wait_ms`, for at most `batch.micro_batch_max_ms` (each round its own commit per
        table and its own attempts); Spark's own work runs once per micro-batch, not once per commit."""
        ends = time.monotonic() + self.batch.micro_batch_max_ms / 1000
        first = True
        while not self._closed.is_set():
            for attempt in self.policy.retrying(batch_id):
                with attempt:
                    landed = self._attempt(batch_id, self.policy.is_last(attempt.retry_state.attempt_number), first)
            if not landed or time.monotonic() >= ends:
                return
            first = False

    def _attempt(self, batch_id: int, last: bool = False, first: bool = True) -> bool:
        """One round: whether it took polls (and landed them; a failure raises)."""
        if self._closed.is_set():
            return False
        self.stats.start_cycle(batch_id)
        self.policy.before_attempt()  # raises DependencyUnavailable again while it is still down
        limit = self.batch.max_records if self._budget is None else self._budget.records(self.batch.max_records)
        with timed(self.stats, "drain"):
            polls = self.buffer.drain(limit, self.batch.max_wait_ms / 1000, self.batch.linger_ms / 1000)
        if not polls:
            self.stats.empty_batches += first
            return False
        drained_at, began = datetime.now(UTC), time.monotonic()
        drained = sum(len(p) for p in polls)
        self.stats.records_in += drained
        self.stats.recent_in[batch_id] = self.stats.recent_in.get(batch_id, 0) + drained
        try:
            self._run(polls, batch_id)
        except BaseException as e:
            self.stats.failed_attempts += 1
            self.policy.failed(e, last)
            self._wait_parked(raise_error=False)  # its bad records decided (REJECT, or RELEASE on a failure)
            self._release_undecided(polls)
            self.dead_letters.seen((p.rows for p in polls), drained_at)
            raise
        if self._budget is not None:
            self._budget.observe(drained, time.monotonic() - began)
        return True

    def _run(self, polls: list[Poll], batch_id: int) -> None:
        if self._parked is not None and self._parked.done():
            self._wait_parked()  # the last dead-letter append's error, if it failed, fails this attempt
        with timed(self.stats, "plan"):
            for d in self.destinations:
                d.table.refresh()
            plan = plan_batch(polls, self._table_of, self._parked_holder(polls))
        self.stats.dedup_hits += plan.count(PRESENT)
        self.stats.dead_letter_hits += plan.count(PARKED)
        self.stats.in_batch_duplicates += plan.count(COPY)
        # each table's rows are written and decided on that table's commit alone: a failing table's
        # records stay undecided (the attempt's failure path RELEASEs them), the others' are decided
        bad: dict[int, BadRecord] = {}
        errors: dict[int, BaseException] = {}  # by destination
        for n, landed in self._land(plan, batch_id):  # each table decided as soon as it is done
            self._decide(plan, landed.verdicts)
            bad |= landed.bad
            if landed.error is not None:
                errors[n] = landed.error
        parked = plan.of_kind(PARKED)
        if parked.any():  # the plan read the dead-letter table: no append of it runs now
            self._decide(plan, [Verdict(parked, Decision.REJECT, self.dead_letters.proof_of_presence())])
        if bad:
            self._park_beside(plan, bad, batch_id)
        self._account_locks(polls)
        in_order = [errors[n] for n in sorted(errors)]
        fatal = (e for e in in_order if isinstance(e, LeaseLostError | ConfigError))
        failed = next(fatal, in_order[0] if in_order else None)
        if isinstance(failed, ConfigError):  # the run ends with its one line (exit 2), not a query failure
            self.config_error = failed
        if failed is not None:
            raise failed
        if faults.active("after_accept"):
            for p in polls:
                p.batch.acks_committed.wait(30)
            faults.hit("after_accept")

    def _land(self, plan: BatchPlan, batch_id: int) -> Iterator[tuple[int, Landed]]:
        """Each table's outcome with its destination's index, as soon as it is done (tables in parallel)."""
        if self._parallel is None:  # one table: every row is its own
            yield 0, self._writers[0].land(plan, np.ones(plan.rows.num_rows, dtype=np.bool_), batch_id)
            return
        topics = plan.rows.column("topic").to_numpy(zero_copy_only=False)
        futures = {
            self._parallel.submit(w.land, plan, np.isin(topics, w.topics), batch_id): n
            for n, w in enumerate(self._writers)
        }
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:  # a decision that raised ends the attempt only once no table thread still writes
            wait(futures)

    # -- the one place records are decided ------------------------------------------------------------

    def _decide(self, plan: BatchPlan, verdicts: Iterable[Verdict], timing: bool = True) -> None:
        """Send the verdicts: ACCEPT / REJECT (each with the proof of the commit that holds its rows) and
        RELEASE, one command per poll and verdict. The only caller of `BatchPlan.decide`. `timing`:
        counted as the running batch's `decide` step (not from the dead-letter thread)."""
        with timed(self.stats, "decide") if timing else nullcontext():
            for v in verdicts:
                plan.decide(v.rows, v.decision, v.proof)

    def _release_undecided(self, polls: list[Poll]) -> None:
        """A failed attempt: RELEASE whatever of its records no verdict reached (never ACCEPT or REJECT)."""
        for p in polls:
            p.batch.release_undecided()

    # -- the dead-letter sink --------------------------------------------------------------------------

    def _parked_holder(self, polls: list[Poll]) -> Holder:
        """What the plan asks which records are parked already. Records a share group delivers for
        the first time cannot be: then the table is not read (and the last batch's append, still
        running, not waited for). Otherwise once that append is over, after other writers' commits."""
        if self._counts_deliveries and all(_first_deliveries(p.rows) for p in polls):
            return NOTHING_PARKED
        self._wait_parked()
        self.dead_letters.refresh()
        return self.dead_letters

    def _park_beside(self, plan: BatchPlan, bad: dict[int, BadRecord], batch_id: int) -> None:
        """Park the batch's bad records in the dead-letter thread, then REJECT them there, while the
        next batch runs. The previous batch's append ends first (its error, if any, raised here)."""
        self._wait_parked()
        self._parked = self._parking.submit(self._park_then_reject, plan, bad, batch_id)

    def _wait_parked(self, raise_error: bool = True) -> None:
        """Until the last dead-letter append is over (counted as the `dead_letter` step); raises its error."""
        if self._parked is None:
            return
        with timed(self.stats, "dead_letter"):
            error = self._parked.result()
        self._parked = None
        if error is None:
            return
        if raise_error:
            raise error
        log.warning("a dead-letter append failed, its records were RELEASEd: %s", error)

    def _park_then_reject(self, plan: BatchPlan, bad: dict[int, BadRecord], batch_id: int) -> BaseException | None:
        """The dead-letter thread: park, then REJECT with its proof; on a failure RELEASE them (they come
        back) and return the error for the sink thread to raise."""
        rows = plan.with_copies(np.fromiter(sorted(bad), dtype=np.intp, count=len(bad)))
        started = time.perf_counter()
        try:
            proof = self._park(plan, bad, batch_id)
            self.stats.dead_letter_append_s += time.perf_counter() - started
            self._decide(plan, [Verdict(rows, Decision.REJECT, proof)], timing=False)
            return None
        except BaseException as e:  # noqa: BLE001 - raised again in the sink thread (`_wait_parked`)
            # every other record of the batch is decided, or RELEASEd by its failed attempt once this
            # returns: what is still undecided here are these (a stop past its bound RELEASEd them already)
            for poll in plan.batches:
                poll.release_undecided()
            return e

    def _park(self, plan: BatchPlan, bad: dict[int, BadRecord], batch_id: int) -> Proof:
        """Every table's bad records (rows of the batch) to the dead-letter sink, in one append."""
        order = sorted(bad)
        records = plan.rows.take(pa.array(order, pa.int64()))
        proof = self.dead_letters.park(records, [bad[n] for n in order], self.job_name, batch_id)
        self.stats.dead_lettered += len(order)
        classes = Counter(b.error_class for b in bad.values())
        self.stats.dead_lettered_by_class.update(classes)
        log.warning("dead-lettered %d records: %s", len(order), ", ".join(f"{c}={n}" for c, n in classes.items()))
        return proof

    def _account_locks(self, polls: list[Poll]) -> None:
        now = time.monotonic()
        oldest = max(now - p.batch.acquired_at for p in polls)
        self.stats.max_cycle_s = max(self.stats.max_cycle_s, oldest)
        self.stats.last_cycle_s = oldest
        self.stats.cycle_s_sum += oldest
        self.stats.cycles += 1
        window = self.window.seconds
        self.stats.late_accepts += sum(len(p) for p in polls if now - p.batch.acquired_at >= window)
        if oldest > 0.5 * window:
            self.stats.cycles_near_lock += 1
            log.warning(
                "a poll took %.1fs from acquisition to ACCEPT, over half the %s: "
                "lower batch.max_records or pump.max_poll_records",
                oldest,
                self.window,
            )


def _first_deliveries(rows: pa.Table) -> bool:
    """Whether every row's delivery count is 1 (none missing)."""
    counts = rows.column("delivery_count")
    return counts.null_count == 0 and bool((counts.to_numpy() == 1).all())
