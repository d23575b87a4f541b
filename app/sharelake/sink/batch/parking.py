"""Parking a round's bad records in the dead-letter sink beside the next round: what each append decided.

One `DeadLetterParking` per sink holds the dead-letter sink, the one thread its appends run in (one at a time),
the append in flight, and the outcomes of appends that are over but not yet decided. It decides nothing itself:
an append's outcome (`Parked`: REJECT with the append's proof, or the error that left its records to be
RELEASEd) waits here until the lane that parked them takes it and decides it. Every lane parks through it and
reads through it which records are parked already, under one lock: an append's fold into the sink's dedup cache
never runs while a lane's plan reads it.

- `park_beside`: the previous append ends first, then this round's bad records go to the thread: one append of
  every table's bad rows.
- `parked_holder`: what a plan asks which records are parked. Records a share group delivers for the first time
  cannot be (the table is not read, the running append not waited for); otherwise once that append is over,
  after other writers' commits.
- `outcomes`: a lane's appends that are over (`wait=True`: once the append in flight is over too);
  `finish`: every lane's, once the last append is over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sharelake.acknowledge.proof import Decision, Proof
from sharelake.formats.base import BadRecord
from sharelake.sink.batch.plan import NOTHING_PARKED, BatchPlan, Holder, Verdict
from sharelake.sink.batch.stats import SinkStats, timed
from sharelake.sink.dead_letter.sinks import DeadLetterSink

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Parked:
    """What one append decided for its round (`plan`) of lane `lane`: REJECT its records with the append's proof
    (`verdict`), or, when it failed (`error`), nothing: its records are to be RELEASEd (they come back)."""

    lane: int
    plan: BatchPlan
    verdict: Verdict | None
    error: BaseException | None = None


class DeadLetterParking:
    def __init__(self, dead_letters: DeadLetterSink, stats: SinkStats, job_name: str):
        self.dead_letters = dead_letters
        self._stats = stats
        self._job_name = job_name
        self._thread = ThreadPoolExecutor(1, "sink-dead-letters")
        self._in_flight: Future[Parked] | None = None
        self._over: defaultdict[int, list[Parked]] = defaultdict(list)  # by lane: appends over, not yet decided
        self._lock = threading.RLock()  # the lanes' parks and plans' reads, against each other

    def finish(self) -> list[Parked]:
        """The last append ends, then its thread: every lane's outcomes not yet taken."""
        with self._lock:
            self._end_append()
            over = [p for lane in sorted(self._over) for p in self._over.pop(lane)]
        self._thread.shutdown(wait=True)
        return over

    def outcomes(self, lane: int, wait: bool = False) -> list[Parked]:
        """The lane's appends that are over, taken from here to be decided (`wait`: the one in flight too)."""
        with self._lock:
            if wait or (self._in_flight is not None and self._in_flight.done()):
                self._end_append()
            return self._over.pop(lane, [])

    @contextmanager
    def parked_holder(self, needed: bool) -> Iterator[Holder]:
        """What the plan asks which records are parked already, for as long as the plan reads it (`needed`:
        False when none of the round's records can be parked yet)."""
        if not needed:
            yield NOTHING_PARKED
            return
        with self._lock:
            self._end_append()
            self.dead_letters.refresh()
            yield self.dead_letters

    def park_beside(self, lane: int, plan: BatchPlan, bad: dict[int, BadRecord], batch_id: int) -> None:
        """Append the round's bad records in the thread while the next round runs (the previous append ends
        first); the lane takes its outcome with `outcomes`."""
        with self._lock:
            self._end_append()
            self._in_flight = self._thread.submit(self._park, lane, plan, bad, batch_id)

    def _end_append(self) -> None:
        """Until the append in flight is over (counted as the `dead_letter` step); its outcome kept for its lane."""
        if self._in_flight is None:
            return
        with timed(self._stats, "dead_letter"):
            parked = self._in_flight.result()
        self._in_flight = None
        self._over[parked.lane].append(parked)

    def _park(self, lane: int, plan: BatchPlan, bad: dict[int, BadRecord], batch_id: int) -> Parked:
        """The thread: every table's bad records (rows of the round) to the dead-letter sink, in one append; the
        outcome carries the error instead when it failed."""
        order = sorted(bad)
        started = time.perf_counter()
        try:
            records = plan.rows.take(pa.array(order, pa.int64()))
            proof: Proof = self.dead_letters.park(records, [bad[n] for n in order], self._job_name, batch_id)
        except BaseException as e:  # noqa: BLE001 - raised again in the lane that takes it
            return Parked(lane, plan, None, e)
        self._stats.dead_letter_append_s += time.perf_counter() - started
        self._stats.dead_lettered += len(order)
        classes = Counter(b.error_class for b in bad.values())
        self._stats.dead_lettered_by_class.update(classes)
        log.warning("dead-lettered %d records: %s", len(order), ", ".join(f"{c}={n}" for c, n in classes.items()))
        rows = plan.with_copies(np.fromiter(order, dtype=np.intp, count=len(order)))
        return Parked(lane, plan, Verdict(rows, Decision.REJECT, proof))
