"""Parking a batch's bad records in the dead-letter sink beside the next batch, then REJECTing them there.

One `DeadLetterParking` per sink holds the dead-letter sink, the one thread its appends run in (one at a time) and
the append in flight. Every lane of the sink parks through it and reads through it which records are parked
already, under one lock: an append's fold into the sink's dedup cache never runs while a lane's plan reads it.

- `park_beside`: the previous append ends first (its error raised here), then this batch's bad records go to the
  thread: one append of every table's bad rows, then REJECT with its proof (or, on a failure, RELEASE: they come
  back) through the sink's one deciding function.
- `parked_holder`: what a plan asks which records are parked. Records a share group delivers for the first time
  cannot be (the table is not read, the running append not waited for); otherwise once that append is over,
  after other writers' commits.
- `wait`: until the append in flight is over (the sink's `dead_letter` step); raises its error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

from sharelake.acknowledge.proof import Decision, Proof
from sharelake.bridge.record_buffer import Poll
from sharelake.formats.base import BadRecord
from sharelake.sink.batch.plan import NOTHING_PARKED, BatchPlan, Holder, Verdict
from sharelake.sink.batch.stats import SinkStats, timed
from sharelake.sink.dead_letter.sinks import DeadLetterSink

log = logging.getLogger(__name__)

Decide = Callable[[BatchPlan, Iterable[Verdict]], None]  # the sink's one deciding function (untimed)


class DeadLetterParking:
    def __init__(
        self, dead_letters: DeadLetterSink, stats: SinkStats, job_name: str, decide: Decide, counts_deliveries: bool
    ):
        self.dead_letters = dead_letters
        self._stats = stats
        self._job_name = job_name
        self._decide = decide
        # a share group's delivery count of 1: the record was never delivered, so it cannot be parked yet
        self._counts_deliveries = counts_deliveries
        self._thread = ThreadPoolExecutor(1, "sink-dead-letters")
        self._parked: Future[BaseException | None] | None = None
        self._lock = threading.RLock()  # the lanes' parks and plans' reads, against each other

    def finish(self) -> None:
        """The last append ends, then its thread."""
        self.wait(raise_error=False)
        self._thread.shutdown(wait=True)

    def raise_if_failed(self) -> None:
        """The last append's error, if it is over and failed (it fails the attempt that asks)."""
        with self._lock:
            if self._parked is not None and self._parked.done():
                self.wait()

    @contextmanager
    def parked_holder(self, polls: list[Poll]) -> Iterator[Holder]:
        """What the plan asks which records are parked already, for as long as the plan reads it."""
        if self._counts_deliveries and all(_first_deliveries(p.rows) for p in polls):
            yield NOTHING_PARKED
            return
        with self._lock:
            self.wait()
            self.dead_letters.refresh()
            yield self.dead_letters

    def park_beside(self, plan: BatchPlan, bad: dict[int, BadRecord], batch_id: int) -> None:
        """Park the batch's bad records in the thread, then REJECT them there, while the next batch runs.
        The previous append ends first (its error, if any, raised here)."""
        with self._lock:
            self.wait()
            self._parked = self._thread.submit(self._park_then_reject, plan, bad, batch_id)

    def wait(self, raise_error: bool = True) -> None:
        """Until the last append is over (counted as the `dead_letter` step); raises its error."""
        with self._lock:
            if self._parked is None:
                return
            with timed(self._stats, "dead_letter"):
                error = self._parked.result()
            self._parked = None
        if error is None:
            return
        if raise_error:
            raise error
        log.warning("a dead-letter append failed, its records were RELEASEd: %s", error)

    def _park_then_reject(self, plan: BatchPlan, bad: dict[int, BadRecord], batch_id: int) -> BaseException | None:
        """The thread: park, then REJECT with its proof; on a failure RELEASE them (they come back) and
        return the error for a lane to raise."""
        rows = plan.with_copies(np.fromiter(sorted(bad), dtype=np.intp, count=len(bad)))
        started = time.perf_counter()
        try:
            proof = self._park(plan, bad, batch_id)
            self._stats.dead_letter_append_s += time.perf_counter() - started
            self._decide(plan, [Verdict(rows, Decision.REJECT, proof)])
            return None
        except BaseException as e:  # noqa: BLE001 - raised again in a lane (`wait`)
            # every other record of the batch is decided, or RELEASEd by its failed attempt once this
            # returns: what is still undecided here are these (a stop past its bound RELEASEd them already)
            for poll in plan.batches:
                poll.release_undecided()
            return e

    def _park(self, plan: BatchPlan, bad: dict[int, BadRecord], batch_id: int) -> Proof:
        """Every table's bad records (rows of the batch) to the dead-letter sink, in one append."""
        order = sorted(bad)
        records = plan.rows.take(pa.array(order, pa.int64()))
        proof = self.dead_letters.park(records, [bad[n] for n in order], self._job_name, batch_id)
        self._stats.dead_lettered += len(order)
        classes = Counter(b.error_class for b in bad.values())
        self._stats.dead_lettered_by_class.update(classes)
        log.warning("dead-lettered %d records: %s", len(order), ", ".join(f"{c}={n}" for c, n in classes.items()))
        return proof


def _first_deliveries(rows: pa.Table) -> bool:
    """Whether every row's delivery count is 1 (none missing)."""
    counts = rows.column("delivery_count")
    return counts.null_count == 0 and bool((counts.to_numpy() == 1).all())
