"""What the Delta sink counts, and the timing of an attempt's steps.

One `SinkStats` per sink, shared with its per-table writers, which add their steps' times (`timed`, summed under
one lock: tables are written in parallel threads), their dedup hits and their write modes' counts (`add`) from the
tables' threads. Its fields are declared with `sharelake.observe.counters`, so the run's summary, the progress line and
Prometheus show them. `PHASES` are an attempt's steps, in order; the step times of the last `RECENT_CYCLES`
batches are kept by Spark batch id, with the records each drained, for the progress line.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

from sharelake.observe.counters import counter, gauge

# the steps of one attempt, in order, that `SinkStats.phase_s` times
PHASES = (
    "drain",  # waiting for the buffer's polls
    "plan",  # folding other writers' new commits into the dedup caches; sorting the rows
    "arrow",  # the candidates' rows, the shared driver checks, the write stamp, the claimed offsets
    "read",  # the payload format's driver checks (Avro: headers, schema ids, the registry)
    "frame",  # the rows as a data frame (FrameBuilder.frame: Arrow batches inside the tasks)
    "wait",  # waiting for a committer: the last two commits' post-commit work (a checkpoint) still running
    "write",  # the Spark job and the Delta commit, until the commit is durable
    "fold",  # folding our commit (and any gap before it) into the cache; a repair if another writer won
    "diagnose",  # naming the rows the write left out (a small job, unless the write's job named them)
    "dead_letter",  # waiting for the last batch's dead-letter append (it runs beside the next batch)
    "decide",  # ACCEPT / REJECT commands to the members
)
RECENT_CYCLES = 256  # per-batch step times kept for the progress line (by Spark batch id)


@dataclass
class SinkStats:
    """What the sink counts (see sharelake.observe.counters)."""

    records_in: int = counter("records drained from the buffer into micro-batches (failed attempts included)")
    dedup_hits: int = counter("redelivered records already in the table: ACCEPTed without a write")
    in_batch_duplicates: int = counter("second copies inside one micro-batch: decided like the first")
    upsert_superseded: int = counter("upserted records a newer record of their key in the same batch replaced")
    upsert_split_keys: int = counter(
        "upserted keys whose records in one batch came from several partitions (their order is then not the producer's)"
    )
    dead_lettered: int = counter("records written to the dead-letter table (and REJECTed)")
    dead_letter_hits: int = counter("records already in the dead-letter table: REJECTed without a write")
    late_accepts: int = counter("records ACCEPTed after their lock duration: the ACCEPT likely failed")
    failed_attempts: int = counter("micro-batch attempts that failed and RELEASEd their records")
    dead_letter_append_s: float = counter(
        "seconds the dead-letter appends took (each beside the next micro-batch; see the dead_letter step)",
        default=0.0,
    )
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
    record_lock_seconds: float = gauge(
        "the record lock duration (seconds); a consumer group's max.poll.interval.ms", default=0.0
    )
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

    def add_drained(self, batch_id: int, records: int) -> None:
        """A round of Spark batch `batch_id` took `records` from the buffer (lanes add from their threads)."""
        with _SUMMING:
            self.records_in += records
            self.recent_in[batch_id] = self.recent_in.get(batch_id, 0) + records

    def cycle_done(self, oldest_s: float, late_records: int, near_lock: bool) -> None:
        """A round was decided: its oldest poll's acquire -> decision time, the records decided past the
        lock, and whether that time was over half the lock."""
        with _SUMMING:
            self.max_cycle_s = max(self.max_cycle_s, oldest_s)
            self.last_cycle_s = oldest_s
            self.cycle_s_sum += oldest_s
            self.cycles += 1
            self.late_accepts += late_records
            self.cycles_near_lock += near_lock

    def add(self, counts: Mapping[str, int]) -> None:
        """Add a write's counts (a write mode's `counters`, by name) to those counters."""
        with _SUMMING:
            for name, count in counts.items():
                if name not in _COUNTERS:
                    raise ValueError(f"{name} is not a counter SinkStats declares")
                setattr(self, name, getattr(self, name) + count)

    def batch_report(self, batch_id: int) -> tuple[int, dict[str, float]] | None:
        """(records drained, seconds per step) of a recent Spark batch id, for the progress line."""
        steps = self.recent.get(batch_id)
        return None if steps is None else (self.recent_in.get(batch_id, 0), steps)


_COUNTERS = frozenset(f.name for f in fields(SinkStats) if f.metadata.get("kind") == "counter")
_SUMMING = threading.Lock()  # tables are written in parallel threads: their step times and counts add up here


@contextmanager
def timed(stats: SinkStats, phase: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        spent = time.perf_counter() - start
        with _SUMMING:
            stats.phase_s[phase] += spent
            stats.cycle[phase] += spent
