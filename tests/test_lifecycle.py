"""Unit tests of the record state machine that enforces the three invariants.

These use stand-in records (the state machine needs only topic/partition/offset); everything
that crosses Kafka or Delta is tested end to end elsewhere.
"""

from __future__ import annotations

import queue
from typing import Any

import pytest

from sharelake.acknowledge.lifecycle import AckCommand, PollBatch
from sharelake.acknowledge.proof import BrokerCustody, CommitProof, Decision, IllegalTransition, RecordState
from sharelake.bridge.synthetic_record import SyntheticRecord
from tests.proofs import proof_for_tests


def make_batch(n: int) -> tuple[PollBatch, queue.Queue[AckCommand]]:
    q: queue.Queue[AckCommand] = queue.Queue()
    records: Any = [SyntheticRecord("t", 0, i) for i in range(n)]
    return PollBatch(member_id=0, records=records, commands=q), q


PROOF = proof_for_tests("/t", 3)
DEAD_PROOF = proof_for_tests("/t_dead_letter", 0)


def state_of(batch: PollBatch, index: int) -> RecordState:
    """A record's state (read from the batch's state array: only tests need one record's)."""
    return RecordState(int(batch._states[index]))


def drain(q: queue.Queue[AckCommand]) -> list[AckCommand]:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


def test_every_record_starts_acquired_and_is_decided_once() -> None:
    b, q = make_batch(4)
    assert [state_of(b, i) for i in range(4)] == [RecordState.ACQUIRED] * 4
    b.accept(PROOF, [0, 1])
    b.reject(DEAD_PROOF, [2])
    b.release([3])
    assert b.all_decided
    assert [state_of(b, i) for i in range(4)] == [
        RecordState.ACCEPTED,
        RecordState.ACCEPTED,
        RecordState.REJECTED,
        RecordState.RELEASED,
    ]
    cmds = drain(q)
    assert [(c.decision, c.indices) for c in cmds] == [
        (Decision.ACCEPT, (0, 1)),
        (Decision.REJECT, (2,)),
        (Decision.RELEASE, (3,)),
    ]


def test_invariant1_only_the_delta_writer_mints_a_proof() -> None:
    with pytest.raises(TypeError, match="minted by the Delta writer"):
        CommitProof("/t", 3)
    with pytest.raises(AttributeError):
        PROOF.version = 4  # type: ignore[misc]


def test_invariant1_accept_requires_a_commit_proof() -> None:
    b, q = make_batch(2)
    with pytest.raises(IllegalTransition, match="CommitProof"):
        b.accept(None)  # type: ignore[arg-type]
    assert b.undecided == 2 and q.empty()
    b.accept(PROOF)
    assert b.all_decided and [c.decision for c in drain(q)] == [Decision.ACCEPT]


def test_invariant1_reject_needs_the_dead_letter_commit() -> None:
    b, q = make_batch(1)
    with pytest.raises(IllegalTransition, match="dead-letter commit"):
        b.reject(None, [0])  # type: ignore[arg-type]
    assert state_of(b, 0) is RecordState.ACQUIRED and drain(q) == []


def test_invariant1_the_brokers_custody_backs_a_reject_never_an_accept() -> None:
    """`dead_letter.sink = "broker_topic"` REJECTs on the broker's custody of its dead-letter topic; that
    is no proof of a main-table commit, so an ACCEPT on it is refused."""
    custody = BrokerCustody._mint("dlq.events")
    with pytest.raises(TypeError, match="minted by the broker-topic dead-letter sink"):
        BrokerCustody("dlq.events")
    b, q = make_batch(2)
    with pytest.raises(IllegalTransition, match="CommitProof"):
        b.accept(custody, [0])
    assert state_of(b, 0) is RecordState.ACQUIRED and q.empty()
    b.reject(custody, [1])
    assert state_of(b, 1) is RecordState.REJECTED and [c.decision for c in drain(q)] == [Decision.REJECT]


def test_invariant3_no_second_decision() -> None:
    b, q = make_batch(3)
    b.accept(PROOF, [1])
    for second in (lambda: b.accept(PROOF, [1]), lambda: b.release([1]), lambda: b.reject(DEAD_PROOF, [0, 1])):
        with pytest.raises(IllegalTransition, match="already ACCEPTED"):
            second()
    # the failed decisions changed nothing and sent nothing
    assert [c.indices for c in drain(q)] == [(1,)]
    assert b.undecided == 2


def test_a_decision_naming_a_record_twice_is_refused() -> None:
    b, q = make_batch(2)
    with pytest.raises(IllegalTransition, match="twice"):
        b.release([0, 0])
    assert b.undecided == 2 and q.empty()


def test_invariant2_release_undecided_finishes_the_poll() -> None:
    b, q = make_batch(5)
    b.accept(PROOF, [0, 4])
    assert b.release_undecided() == 3
    assert b.all_decided
    assert b.release_undecided() == 0  # idempotent: nothing left to touch
    cmds = drain(q)
    assert [(c.decision, c.indices) for c in cmds] == [(Decision.ACCEPT, (0, 4)), (Decision.RELEASE, (1, 2, 3))]
