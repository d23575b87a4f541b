"""Elastic members: sizes the member pool between `pump.min_members` and `pump.max_members`.

Each `ElasticSizer.tick` samples the members and may grow or shrink the pool inside one driver, by one member,
driven by what the pool and the sink measure:

- shrink when the buffer is over 75% full (the sink is the bottleneck: more members would only
  hold their records longer), when the last batch cycle took over half the group's decision window
  (`DecisionWindow`: a share group's record lock, a consumer group's `max.poll.interval.ms`), or when
  the members' busy time over the last window would fit in one member fewer at half its time
  (the topic is quiet);
- grow when the buffer is under 25% full and every member was busy (holding records, not waiting
  in poll) for at least 80% of the last window (the members are the bottleneck: each holds a poll
  until the sink decides it, so records wait on the broker).

Busy and idle are measured over a window (each member's seconds waiting in poll, sampled every `SAMPLE_S`), not
read off the members at one instant: at a bursty rate every member can be between records at the moment of a
tick, and a snapshot then shrinks a pool the load had just grown. The gap between the two thresholds keeps a
resize from undoing itself: after a shrink for idleness the remaining members are at most half busy, far from the
80% a grow needs.

One step at a time, at most one per cooldown, each measured over a window that starts after the
last change. Nothing changes while the pool is paused (a dependency of the sink is down), nor when the two
bounds are equal.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from sharelake.acknowledge.window import DecisionWindow
from sharelake.consume.member_pool import MemberPool

log = logging.getLogger(__name__)

GROW_BUSY = 0.8  # every member busy at least this share of the window (a poll's round trip is idle)
SHRINK_BUSY = 0.5  # the busy time must fit in one member fewer, each at most this busy
SAMPLE_S = 1.0


class ElasticSizer:
    def __init__(
        self,
        pool: MemberPool,
        low: int,
        high: int,
        window: DecisionWindow,
        last_cycle_s: Callable[[], float],
        cooldown_s: float = 10.0,
    ):
        self.pool = pool
        self.low = low
        self.high = high
        self.window = window
        self._last_cycle_s = last_cycle_s
        self.cooldown_s = cooldown_s
        self._changed_at = time.monotonic()
        self._samples: deque[tuple[float, dict[int, float]]] = deque()  # (time, idle seconds per member)

    @property
    def enabled(self) -> bool:
        return self.low < self.high

    def tick(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self.pool.paused:  # held back, not idle and not busy: measure afresh once it resumes
            self._samples.clear()
            return
        if not self._samples or now - self._samples[-1][0] >= SAMPLE_S:
            self._samples.append((now, self.pool.idle_seconds()))
        while len(self._samples) > 1 and now - self._samples[1][0] >= self.cooldown_s:
            self._samples.popleft()  # keep one sample at least a window old
        if now - self._changed_at < self.cooldown_s:
            return
        n = self.pool.size
        fill = self.pool.buffer.records / max(1, self.pool.buffer.max_records)
        cycle = self._last_cycle_s()
        busy = self._busy_shares(now)
        if n > self.low and fill > 0.75:
            self._resize(n - 1, f"buffer {fill:.0%} full: the sink is the bottleneck")
        elif n > self.low and cycle > 0.5 * self.window.seconds:
            self._resize(
                n - 1, f"batch cycle {cycle:.1f}s is over half the {self.window.seconds:.0f}s {self.window.name}"
            )
        elif busy is None:
            return
        elif n > self.low and sum(busy) <= SHRINK_BUSY * (n - 1):
            self._resize(n - 1, f"members idle: {sum(busy):.1f} of {n} busy over the last {self.cooldown_s:.0f}s")
        elif n < self.high and fill < 0.25 and len(busy) == n and min(busy) >= GROW_BUSY:
            self._resize(n + 1, f"buffer {fill:.0%} full and all {n} members busy {min(busy):.0%} of the time or more")

    def _busy_shares(self, now: float) -> list[float] | None:
        """Each member's share of the window it was busy, or None before a whole window is measured."""
        then, idle_then = self._samples[0]
        last, idle_now = self._samples[-1]
        span = last - then
        if now - then < self.cooldown_s - SAMPLE_S or span <= 0:
            return None
        return [1.0 - min(1.0, max(0.0, (idle_now[m] - idle_then[m]) / span)) for m in idle_now if m in idle_then]

    def _resize(self, n: int, why: str) -> None:
        log.info("elastic members: %d -> %d (%s)", self.pool.size, n, why)
        self.pool.resize(n)
        self._changed_at = time.monotonic()
        self._samples.clear()
