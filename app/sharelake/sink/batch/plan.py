"""How one micro-batch decides each drained record, computed over the batch's Arrow rows at once.

`plan_batch` sorts every row of the drained polls (concatenated in poll order) into one of:

- PRESENT: its topic's main table already holds its offset (a redelivery after a crash or an expired
  lock): ACCEPTed with the cache's proof, not written;
- PARKED: the dead-letter table holds it: REJECTed again, not written;
- COPY: a second copy of a record inside this batch (redelivered to another member after its
  lock expired): decided like its first copy;
- CANDIDATE: to be written.

Membership and copies are numpy operations per topic-partition (partitions are few, records
many); no per-record Python loop. What becomes of the rows is said as `Verdict`s (a mask over the
batch's rows, a decision, the proof), and `BatchPlan.decide` carries each out as one command per poll: the plan
alone knows which poll and index each row came from. ACCEPT and REJECT need the proof of the commit that holds
the rows (INVARIANT 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from sharelake.acknowledge.lifecycle import PollBatch
from sharelake.acknowledge.proof import Decision, Proof
from sharelake.bridge.record_buffer import Poll
from sharelake.table.offset_ranges import PartitionKey, partition_groups

PRESENT, PARKED, COPY, CANDIDATE = 0, 1, 2, 3
Indices = npt.NDArray[np.intp]


class Holder(Protocol):
    """A table's record of what it holds (`DedupTable`, or its `DedupCache`)."""

    def contains_many(self, key: PartitionKey, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]: ...


class _HoldsNothing:
    """A holder of no record: for a batch whose records no table can hold yet."""

    def contains_many(self, key: PartitionKey, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        return np.zeros(len(offsets), dtype=np.bool_)


NOTHING_PARKED: Holder = _HoldsNothing()


@dataclass(frozen=True)
class Verdict:
    """The decision for some rows of a batch (a mask over its rows), with the proof ACCEPT and REJECT need."""

    rows: npt.NDArray[np.bool_]
    decision: Decision
    proof: Proof | None = None


@dataclass
class BatchPlan:
    batches: Sequence[PollBatch]  # the polls' records, whose states `decide` changes
    rows: pa.Table  # the polls' rows, concatenated in poll order (sharelake.bridge.arrow_rows.RECORD_SCHEMA)
    kind: npt.NDArray[np.int8]  # per row: PRESENT, PARKED, COPY or CANDIDATE
    first: Indices  # per row: the row whose decision it takes (itself, or a COPY's first copy)
    _poll_of: Indices  # per row: which poll it came from
    _index_in_poll: Indices  # per row: its index in that poll

    def decide(self, chosen: npt.NDArray[np.bool_], decision: Decision, proof: Proof | None = None) -> None:
        """Decide the `chosen` rows (a mask over the batch's rows): one command per poll.

        ACCEPT and REJECT need the proof of the commit that holds the rows (INVARIANT 1); each poll's
        chosen rows become one `PollBatch.accept` / `reject` / `release`, which queues one
        `AckCommand` for the member that owns the poll.
        """
        rows = np.flatnonzero(chosen)
        if not rows.size:
            return
        if decision is not Decision.RELEASE and proof is None:
            raise RuntimeError(f"{decision.name} without a commit proof")
        for chunk in np.split(rows, np.flatnonzero(np.diff(self._poll_of[rows])) + 1):  # rows are in poll order
            batch = self.batches[int(self._poll_of[chunk[0]])]
            indices = self._index_in_poll[chunk]
            if decision is Decision.RELEASE:
                batch.release(indices)
            elif decision is Decision.ACCEPT:
                assert proof is not None
                batch.accept(proof, indices)
            else:
                assert proof is not None
                batch.reject(proof, indices)

    @property
    def candidates(self) -> Indices:
        return np.flatnonzero(self.kind == CANDIDATE)

    def count(self, kind: int) -> int:
        return int(np.count_nonzero(self.kind == kind))

    def of_kind(self, kind: int) -> npt.NDArray[np.bool_]:
        return np.equal(self.kind, kind)

    def with_copies(self, rows: Indices) -> npt.NDArray[np.bool_]:
        """`rows` (candidates) and every in-batch copy of them, as a mask over the batch's rows."""
        chosen = np.zeros(len(self.kind), dtype=np.bool_)
        chosen[rows] = True
        copies = np.flatnonzero(self.kind == COPY)
        chosen[copies[chosen[self.first[copies]]]] = True
        return chosen


def plan_batch(polls: Sequence[Poll], main_of: Mapping[str, Holder], dead: Holder) -> BatchPlan:
    """Sort every row of `polls`: `main_of` names each topic's main table (the routed destinations)."""
    rows = pa.concat_tables([p.rows for p in polls]) if polls else None
    assert rows is not None, "a plan needs at least one poll"
    n = rows.num_rows
    sizes = np.fromiter((len(p) for p in polls), dtype=np.intp, count=len(polls))
    poll_of = np.repeat(np.arange(len(polls), dtype=np.intp), sizes)
    index_in_poll = np.arange(n, dtype=np.intp) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    kind = np.full(n, CANDIDATE, dtype=np.int8)
    first = np.arange(n, dtype=np.intp)
    for key, (at, offsets) in partition_groups(rows):
        present = main_of[key[0]].contains_many(key, offsets)
        parked = dead.contains_many(key, offsets) & ~present
        kind[at[present]] = PRESENT
        kind[at[parked]] = PARKED
        rest = ~(present | parked)
        if not rest.any():
            continue
        rest_at, rest_offsets = at[rest], offsets[rest]
        # a copy takes the decision of the first row (in batch order) with the same offset
        _, first_of, inverse = np.unique(rest_offsets, return_index=True, return_inverse=True)
        leader = rest_at[first_of][inverse]
        copies = leader != rest_at
        kind[rest_at[copies]] = COPY
        first[rest_at[copies]] = leader[copies]
    return BatchPlan([p.batch for p in polls], rows, kind, first, poll_of, index_in_poll)
