"""Unit tests of the bounded RecordBuffer (whole polls in, whole polls out, backpressure)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import pyarrow as pa

from sharelake.acknowledge.lifecycle import AckCommand, PollBatch
from sharelake.bridge.record_buffer import Poll, RecordBuffer


def poll_of(n: int) -> Poll:
    q: queue.Queue[AckCommand] = queue.Queue()
    records: Any = [object()] * n
    return Poll(PollBatch(0, records, q), pa.table({"offset": pa.array(range(n), pa.int64())}))


def test_drain_takes_whole_polls_up_to_the_limit() -> None:
    buf = RecordBuffer(100)
    polls = [poll_of(10), poll_of(10), poll_of(10)]
    for p in polls:
        assert buf.put(p, 0)
    taken = buf.drain(max_records=25, max_wait_s=0)
    assert taken == polls[:2]
    assert buf.records == 10
    assert buf.drain(max_records=5, max_wait_s=0) == polls[2:]  # at least one poll, even if larger


def test_drain_waits_for_the_first_poll_then_gives_up() -> None:
    buf = RecordBuffer(10)
    t0 = time.monotonic()
    assert buf.drain(10, max_wait_s=0.2) == []
    assert time.monotonic() - t0 >= 0.19
    p = poll_of(1)
    threading.Timer(0.05, lambda: buf.put(p, 1)).start()
    assert buf.drain(10, max_wait_s=2) == [p]


def test_full_buffer_applies_backpressure_until_drained() -> None:
    buf = RecordBuffer(10)
    assert buf.put(poll_of(8), 0)
    assert not buf.put(poll_of(5), timeout_s=0.05)  # no room
    late = poll_of(5)
    done = threading.Event()
    threading.Thread(target=lambda: (buf.put(late, 5), done.set())).start()
    time.sleep(0.05)
    assert not done.is_set()
    buf.drain(10, 0)
    assert done.wait(2)
    assert buf.records == 5


def test_an_empty_buffer_takes_a_poll_larger_than_its_bound() -> None:
    buf = RecordBuffer(10)
    assert buf.put(poll_of(50), 0)
    assert buf.take_all()[0].__len__() == 50
    assert buf.records == 0


def test_drain_lingers_for_polls_that_land_together_but_not_past_a_full_batch() -> None:
    buf = RecordBuffer(100)
    first, second = poll_of(10), poll_of(10)
    assert buf.put(first, 0)
    threading.Timer(0.03, lambda: buf.put(second, 1)).start()
    assert buf.drain(50, max_wait_s=1, linger_s=0.5) == [first, second]  # the second landed during the linger

    full = poll_of(50)
    assert buf.put(full, 0)
    t0 = time.monotonic()
    assert buf.drain(50, max_wait_s=1, linger_s=2) == [full]  # already a full batch: no linger
    assert time.monotonic() - t0 < 0.5


def test_drain_stops_lingering_once_every_polling_member_has_a_poll_in() -> None:
    buf = RecordBuffer(100)
    first, second, third = poll_of(10), poll_of(10), poll_of(10)
    assert buf.put(first, 0)
    threading.Timer(0.03, lambda: buf.put(second, 1)).start()
    t0 = time.monotonic()
    assert buf.drain(50, max_wait_s=1, linger_s=2, members=2) == [first, second]  # no third member to wait for
    assert time.monotonic() - t0 < 1

    assert buf.put(third, 0)
    t0 = time.monotonic()
    assert buf.drain(50, max_wait_s=1, linger_s=0.3, members=2) == [third]  # one of two members: the linger runs out
    assert time.monotonic() - t0 >= 0.29


def test_a_drain_waits_past_its_linger_for_a_poll_already_coming() -> None:
    buf = RecordBuffer(100)
    first, late = poll_of(10), poll_of(10)
    assert buf.put(first, 0)
    buf.coming(0)  # a member acquired records and builds their rows
    threading.Timer(0.2, lambda: buf.put(late, 1, announced=True)).start()
    assert buf.drain(50, max_wait_s=1, linger_s=0.05) == [first, late]  # not left for the next round

    assert buf.put(first, 0)
    buf.coming(0)
    t0 = time.monotonic()
    assert buf.drain(50, max_wait_s=0.3, linger_s=0.05) == [first]  # never put: bounded by max_wait_s
    assert 0.29 <= time.monotonic() - t0 < 1
    buf.not_coming(0)


def test_lanes_are_drained_on_their_own_and_a_full_lane_takes_no_other_lanes_room() -> None:
    buf = RecordBuffer(20, lanes=2)  # 10 records a lane
    slow = [Poll(poll_of(10).batch, poll_of(10).rows, lane=0), Poll(poll_of(5).batch, poll_of(5).rows, lane=0)]
    fast = Poll(poll_of(10).batch, poll_of(10).rows, lane=1)
    assert buf.put(slow[0], 0)
    assert not buf.put(slow[1], 0.05)  # lane 0 is full
    assert buf.put(fast, 0)  # lane 1 still has its room
    assert buf.records == 20
    assert buf.drain(50, max_wait_s=0, lane=1) == [fast]
    assert buf.drain(50, max_wait_s=0, lane=1) == []
    assert buf.drain(50, max_wait_s=0, lane=0) == [slow[0]]
    assert buf.take_all() == []
