"""DedupCache: which (topic, partition, offset) the Delta table already holds, as offset ranges.

Nothing reaches it but its table's `DedupTable`, and the table's writer during an append's transaction, through
the `Claim` the append hands it. Loaded at start from the last `lookback_commits` commits' userMetadata (Delta's
history API, no data scan), then kept current every micro-batch by reading the commit files after the last
version it knows: our own commit and any other writer's (another job in the same group writing the same table).
`next_offsets` says, per partition, where the table is.

Why it reaches far enough: a record is committed but not yet ACCEPTed only between a Delta commit
and the ACCEPT that follows it, so a redelivered record that is already in the table was written
by one of the last commits before a crash or a lock expiry. `lookback_commits` (default 1000)
must cover the commits made during one decision window (a share group's record lock) plus a restart, by a wide
margin. Memory: adjacent ranges merge, so a partition written contiguously costs one range; every hole
(an offset this table never received) costs one more.

Duplicate detection: a Sharelake append that holds offsets an earlier commit already holds is a
duplicate. The checked append transaction (`sharelake.sink.delta.writer`) never makes one; blind appends could (a
table's first commit, tables written by older Sharelake versions): two writers acquired the same record, one
after the other's lock expired, and both wrote it before either saw the other's commit. The cache records such a
commit as a pending `Repair` (which of its offsets to delete) until a repair commit for it is folded in.

Partial commits (an append whose unreadable rows Spark filtered out, see `sharelake.sink.dedup.commit_log`)
are folded with the offsets they really hold: the writer knows them (`fold(commit, written)`),
any other reader asks the table once (`DeltaCommitLog.written_offsets`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from sharelake.sink.dedup.commit_log import DeltaCommitLog, SharelakeCommit
from sharelake.table.offset_ranges import BatchOffsets, OffsetRanges, Offsets, PartitionKey

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Repair:
    """Delete the rows of `commit` at `duplicates`: an earlier commit holds those offsets."""

    commit: SharelakeCommit
    duplicates: Mapping[PartitionKey, OffsetRanges]

    def count(self) -> int:
        return sum(r.count() for r in self.duplicates.values())


class DedupCache:
    def __init__(self, commit_log: DeltaCommitLog | None, lookback_commits: int = 1000):
        self._log = commit_log
        self.lookback_commits = lookback_commits
        self.version = -1  # the highest table version folded in
        self._ranges: dict[PartitionKey, OffsetRanges] = {}
        self._repairs: dict[int, Repair] = {}  # by the duplicate commit's version

    def load(self) -> None:
        if self._log is None:
            return
        self.version, commits = self._log.recent(self.lookback_commits)
        for c in commits:
            self.fold(c)
        log.info(
            "dedup cache: %d Sharelake commits up to version %d, %d ranges, %d duplicate commits to repair",
            len(commits),
            self.version,
            self.size(),
            len(self._repairs),
        )

    def refresh(self, until: int | None = None) -> list[SharelakeCommit]:
        """Fold in every commit after `version` (up to `until`); returns the Sharelake ones (oldest first)."""
        if self._log is None:
            return []
        new = []
        for v, commit in self._log.after(self.version, until):
            self.version = v
            if commit is not None:
                self.fold(commit)
                new.append(commit)
        return new

    def fold(self, commit: SharelakeCommit, written: BatchOffsets | None = None) -> None:
        """Add a commit's offsets, noting a Repair if an earlier commit already holds some of them.

        `written`: the offsets the commit really holds, when the caller knows them (its writer);
        otherwise a partial commit's are read from the table.
        """
        self.version = max(self.version, commit.version)
        if commit.repair_of is not None:
            self._repairs.pop(commit.repair_of, None)
            return
        if written is None and commit.partial and self._log is not None:
            written = self._log.written_offsets(commit)
        if written is not None:
            commit = replace(commit, ranges=written)
        dups: dict[PartitionKey, OffsetRanges] = {}
        for key, r in commit.ranges.items():
            held = self._ranges.get(key)
            both = held.intersection(r) if held is not None else None
            if both:
                dups[key] = both
        if dups:
            self._repairs[commit.version] = Repair(commit, dups)
        self.add(commit.ranges)

    def repairs(self) -> list[Repair]:
        """Duplicate commits not repaired yet, oldest first."""
        return [self._repairs[v] for v in sorted(self._repairs)]

    def repaired(self, version: int) -> None:
        self._repairs.pop(version, None)

    def add(self, ranges: Mapping[PartitionKey, OffsetRanges]) -> None:
        for key, r in ranges.items():
            self._ranges.setdefault(key, OffsetRanges()).update(r)

    def held(self, offsets: Mapping[PartitionKey, OffsetRanges]) -> BatchOffsets:
        """Which of `offsets` the table holds."""
        return BatchOffsets(offsets).intersection(self._ranges)

    def contains_many(self, key: PartitionKey, offsets: Offsets) -> npt.NDArray[np.bool_]:
        """Which of `offsets` (of one topic-partition) the table holds."""
        r = self._ranges.get(key)
        return r.contains_many(offsets) if r is not None else np.zeros(len(offsets), dtype=np.bool_)

    def next_offsets(self) -> dict[PartitionKey, int]:
        """Per partition, the offset after the highest one the table holds (of the commits loaded)."""
        return {key: last + 1 for key, r in self._ranges.items() if (last := r.last) is not None}

    def size(self) -> int:
        """Ranges held (the cache's memory)."""
        return sum(len(r) for r in self._ranges.values())
