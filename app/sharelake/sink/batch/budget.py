"""How many records a micro-batch may take so its write stays well inside the group's decision window.

The window is the group type's (`DecisionWindow`: a share group's record lock, a consumer group's
`max.poll.interval.ms`). A job needs one when a destination's write mode asks for it (`WriteMode.splits_batches`:
an upsert's MERGE costs a time per batch that grows with the table and the batch, where an append's stays small).
After each batch the sink reports how many records it drained and how long the batch took from its drain to its
decisions (`observe`); before the next drain it asks how many records it may take (`records`). The answer comes
from a straight line fitted to the `RECENT` batches (numpy's least squares: a fixed cost per batch plus a cost per
record), solved for half the window (`SHARE_OF_LOCK`): a batch that would take longer is split, the polls left
over staying in the buffer for the next batch. Never fewer than one poll (a poll is decided whole); never more
than `batch.max_records`.
"""

from __future__ import annotations

import logging
from collections import deque

import numpy as np

from sharelake.acknowledge.window import DecisionWindow

log = logging.getLogger(__name__)

SHARE_OF_WINDOW = 0.5  # a batch's write may take this share of the decision window
RECENT = 8  # batches the cost line is fitted to


class BatchBudget:
    def __init__(self, window: DecisionWindow, share: float = SHARE_OF_WINDOW, recent: int = RECENT):
        self.window = window
        self.target_s = window.seconds * share
        self._seen: deque[tuple[int, float]] = deque(maxlen=recent)
        self._split_at: int | None = None  # the last limit logged

    def observe(self, records: int, seconds: float) -> None:
        """A batch of `records` took `seconds` from its drain to its decisions."""
        if records > 0:
            self._seen.append((records, seconds))

    def records(self, ceiling: int) -> int:
        """The most records the next batch may drain (`ceiling`: batch.max_records)."""
        if len(self._seen) < 2:
            return ceiling
        n = np.array([r for r, _ in self._seen], dtype=np.float64)
        t = np.array([s for _, s in self._seen], dtype=np.float64)
        if np.ptp(n) > 0:
            per_record, fixed = (float(x) for x in np.polyfit(n, t, 1))
        else:
            per_record, fixed = float(t.mean() / n.mean()), 0.0
        per_record, fixed = max(per_record, 1e-9), max(fixed, 0.0)
        if fixed + per_record * ceiling <= self.target_s:
            limit = ceiling
        else:
            limit = max(1, min(ceiling, int((self.target_s - fixed) / per_record)))
        if limit != self._split_at and fixed > self.target_s:
            log.warning(
                "a batch costs %.2fs before its first record, over half the %s: each batch is one poll now; raise %s",
                fixed,
                self.window,
                self.window.setting,
            )
        elif limit != self._split_at and limit < ceiling:
            log.info(
                "batches split to at most %d records: a batch costs %.2fs + %.2fms a record, and its write must "
                "stay within %.1fs (half the %s)",
                limit,
                fixed,
                per_record * 1000,
                self.target_s,
                self.window.name,
            )
        self._split_at = limit
        return limit
