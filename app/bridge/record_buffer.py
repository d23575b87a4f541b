"""The bounded RecordBuffer between the group members (producers) and foreachBatch (consumer).

Members `put()` whole polls (`Poll`: the poll's `PollBatch`, whose records the sink decides, and the Arrow rows
the member built from them right after its poll); a micro-batch `drain()`s whole polls. Whole polls move together
because a poll is the unit a member must finish deciding before it may poll again. The bound is on records, so
the driver's memory follows the config, not the backlog: a member whose put would overflow the buffer waits
(backpressure), except that an empty buffer always takes one poll so a poll larger than the bound cannot
deadlock. A drain that found a poll may linger for others (`linger_s`: fewer, larger commits); `take_all` empties
the buffer at shutdown.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import pyarrow as pa

from app.acknowledge.lifecycle import PollBatch


@dataclass(frozen=True)
class Poll:
    """One member's poll on its way to the sink: its records' states and their Arrow rows."""

    batch: PollBatch
    rows: pa.Table  # app.bridge.arrow_rows.RECORD_SCHEMA, in poll order

    def __len__(self) -> int:
        return len(self.batch)


class RecordBuffer:
    def __init__(self, max_records: int):
        self.max_records = max_records
        self._polls: deque[Poll] = deque()
        self._records = 0
        self._cond = threading.Condition()

    @property
    def records(self) -> int:
        with self._cond:
            return self._records

    def put(self, batch: Poll, timeout_s: float) -> bool:
        """Add one poll; wait up to `timeout_s` for room. False if there was no room in time."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._polls and self._records + len(batch) > self.max_records:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            self._polls.append(batch)
            self._records += len(batch)
            self._cond.notify_all()
            return True

    def drain(self, max_records: int, max_wait_s: float, linger_s: float = 0.0) -> list[Poll]:
        """Take whole polls up to `max_records` (at least one poll if any arrives within `max_wait_s`).

        Once there is a poll, wait up to `linger_s` more for others (members polling at the same time
        land within tens of milliseconds of each other): fewer, larger commits.
        """
        deadline = time.monotonic() + max_wait_s
        with self._cond:
            while not self._polls:
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(left)
            lingered = time.monotonic() + linger_s
            while self._records < max_records and (left := lingered - time.monotonic()) > 0:
                self._cond.wait(left)
            taken: list[Poll] = []
            count = 0
            while self._polls and (not taken or count + len(self._polls[0]) <= max_records):
                b = self._polls.popleft()
                taken.append(b)
                count += len(b)
            self._records -= count
            self._cond.notify_all()
            return taken

    def take_all(self) -> list[Poll]:
        """Empty the buffer (shutdown: the members release what was never written)."""
        with self._cond:
            taken = list(self._polls)
            self._polls.clear()
            self._records = 0
            self._cond.notify_all()
            return taken
