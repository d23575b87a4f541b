"""Kafka offsets as values: `OffsetRanges` (one partition) and `BatchOffsets` (topic-partition -> ranges).

`BatchOffsets` is what a batch or a Delta commit holds. The sink builds it once per batch from the
batch's Arrow columns (`BatchOffsets.of_rows`, no per-record Python loop), the commit metadata is
its JSON (`to_json` / `from_json`, `sharelake.sink.dedup.commit_log`), and the dedup cache and the repair work
on it. `OffsetRanges` is written by hand rather than taken from a generic interval library:
offsets are integers, adjacent ranges must merge ([1,3] + [4,6] = [1,6]), and membership of a
whole batch is one numpy `searchsorted`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as _pc

pc: Any = _pc  # pyarrow.compute's kernels are generated at import: untyped

PartitionKey = tuple[str, int]
Offsets = npt.NDArray[np.int64]


class OffsetRanges:
    """Disjoint, non-adjacent, sorted inclusive ranges of offsets."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()):
        self._starts: list[int] = []
        self._ends: list[int] = []
        for s, e in ranges:
            self.add_range(s, e)

    @classmethod
    def of_array(cls, offsets: npt.ArrayLike) -> OffsetRanges:
        """The ranges of any offsets (unsorted, repeated): vectorised."""
        ordered = np.unique(np.asarray(offsets, dtype=np.int64))
        out = cls()
        if ordered.size:
            breaks = np.flatnonzero(np.diff(ordered) != 1)
            out._starts = ordered[np.concatenate(([0], breaks + 1))].tolist()
            out._ends = ordered[np.concatenate((breaks, [ordered.size - 1]))].tolist()
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

    @property
    def last(self) -> int | None:
        """The highest offset held; None when empty."""
        return self._ends[-1] if self._ends else None

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

    def difference(self, other: OffsetRanges) -> OffsetRanges:
        """The offsets of this set that `other` does not hold."""
        out = OffsetRanges()
        for s, e in self:
            start = s
            for os_, oe in other.intersection(OffsetRanges([(s, e)])):
                if os_ > start:
                    out._starts.append(start)
                    out._ends.append(os_ - 1)
                start = oe + 1
            if start <= e:
                out._starts.append(start)
                out._ends.append(e)
        return out

    def contains_many(self, offsets: Offsets) -> npt.NDArray[np.bool_]:
        """Membership of each offset, as a boolean array (one searchsorted for the whole array)."""
        if not self._starts:
            return np.zeros(len(offsets), dtype=np.bool_)
        starts = np.asarray(self._starts, dtype=np.int64)
        ends = np.asarray(self._ends, dtype=np.int64)
        i = np.searchsorted(starts, offsets, side="right") - 1
        inside = i >= 0
        out = np.zeros(len(offsets), dtype=np.bool_)
        out[inside] = ends[i[inside]] >= offsets[inside]
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

    def __bool__(self) -> bool:
        return bool(self._starts)

    def count(self) -> int:
        """Number of offsets covered."""
        return sum(e - s + 1 for s, e in self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetRanges) and list(self) == list(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"OffsetRanges({list(self)})"

    def to_json(self) -> list[list[int]]:
        return [[s, e] for s, e in self]


class BatchOffsets(Mapping[PartitionKey, OffsetRanges]):
    """The offsets one batch or one commit holds: (topic, partition) -> OffsetRanges. A value: never changed."""

    __slots__ = ("_by_partition",)

    def __init__(self, by_partition: Mapping[PartitionKey, OffsetRanges] | None = None):
        self._by_partition: dict[PartitionKey, OffsetRanges] = {k: r for k, r in (by_partition or {}).items() if r}

    @classmethod
    def of_rows(cls, rows: pa.Table) -> BatchOffsets:
        """The offsets of a table with `topic`, `partition` and `offset` columns (Sharelake's row layout)."""
        out: dict[PartitionKey, OffsetRanges] = {}
        for key, (_, offsets) in partition_groups(rows):
            out[key] = OffsetRanges.of_array(offsets)
        return cls(out)

    @classmethod
    def from_json(cls, doc: Mapping[str, Mapping[str, Iterable[Iterable[int]]]]) -> BatchOffsets:
        """From commit metadata: {topic: {partition: [[first, last], ...]}}."""
        return cls(
            {
                (topic, int(partition)): OffsetRanges((int(s), int(e)) for s, e in spans)
                for topic, partitions in doc.items()
                for partition, spans in partitions.items()
            }
        )

    def to_json(self) -> dict[str, dict[str, list[list[int]]]]:
        by_topic: dict[str, dict[str, list[list[int]]]] = {}
        for (topic, partition), r in sorted(self._by_partition.items()):
            by_topic.setdefault(topic, {})[str(partition)] = r.to_json()
        return by_topic

    def count(self) -> int:
        """Offsets held, over all partitions."""
        return sum(r.count() for r in self._by_partition.values())

    def intersection(self, other: Mapping[PartitionKey, OffsetRanges]) -> BatchOffsets:
        return BatchOffsets({k: r.intersection(other[k]) for k, r in self._by_partition.items() if k in other})

    def difference(self, other: Mapping[PartitionKey, OffsetRanges]) -> BatchOffsets:
        return BatchOffsets({k: r.difference(other[k]) if k in other else r for k, r in self._by_partition.items()})

    def __getitem__(self, key: PartitionKey) -> OffsetRanges:
        return self._by_partition[key]

    def __iter__(self) -> Iterator[PartitionKey]:
        return iter(self._by_partition)

    def __len__(self) -> int:
        return len(self._by_partition)

    def __repr__(self) -> str:
        return f"BatchOffsets({self._by_partition!r})"


def partition_groups(rows: pa.Table) -> Iterator[tuple[PartitionKey, tuple[npt.NDArray[np.intp], Offsets]]]:
    """For each (topic, partition) among `rows`: the row indices of that partition and their offsets.

    One pass of Arrow/numpy per group (partitions are few; records are many).
    """
    if rows.num_rows == 0:
        return
    topics = pc.dictionary_encode(rows.column("topic")).combine_chunks()
    codes = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    names = topics.dictionary.to_pylist()
    partitions = rows.column("partition").to_numpy().astype(np.int64)
    offsets = rows.column("offset").to_numpy().astype(np.int64)
    group = codes * (int(partitions.max()) + 1) + partitions
    order = np.argsort(group, kind="stable")
    bounds = np.flatnonzero(np.diff(group[order])) + 1
    for chunk in np.split(order, bounds):
        first = int(chunk[0])
        yield (str(names[codes[first]]), int(partitions[first])), (chunk, offsets[chunk])
