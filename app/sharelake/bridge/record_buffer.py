"""The bounded RecordBuffer between the group members (producers) and foreachBatch (consumer).

Members `put()` whole polls (`Poll`: the poll's `PollBatch`, whose records the sink decides, and the Arrow rows
the member built from them right after its poll); a micro-batch `drain()`s whole polls. Whole polls move together
because a poll is the unit a member must finish deciding before it may poll again. The buffer has a lane per
group of tables the sink lands on their own (`Poll.lane`: the lane of the member that polled it); a drain takes
one lane's polls. The bound is on records, an equal share of it per lane, so the driver's memory follows the
config, not the backlog, and a slow lane's polls never take a fast lane's room: a member whose put would
overflow its lane waits (backpressure), except that an empty lane always takes one poll so a poll larger than
the bound cannot deadlock. A drain that found a poll may linger for others (`linger_s`: fewer, larger
commits), and for polls its members announced (`coming`: acquired, their rows being built), until the lane
holds as many polls as its members polling (a member has at most one poll in flight, so no more can come);
`take_all` empties the buffer at shutdown.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import pyarrow as pa

from sharelake.acknowledge.lifecycle import PollBatch


@dataclass(frozen=True)
class Poll:
    """One member's poll on its way to the sink: its records' states and their Arrow rows."""

    batch: PollBatch
    rows: pa.Table  # sharelake.bridge.arrow_rows.RECORD_SCHEMA, in poll order
    lane: int = 0  # the lane of the member that polled it (its tables are landed on their own)

    def __len__(self) -> int:
        return len(self.batch)


class RecordBuffer:
    def __init__(self, max_records: int, lanes: int = 1):
        self.max_records = max_records
        self._lane_bound = max(1, max_records // lanes)
        self._polls: list[deque[Poll]] = [deque() for _ in range(lanes)]
        self._lane_records = [0] * lanes
        self._coming = [0] * lanes  # polls whose records are acquired, their rows still being built
        self._cond = threading.Condition()

    @property
    def records(self) -> int:
        with self._cond:
            return sum(self._lane_records)

    def coming(self, lane: int) -> None:
        """A member of `lane` acquired records and builds their rows: a lingering drain waits for its poll
        (records left for the next round would wait a whole round, holding their locks). Its `put(...,
        announced=True)` or `not_coming` ends it."""
        with self._cond:
            self._coming[lane] += 1

    def not_coming(self, lane: int) -> None:
        """The announced poll will not be put (its member failed or gave it up)."""
        with self._cond:
            self._coming[lane] -= 1
            self._cond.notify_all()

    def put(self, batch: Poll, timeout_s: float, announced: bool = False) -> bool:
        """Add one poll to its lane; wait up to `timeout_s` for room. False if there was no room in time.
        `announced`: its member said it was `coming`."""
        deadline = time.monotonic() + timeout_s
        polls = self._polls[batch.lane]
        with self._cond:
            while polls and self._lane_records[batch.lane] + len(batch) > self._lane_bound:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            polls.append(batch)
            self._lane_records[batch.lane] += len(batch)
            self._coming[batch.lane] -= announced
            self._cond.notify_all()
            return True

    def drain(
        self, max_records: int, max_wait_s: float, linger_s: float = 0.0, members: int | None = None, lane: int = 0
    ) -> list[Poll]:
        """Take whole polls of `lane` up to `max_records` (at least one poll if any arrives within `max_wait_s`).

        Once there is a poll, wait up to `linger_s` more for others (members polling at the same time
        land within tens of milliseconds of each other): fewer, larger commits; and past it, up to
        `max_wait_s`, for polls already `coming` (acquired, their rows being built). The wait ends early
        once the polls reach `max_records`, or once there are `members` polls (the lane's members
        polling, when known: each has at most one poll in flight, so every poll that could come is here).
        """
        deadline = time.monotonic() + max_wait_s
        polls = self._polls[lane]
        with self._cond:
            while not polls:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(left)
            first_at = time.monotonic()
            lingered, latest = first_at + linger_s, first_at + max(linger_s, max_wait_s)
            while (
                self._lane_records[lane] < max_records
                and (members is None or len(polls) < members)
                and (left := (latest if self._coming[lane] > 0 else lingered) - time.monotonic()) > 0
            ):
                self._cond.wait(left)
            taken: list[Poll] = []
            count = 0
            while polls and (not taken or count + len(polls[0]) <= max_records):
                b = polls.popleft()
                taken.append(b)
                count += len(b)
            self._lane_records[lane] -= count
            self._cond.notify_all()
            return taken

    def take_all(self) -> list[Poll]:
        """Empty the buffer, every lane (shutdown: the members release what was never written)."""
        with self._cond:
            taken = [p for polls in self._polls for p in polls]
            for polls in self._polls:
                polls.clear()
            self._lane_records = [0] * len(self._polls)
            self._cond.notify_all()
            return taken
