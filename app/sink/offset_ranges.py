"""Compact sets of Kafka offsets per topic-partition, as sorted disjoint inclusive ranges.

Used by the Delta sink to record which offsets a commit holds (in the commit's `userMetadata`)
and by the dedup cache to answer "is this record already in the table?". Written by hand rather
than with a generic interval library: offsets are integers, adjacent ranges must merge
([1,3] + [4,6] = [1,6]), and membership is one bisect.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator


class OffsetRanges:
    """Disjoint, non-adjacent, sorted inclusive ranges of offsets."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()):
        self._starts: list[int] = []
        self._ends: list[int] = []
        for s, e in ranges:
            self.add_range(s, e)

    @classmethod
    def of(cls, offsets: Iterable[int]) -> OffsetRanges:
        out = cls()
        ordered = sorted(set(offsets))
        if not ordered:
            return out
        start = prev = ordered[0]
        for o in ordered[1:]:
            if o != prev + 1:
                out._starts.append(start)
                out._ends.append(prev)
                start = o
            prev = o
        out._starts.append(start)
        out._ends.append(prev)
        return out

    def add_range(self, start: int, end: int) -> None:
        if end < start:
            raise ValueError(f"range [{start}, {end}] ends before it starts")
        # first range that could touch [start, end]: its end >= start - 1
        i = bisect.bisect_left(self._ends, start - 1)
        j = i
        while j < len(self._starts) and self._starts[j] <= end + 1:
            start = min(start, self._starts[j])
            end = max(end, self._ends[j])
            j += 1
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]

    def add(self, offset: int) -> None:
        self.add_range(offset, offset)

    def update(self, other: OffsetRanges) -> None:
        for s, e in other:
            self.add_range(s, e)

    def intersection(self, other: OffsetRanges) -> OffsetRanges:
        """The offsets in both sets (a linear merge of the two sorted range lists)."""
        out = OffsetRanges()
        mine, theirs = list(self), list(other)
        i = j = 0
        while i < len(mine) and j < len(theirs):
            start, end = max(mine[i][0], theirs[j][0]), min(mine[i][1], theirs[j][1])
            if start <= end:
                out._starts.append(start)
                out._ends.append(end)
            if mine[i][1] < theirs[j][1]:
                i += 1
            else:
                j += 1
        return out

    def __contains__(self, offset: object) -> bool:
        if not isinstance(offset, int):
            return False
        i = bisect.bisect_right(self._starts, offset) - 1
        return i >= 0 and self._ends[i] >= offset

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(zip(self._starts, self._ends, strict=True))

    def __len__(self) -> int:
        """Number of ranges (the memory the set costs), not of offsets."""
        return len(self._starts)

    def count(self) -> int:
        """Number of offsets covered."""
        return sum(e - s + 1 for s, e in self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetRanges) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"OffsetRanges({list(self)})"

    def to_json(self) -> list[list[int]]:
        return [[s, e] for s, e in self]
