"""Unit tests of the batch plan and its decisions: no broker, no Spark.

Polls are built as the members build them (`sharelake.bridge.arrow_rows.poll_rows` over polled
records, beside their `PollBatch`), the tables' holdings are real `DedupCache`s, and the decisions
go through `BatchPlan.decide` as the sink's one decision point sends them (`Verdict`s); what each
record became is read from its `PollBatch` and the commands its member would receive.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from sharelake.acknowledge.lifecycle import AckCommand, PollBatch
from sharelake.acknowledge.proof import Decision, IllegalTransition, RecordState
from sharelake.bridge.arrow_rows import poll_rows
from sharelake.bridge.record_buffer import Poll
from sharelake.bridge.synthetic_record import SyntheticRecord
from sharelake.formats.base import precheck
from sharelake.formats.raw import RawSettings
from sharelake.sink.batch.plan import CANDIDATE, COPY, PARKED, PRESENT, BatchPlan, Verdict, plan_batch
from sharelake.sink.dedup.cache import DedupCache
from sharelake.table.offset_ranges import OffsetRanges
from tests.proofs import proof_for_tests
from tests.test_lifecycle import state_of

MAIN = proof_for_tests("/t", 3)
DEAD = proof_for_tests("/t_dead_letter", 1)


def rec(off: int, on: str = "t", part: int = 0, deliveries: int = 1, payload: bytes | None = b"v") -> SyntheticRecord:
    """A polled record, as a member's client hands it over."""
    return SyntheticRecord(
        on, part, off, key=b"k%d" % off, value=payload, timestamp_ms=1_700_000_000_000, delivery_count=deliveries
    )


def poll(records: Sequence[SyntheticRecord], member: int = 0) -> tuple[Poll, queue.Queue[AckCommand]]:
    """One member's poll, as the member puts it in the buffer: its records' states and their rows."""
    commands: queue.Queue[AckCommand] = queue.Queue()
    polled: Any = list(records)
    return Poll(PollBatch(member, polled, commands), poll_rows(polled)), commands


def cache(**held: list[tuple[int, int]]) -> DedupCache:
    """A table's dedup cache holding `topic_partition=[(start, end), ...]` (e.g. `t_0=[(0, 4)]`)."""
    c = DedupCache(None)
    c.add({(k.rsplit("_", 1)[0], int(k.rsplit("_", 1)[1])): OffsetRanges(spans) for k, spans in held.items()})
    return c


def states(p: Poll) -> list[RecordState]:
    return [state_of(p.batch, i) for i in range(len(p.batch))]


def commands(q: queue.Queue[AckCommand]) -> list[tuple[Decision, tuple[int, ...]]]:
    out = []
    while not q.empty():
        c = q.get_nowait()
        out.append((c.decision, c.indices))
    return out


def mask(plan: BatchPlan, rows: Sequence[int]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    chosen = np.zeros(plan.rows.num_rows, dtype=np.bool_)
    chosen[list(rows)] = True
    return chosen


def test_rows_the_main_table_holds_are_present_and_the_rest_candidates() -> None:
    p, _ = poll([rec(o) for o in range(10)])
    plan = plan_batch([p], {"t": cache(t_0=[(0, 4)])}, cache())
    assert plan.kind.tolist() == [PRESENT] * 5 + [CANDIDATE] * 5
    assert plan.candidates.tolist() == [5, 6, 7, 8, 9]
    assert plan.count(PRESENT) == 5 and plan.count(PARKED) == plan.count(COPY) == 0


def test_rows_the_dead_letter_table_holds_are_parked_unless_the_main_table_holds_them_too() -> None:
    p, _ = poll([rec(o) for o in range(6)])
    plan = plan_batch([p], {"t": cache(t_0=[(0, 1)])}, cache(t_0=[(1, 3)]))
    assert plan.kind.tolist() == [PRESENT, PRESENT, PARKED, PARKED, CANDIDATE, CANDIDATE]


def test_holdings_are_per_topic_and_partition_and_each_topic_asks_its_own_table() -> None:
    p, _ = poll([rec(3, "a", 0), rec(3, "a", 1), rec(3, "b", 0), rec(4, "b", 0)])
    main_of = {"a": cache(a_0=[(0, 9)]), "b": cache(b_0=[(4, 4)], a_1=[(3, 3)])}  # b's table knows nothing of a
    plan = plan_batch([p], main_of, cache())
    assert plan.kind.tolist() == [PRESENT, CANDIDATE, CANDIDATE, PRESENT]


def test_a_second_copy_in_the_batch_is_a_copy_of_the_first_in_batch_order() -> None:
    """A record redelivered to another member after its lock expired: both polls hold it."""
    first, _ = poll([rec(0), rec(1), rec(2)], member=0)
    second, _ = poll([rec(2), rec(1), rec(3)], member=1)
    plan = plan_batch([first, second], {"t": cache()}, cache())
    assert plan.kind.tolist() == [CANDIDATE, CANDIDATE, CANDIDATE, COPY, COPY, CANDIDATE]
    assert plan.first.tolist() == [0, 1, 2, 2, 1, 5]
    assert plan.candidates.tolist() == [0, 1, 2, 5]
    # deciding a first copy decides its copies with it
    assert np.flatnonzero(plan.with_copies(np.array([1, 2]))).tolist() == [1, 2, 3, 4]


def test_copies_of_a_present_or_parked_record_take_its_kind_not_copy() -> None:
    a, _ = poll([rec(0), rec(5)], member=0)
    b, _ = poll([rec(0), rec(5)], member=1)
    plan = plan_batch([a, b], {"t": cache(t_0=[(0, 0)])}, cache(t_0=[(5, 5)]))
    assert plan.kind.tolist() == [PRESENT, PARKED, PRESENT, PARKED]


def test_decisions_reach_each_poll_once_with_the_records_index_in_that_poll() -> None:
    """The sink's verdicts: PRESENT rows ACCEPTed on the cache's proof, the written ones on the commit's,
    the bad ones REJECTed on the dead-letter commit's, the unsure ones RELEASEd; copies alike."""
    (a, qa), (b, qb) = poll([rec(0), rec(1), rec(2), rec(3)], member=0), poll([rec(3), rec(4), rec(5)], member=1)
    plan = plan_batch([a, b], {"t": cache(t_0=[(0, 0)])}, cache(t_0=[(5, 5)]))
    assert plan.kind.tolist() == [PRESENT, CANDIDATE, CANDIDATE, CANDIDATE, COPY, CANDIDATE, PARKED]
    written, bad, unsure = np.array([1, 3]), np.array([2]), np.array([5])
    verdicts = [
        Verdict(plan.of_kind(PRESENT), Decision.ACCEPT, MAIN),
        Verdict(plan.with_copies(written), Decision.ACCEPT, MAIN),
        Verdict(plan.with_copies(unsure), Decision.RELEASE),
        Verdict(plan.of_kind(PARKED), Decision.REJECT, DEAD),
        Verdict(plan.with_copies(bad), Decision.REJECT, DEAD),
    ]
    for v in verdicts:
        plan.decide(v.rows, v.decision, v.proof)

    accepted, rejected, released = RecordState.ACCEPTED, RecordState.REJECTED, RecordState.RELEASED
    assert states(a) == [accepted, accepted, rejected, accepted]
    assert states(b) == [accepted, released, rejected]  # 3 a copy of a's 3; 5 parked
    assert a.batch.all_decided and b.batch.all_decided
    # one command per poll and verdict, indices within the poll
    assert commands(qa) == [(Decision.ACCEPT, (0,)), (Decision.ACCEPT, (1, 3)), (Decision.REJECT, (2,))]
    assert commands(qb) == [(Decision.ACCEPT, (0,)), (Decision.RELEASE, (1,)), (Decision.REJECT, (2,))]


def test_accept_and_reject_need_a_proof_release_does_not_and_no_record_is_decided_twice() -> None:
    p, q = poll([rec(0), rec(1)])
    plan = plan_batch([p], {"t": cache()}, cache())
    with pytest.raises(RuntimeError, match="ACCEPT without a commit proof"):
        plan.decide(mask(plan, [0]), Decision.ACCEPT)
    with pytest.raises(RuntimeError, match="REJECT without a commit proof"):
        plan.decide(mask(plan, [0]), Decision.REJECT)
    plan.decide(mask(plan, []), Decision.ACCEPT)  # nothing chosen: nothing sent, no proof needed
    assert commands(q) == [] and p.batch.undecided == 2

    plan.decide(mask(plan, [0]), Decision.RELEASE)
    with pytest.raises(IllegalTransition, match="INVARIANT 3"):
        plan.decide(mask(plan, [0]), Decision.ACCEPT, MAIN)
    assert commands(q) == [(Decision.RELEASE, (0,))] and states(p)[1] is RecordState.ACQUIRED


def test_a_failed_attempt_releases_only_what_no_verdict_reached() -> None:
    p, q = poll([rec(0), rec(1), rec(2)])
    plan = plan_batch([p], {"t": cache(t_0=[(0, 0)])}, cache())
    plan.decide(plan.of_kind(PRESENT), Decision.ACCEPT, MAIN)  # decided before the write failed
    assert p.batch.release_undecided() == 2  # the sink's failure path
    assert states(p) == [RecordState.ACCEPTED, RecordState.RELEASED, RecordState.RELEASED]
    assert commands(q) == [(Decision.ACCEPT, (0,)), (Decision.RELEASE, (1, 2))]


def test_the_shared_checks_flag_bad_candidates_and_the_delivery_cap_by_their_row_among_the_candidates() -> None:
    """Bad rows: the checks every format shares run on the candidates' rows (`precheck`); a record
    at `dead_letter.max_delivery_count` deliveries is dead-lettered, not written again."""
    p, q = poll([rec(0), rec(1, deliveries=4), rec(2, payload=None), rec(3, deliveries=3), rec(4, deliveries=5)])
    plan = plan_batch([p], {"t": cache(t_0=[(4, 4)])}, cache())  # 4 is present: it is never checked
    candidates = plan.candidates
    assert candidates.tolist() == [0, 1, 2, 3]
    found = precheck(plan.rows.take(candidates), RawSettings(), max_delivery_count=4)
    assert [(b.index, b.error_class) for b in found] == [(1, "delivery_count_exceeded"), (2, "null_value")]

    bad = candidates[[b.index for b in found]]  # rows of the batch, as the table writer returns them
    written = np.setdiff1d(candidates, bad)
    plan.decide(plan.of_kind(PRESENT), Decision.ACCEPT, MAIN)
    plan.decide(plan.with_copies(written), Decision.ACCEPT, MAIN)
    plan.decide(plan.with_copies(bad), Decision.REJECT, DEAD)
    accepted, rejected = RecordState.ACCEPTED, RecordState.REJECTED
    assert states(p) == [accepted, rejected, rejected, accepted, accepted]
    assert commands(q) == [(Decision.ACCEPT, (4,)), (Decision.ACCEPT, (0, 3)), (Decision.REJECT, (1, 2))]


def test_a_plan_needs_a_poll() -> None:
    with pytest.raises(AssertionError):
        plan_batch([], {}, cache())
