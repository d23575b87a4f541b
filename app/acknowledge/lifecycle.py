"""The record lifecycle: every polled record is ACQUIRED and then decided exactly once.

States: ACQUIRED -> ACCEPTED | RELEASED | REJECTED. Any other transition raises
`IllegalTransition`, so the three invariants are enforced here rather than promised in comments:

- INVARIANT 1: `accept()` takes a `CommitProof`, which only the Delta sink mints after the Delta
  commit holding the records (or proving they are already there) has returned; `reject()` takes
  the proof of the dead-letter table's commit in the same way.
- INVARIANT 2: a member cannot poll again until every record of its poll is decided
  (`PollBatch.all_decided`); on shutdown the member RELEASEs whatever is still undecided.
- INVARIANT 3: a decided record cannot be decided again, and only newly decided records are sent
  to the member as acknowledge commands, so nothing touches a record after its decision.

Created by a share member for each poll (`app.consume.share_member`), decided by the Delta sink
(`app.sink.delta_sink`) or by the member itself on shutdown; the decisions travel to the member
thread as `AckCommand`s on its queue.
"""

from __future__ import annotations

import enum
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from confluent_kafka import Message


class RecordState(enum.Enum):
    ACQUIRED = "acquired"
    ACCEPTED = "accepted"
    RELEASED = "released"
    REJECTED = "rejected"


class Decision(enum.Enum):
    ACCEPT = RecordState.ACCEPTED
    RELEASE = RecordState.RELEASED
    REJECT = RecordState.REJECTED


class IllegalTransition(RuntimeError):
    """A record was decided twice, or accepted without a Delta commit behind it."""


@dataclass(frozen=True)
class CommitProof:
    """Evidence that records are durably in the Delta table: minted by the sink only.

    `version` is the Delta table version that holds them; `already_present` marks records that
    the dedup cache found in an earlier commit (then `version` is the version the cache was
    loaded at or updated to).
    """

    table: str
    version: int
    already_present: bool = False


@dataclass(frozen=True)
class AckCommand:
    """Acknowledge `indices` of `batch` with `decision`: sent from a decider to the owning member."""

    batch: PollBatch
    indices: tuple[int, ...]
    decision: Decision


class PollBatch:
    """The records of one `ShareConsumer.poll()` of one member, with each record's state.

    Thread-safe: the sink decides from the foreachBatch thread while the member thread reads.
    """

    def __init__(self, member_id: int, records: Sequence[Message], commands: queue.Queue[AckCommand]):
        self.member_id = member_id
        self.records = records
        self._states = [RecordState.ACQUIRED] * len(records)
        self._undecided = len(records)
        self._commands = commands
        self._lock = threading.Lock()
        self.proofs: list[CommitProof] = []
        self.acquired_at = time.monotonic()  # the record locks started about now
        self.acks_committed = threading.Event()  # set by the member once commit_sync returned

    def __len__(self) -> int:
        return len(self.records)

    def state(self, index: int) -> RecordState:
        with self._lock:
            return self._states[index]

    @property
    def undecided(self) -> int:
        with self._lock:
            return self._undecided

    @property
    def all_decided(self) -> bool:
        return self.undecided == 0

    def accept(self, proof: CommitProof, indices: Iterable[int] | None = None) -> None:
        """ACCEPT records held by the Delta commit `proof` (INVARIANT 1)."""
        if not isinstance(proof, CommitProof):
            raise IllegalTransition("ACCEPT needs the CommitProof of the Delta commit that holds the records")
        self._decide(Decision.ACCEPT, indices, proof)

    def release(self, indices: Iterable[int] | None = None) -> None:
        """RELEASE records for redelivery (a transient failure, or shutdown)."""
        self._decide(Decision.RELEASE, indices, None)

    def reject(self, proof: CommitProof, indices: Iterable[int] | None = None) -> None:
        """REJECT records for good: `proof` is the dead-letter table's commit that holds them (INVARIANT 1)."""
        if not isinstance(proof, CommitProof):
            raise IllegalTransition("REJECT needs the CommitProof of the dead-letter commit that holds the records")
        self._decide(Decision.REJECT, indices, proof)

    def release_undecided(self) -> int:
        """RELEASE every record still ACQUIRED; returns how many (used on shutdown, INVARIANT 2)."""
        with self._lock:
            pending = [i for i, s in enumerate(self._states) if s is RecordState.ACQUIRED]
            self._apply(Decision.RELEASE, pending)
        return len(pending)

    def _decide(self, decision: Decision, indices: Iterable[int] | None, proof: CommitProof | None) -> None:
        with self._lock:
            chosen = list(range(len(self.records))) if indices is None else list(indices)
            if len(set(chosen)) != len(chosen):
                raise IllegalTransition(f"{decision.name} names a record twice in one decision")
            for i in chosen:
                if self._states[i] is not RecordState.ACQUIRED:
                    rec = self.records[i]
                    raise IllegalTransition(
                        f"{decision.name} of {rec.topic()}/{rec.partition()}@{rec.offset()}: "
                        f"already {self._states[i].name} (INVARIANT 3)"
                    )
            if proof is not None:
                self.proofs.append(proof)
            self._apply(decision, chosen)

    def _apply(self, decision: Decision, indices: list[int]) -> None:
        if not indices:
            return
        for i in indices:
            self._states[i] = decision.value
        self._undecided -= len(indices)
        self._commands.put(AckCommand(self, tuple(indices), decision))
