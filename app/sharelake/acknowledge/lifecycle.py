"""The record lifecycle: every polled record is ACQUIRED and then decided exactly once.

States: ACQUIRED -> ACCEPTED | RELEASED | REJECTED. Any other transition raises
`IllegalTransition`, so the three invariants are enforced here rather than promised in comments:

- INVARIANT 1: `accept()` takes a `CommitProof`, which only the table's Delta writer mints, once
  the commit holding the records is durable (or for records an earlier commit holds); `reject()`
  takes the proof of the dead-letter table's commit in the same way, or the `BrokerCustody` of the
  broker's dead-letter topic the job's dead letters go to instead.
- INVARIANT 2: a member cannot poll again until every record of its poll is decided and
  acknowledged: the member counts the acknowledgements it applied in its own thread (it does not
  ask `PollBatch.all_decided`, which is the deciders' view) and commits and polls again only when
  they cover the whole poll; on shutdown the member RELEASEs whatever is still undecided.
- INVARIANT 3: a decided record cannot be decided again, and only newly decided records are sent
  to the member as acknowledge commands, so nothing touches a record after its decision.

Created by a group member for each poll (`sharelake.consume.member`), decided by the Delta sink
(`sharelake.sink.batch.delta_sink`, through its batch plan) or by the member itself on shutdown; the decisions
travel to the member thread as `AckCommand`s on its queue. The decision types and the proof live in
`sharelake.acknowledge.proof`; the poll's Arrow rows travel beside it (`sharelake.bridge.record_buffer.Poll`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from confluent_kafka import Message

from sharelake.acknowledge.proof import BrokerCustody, CommitProof, Decision, IllegalTransition, Proof, RecordState


@dataclass(frozen=True)
class AckCommand:
    """Acknowledge `indices` of `batch` with `decision`: sent from a decider to the owning member."""

    batch: PollBatch
    indices: tuple[int, ...]
    decision: Decision


class PollBatch:
    """The records of one poll of one member's group client (a share consumer's or a classic
    consumer's, `sharelake.consume.group_type`), with each record's state.

    Thread-safe: the sink decides from the foreachBatch thread while the member thread reads.
    """

    def __init__(self, member_id: int, records: Sequence[Message], commands: queue.Queue[AckCommand]):
        self.member_id = member_id
        self.records = records
        self._states = np.full(len(records), RecordState.ACQUIRED.value, dtype=np.int8)
        self._undecided = len(records)
        self._commands = commands
        self._lock = threading.Lock()
        self.acquired_at = time.monotonic()  # the record locks started about now
        self.acks_committed = threading.Event()  # set by the member once its client's commit returned

    def __len__(self) -> int:
        return len(self.records)

    @property
    def undecided(self) -> int:
        with self._lock:
            return self._undecided

    @property
    def all_decided(self) -> bool:
        return self.undecided == 0

    def accept(self, proof: Proof, indices: Iterable[int] | npt.NDArray[np.intp] | None = None) -> None:
        """ACCEPT records held by the Delta commit `proof` (INVARIANT 1)."""
        if not isinstance(proof, CommitProof):
            raise IllegalTransition("ACCEPT needs the CommitProof of the Delta commit that holds the records")
        self._decide(Decision.ACCEPT, indices, proof)

    def release(self, indices: Iterable[int] | npt.NDArray[np.intp] | None = None) -> None:
        """RELEASE records for redelivery (a transient failure, or shutdown)."""
        self._decide(Decision.RELEASE, indices, None)

    def reject(self, proof: Proof, indices: Iterable[int] | npt.NDArray[np.intp] | None = None) -> None:
        """REJECT records for good: `proof` is the dead-letter table's commit that holds them, or the
        broker's custody of its dead-letter topic (INVARIANT 1)."""
        if not isinstance(proof, CommitProof | BrokerCustody):
            raise IllegalTransition(
                "REJECT needs the CommitProof of the dead-letter commit that holds the records, or the "
                "broker's custody of its dead-letter topic"
            )
        self._decide(Decision.REJECT, indices, proof)

    def release_undecided(self) -> int:
        """RELEASE every record still ACQUIRED; returns how many (used on shutdown, INVARIANT 2)."""
        with self._lock:
            pending = np.flatnonzero(self._states == RecordState.ACQUIRED.value)
            self._apply(Decision.RELEASE, pending)
        return len(pending)

    def _decide(
        self, decision: Decision, indices: Iterable[int] | npt.NDArray[np.intp] | None, proof: Proof | None
    ) -> None:
        if indices is None:
            chosen = np.arange(len(self.records), dtype=np.intp)
        elif isinstance(indices, np.ndarray):
            chosen = indices.astype(np.intp, copy=False)
        else:
            chosen = np.fromiter(indices, dtype=np.intp)
        with self._lock:
            if np.unique(chosen).size != chosen.size:
                raise IllegalTransition(f"{decision.name} names a record twice in one decision")
            decided = np.flatnonzero(self._states[chosen] != RecordState.ACQUIRED.value)
            if decided.size:
                i = int(chosen[decided[0]])
                rec = self.records[i]
                raise IllegalTransition(
                    f"{decision.name} of {rec.topic()}/{rec.partition()}@{rec.offset()}: "
                    f"already {RecordState(int(self._states[i])).name} (INVARIANT 3)"
                )
            self._apply(decision, chosen)

    def _apply(self, decision: Decision, indices: npt.NDArray[np.intp]) -> None:
        if not indices.size:
            return
        self._states[indices] = decision.value.value
        self._undecided -= int(indices.size)
        self._commands.put(AckCommand(self, tuple(indices.tolist()), decision))
