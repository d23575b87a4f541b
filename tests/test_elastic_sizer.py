"""Unit tests of the elastic sizer's decisions (app/sharelake/consume/elastic.py) on measured idle time.

The pool here is a plain object holding the figures the real pool reports (each member's seconds in
empty polls, the buffer's fill); the clock is the test's. The sizer on a real broker and a real
load is tested in tests/test_operations.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sharelake.acknowledge.window import DecisionWindow
from sharelake.consume import elastic
from sharelake.consume.elastic import ElasticSizer

LOCK = DecisionWindow.record_lock(30.0)


@dataclass
class Buffer:
    records: int = 0
    max_records: int = 1000


@dataclass
class Pool:
    """What ElasticSizer reads of a MemberPool, and the resizes it asked for."""

    idle: dict[int, float] = field(default_factory=lambda: {0: 0.0})
    buffer: Buffer = field(default_factory=Buffer)
    paused: bool = False
    sizes: list[int] = field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.idle)

    def idle_seconds(self) -> dict[int, float]:
        return dict(self.idle)

    def resize(self, n: int) -> None:
        self.sizes.append(n)
        while len(self.idle) < n:
            self.idle[max(self.idle) + 1] = 0.0
        while len(self.idle) > n:
            del self.idle[max(self.idle)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(elastic.time, "monotonic", c)
    return c


def run(sizer: ElasticSizer, pool: Pool, clock: Clock, seconds: float, idle_share: dict[int, float]) -> None:
    """Tick every 0.1 s for `seconds`, each member idle for its share of the time."""
    for _ in range(int(seconds * 10)):
        clock.now += 0.1
        for m in pool.idle:
            pool.idle[m] += 0.1 * idle_share.get(m, 0.0)
        sizer.tick()


def test_a_member_busy_all_the_time_grows_the_pool_once_a_window_is_measured(clock: Clock) -> None:
    pool = Pool()
    sizer = ElasticSizer(pool, 1, 3, LOCK, lambda: 1.0)  # type: ignore[arg-type]
    run(sizer, pool, clock, 9.5, {})
    assert pool.sizes == []  # no decision before a whole window
    run(sizer, pool, clock, 1.0, {})
    assert pool.sizes == [2]


def test_members_between_bursts_do_not_shrink_a_pool_the_load_keeps_half_busy(clock: Clock) -> None:
    pool = Pool(idle={0: 0.0, 1: 0.0})
    sizer = ElasticSizer(pool, 1, 3, LOCK, lambda: 1.0)  # type: ignore[arg-type]
    run(sizer, pool, clock, 30, {0: 0.4, 1: 0.4})  # each busy 60%: one member could not take it all
    assert pool.sizes == []


def test_a_quiet_topic_shrinks_the_pool_and_the_remaining_member_does_not_grow_it_back(clock: Clock) -> None:
    pool = Pool(idle={0: 0.0, 1: 0.0, 2: 0.0})
    sizer = ElasticSizer(pool, 1, 3, LOCK, lambda: 1.0)  # type: ignore[arg-type]
    run(sizer, pool, clock, 10.5, {0: 0.8, 1: 0.8, 2: 0.8})  # 0.6 members' worth of work
    assert pool.sizes == [2]
    run(sizer, pool, clock, 10.5, {0: 0.7, 1: 0.7})  # 0.6 members' worth: one member would be 60% busy
    assert pool.sizes == [2]
    run(sizer, pool, clock, 10.5, {0: 0.8, 1: 0.8})  # 0.4 members' worth
    assert pool.sizes == [2, 1]
    run(sizer, pool, clock, 30, {0: 0.6})  # the same load on one member: busy 40%, far below the grow bar
    assert pool.sizes == [2, 1]


def test_a_full_buffer_shrinks_and_a_paused_pool_is_left_alone(clock: Clock) -> None:
    pool = Pool(idle={0: 0.0, 1: 0.0}, paused=True)
    sizer = ElasticSizer(pool, 1, 3, LOCK, lambda: 1.0)  # type: ignore[arg-type]
    run(sizer, pool, clock, 30, {})  # paused members neither poll nor idle: no evidence either way
    assert pool.sizes == []
    pool.paused = False
    pool.buffer.records = 900
    run(sizer, pool, clock, 0.2, {})
    assert pool.sizes == [1]
