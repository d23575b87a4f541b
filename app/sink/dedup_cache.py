"""DedupCache: which (topic, partition, offset) the Delta table already holds, as offset ranges.

Owned by the Delta sink. Loaded at start from the last `lookback_commits` commits' userMetadata
(Delta's history API, no data scan), then kept current every micro-batch by reading the commit
files after the last version it knows: our own commit and any other writer's (another job in the
same share group writing the same table).

Why it reaches far enough: a record is committed but not yet ACCEPTed only between a Delta commit
and the ACCEPT that follows it, so a redelivered record that is already in the table was written
by one of the last commits before a crash or a lock expiry. `lookback_commits` (default 1000)
must cover the commits made during one record-lock duration plus a restart, by a wide margin.
Memory: adjacent ranges merge, so a partition written contiguously costs one range; every hole
(an offset this table never received) costs one more.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from app.sink.commit_log import DeltaCommitLog, PartitionKey, SharelakeCommit
from app.sink.offset_ranges import OffsetRanges

log = logging.getLogger(__name__)


class DedupCache:
    def __init__(self, commit_log: DeltaCommitLog | None, lookback_commits: int = 1000):
        self._log = commit_log
        self.lookback_commits = lookback_commits
        self.version = -1  # the highest table version folded in
        self._ranges: dict[PartitionKey, OffsetRanges] = {}

    def load(self) -> None:
        if self._log is None:
            return
        self.version, commits = self._log.recent(self.lookback_commits)
        for c in commits:
            self.add(c.ranges)
        log.info(
            "dedup cache: %d Sharelake commits up to version %d, %d ranges", len(commits), self.version, self.size()
        )

    def refresh(self) -> list[SharelakeCommit]:
        """Fold in every commit after `version`; returns the Sharelake ones (oldest first)."""
        if self._log is None:
            return []
        new = []
        for v, commit in self._log.after(self.version):
            self.version = v
            if commit is not None:
                self.add(commit.ranges)
                new.append(commit)
        return new

    def add(self, ranges: dict[PartitionKey, OffsetRanges]) -> None:
        for key, r in ranges.items():
            self._ranges.setdefault(key, OffsetRanges()).update(r)

    def contains(self, topic: str, partition: int, offset: int) -> bool:
        r = self._ranges.get((topic, partition))
        return r is not None and offset in r

    def size(self) -> int:
        """Ranges held (the cache's memory)."""
        return sum(len(r) for r in self._ranges.values())

    def overlap(self, ranges: dict[PartitionKey, OffsetRanges], others: Iterable[SharelakeCommit]) -> int:
        """How many offsets of `ranges` the commits `others` also hold (concurrent duplicates)."""
        count = 0
        for other in others:
            for key, theirs in other.ranges.items():
                mine = ranges.get(key)
                if mine is None:
                    continue
                for s, e in theirs:
                    count += sum(max(0, min(e, me) - max(s, ms) + 1) for ms, me in mine)
        return count
