"""Elastic members: sizes the member pool between `pump.min_members` and `pump.max_members`.

Ticked by `app.pipeline`'s main loop. The seed design's supervisor scaling flow, inside one
driver, driven by what the pool and the sink measure:

- shrink when the buffer is over 75% full (the sink is the bottleneck: more members would only
  hold record locks longer), when the last batch cycle took over half the record lock, or when
  most members are idle (the topic is quiet);
- grow when the buffer is under 25% full and every member is busy (polling is the bottleneck).

One step at a time, at most one per cooldown, so each change is measured before the next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from app.consume.member_pool import MemberPool

log = logging.getLogger(__name__)


class ElasticSizer:
    def __init__(
        self,
        pool: MemberPool,
        low: int,
        high: int,
        lock_duration_s: float,
        last_cycle_s: Callable[[], float],
        cooldown_s: float = 10.0,
    ):
        self.pool = pool
        self.low = low
        self.high = high
        self.lock_duration_s = lock_duration_s
        self._last_cycle_s = last_cycle_s
        self.cooldown_s = cooldown_s
        self._changed_at = time.monotonic()

    @property
    def enabled(self) -> bool:
        return self.low < self.high

    def tick(self) -> None:
        now = time.monotonic()
        if not self.enabled or now - self._changed_at < self.cooldown_s:
            return
        n = self.pool.size
        fill = self.pool.buffer.records / max(1, self.pool.buffer.max_records)
        busy = self.pool.busy_members()
        cycle = self._last_cycle_s()
        if n > self.low and fill > 0.75:
            self._resize(n - 1, f"buffer {fill:.0%} full: the sink is the bottleneck")
        elif n > self.low and cycle > 0.5 * self.lock_duration_s:
            self._resize(n - 1, f"batch cycle {cycle:.1f}s is over half the {self.lock_duration_s:.0f}s record lock")
        elif n > self.low and busy * 2 < n:
            self._resize(n - 1, f"{n - busy} of {n} members idle")
        elif n < self.high and fill < 0.25 and busy == n:
            self._resize(n + 1, f"buffer {fill:.0%} full and all {n} members busy")

    def _resize(self, n: int, why: str) -> None:
        log.info("elastic members: %d -> %d (%s)", self.pool.size, n, why)
        self.pool.resize(n)
        self._changed_at = time.monotonic()
