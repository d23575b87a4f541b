"""The decision types and the commit proof: what a record's decision is, and what it rests on.

A `CommitProof` is minted by a table's Delta writer only (`DeltaWriter.append` for its commit, `proof_of_presence`
for records an earlier commit holds): constructing one directly raises and a proof cannot be changed, so an ACCEPT
or a REJECT always rests on a commit (INVARIANT 1, `app.acknowledge.lifecycle`). Nothing here imports Kafka or
Arrow, so the sink's side and the consumer's side meet in these types without importing each other.
"""

from __future__ import annotations

import enum


class RecordState(enum.Enum):
    ACQUIRED = 0
    ACCEPTED = 1
    RELEASED = 2
    REJECTED = 3


class Decision(enum.Enum):
    ACCEPT = RecordState.ACCEPTED
    RELEASE = RecordState.RELEASED
    REJECT = RecordState.REJECTED


class IllegalTransition(RuntimeError):
    """A record was decided twice, or accepted without a Delta commit behind it."""


class CommitProof:
    """Evidence that records are durably in a Delta table: minted by the table's Delta writer only.

    `DeltaWriter.append` mints one for the commit it made once the commit file is written (and
    `DeltaMerge.merge` for a MERGE's); its `proof_of_presence` mints one for records the dedup
    cache found in an earlier commit (`already_present`; `version` is then the version the cache
    has read up to). Constructing
    one directly raises, so INVARIANT 1 is enforced, not a convention. Tests get proofs from a
    real append or from `tests/proofs.py`.
    """

    __slots__ = ("already_present", "table", "version")
    table: str
    version: int
    already_present: bool

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a CommitProof is minted by the Delta writer (DeltaWriter.append / proof_of_presence)")

    @classmethod
    def _mint(cls, table: str, version: int, already_present: bool = False) -> CommitProof:
        """For `app.sink.delta.writer` and `.merge` (and the test-only factory): the one way to make a proof."""
        proof = object.__new__(cls)
        object.__setattr__(proof, "table", table)
        object.__setattr__(proof, "version", version)
        object.__setattr__(proof, "already_present", already_present)
        return proof

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a CommitProof cannot be changed")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CommitProof) and (self.table, self.version, self.already_present) == (
            other.table,
            other.version,
            other.already_present,
        )

    def __hash__(self) -> int:
        return hash((self.table, self.version, self.already_present))

    def __repr__(self) -> str:
        return f"CommitProof({self.table!r}, version={self.version}, already_present={self.already_present})"


class BrokerCustody:
    """Evidence that REJECTed records go to the broker's own dead-letter topic, which the job checked at
    start (it exists, accepts the group's dead letters, and the group names it): minted by the
    broker-topic dead-letter sink only (`app.sink.dead_letter.broker_topic`). It backs a REJECT, never
    an ACCEPT: the records stay in the broker's custody, the source topic's until the REJECT reaches
    it and the dead-letter topic's after."""

    __slots__ = ("topic",)
    topic: str

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a BrokerCustody is minted by the broker-topic dead-letter sink")

    @classmethod
    def _mint(cls, topic: str) -> BrokerCustody:
        proof = object.__new__(cls)
        object.__setattr__(proof, "topic", topic)
        return proof

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a BrokerCustody cannot be changed")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BrokerCustody) and self.topic == other.topic

    def __hash__(self) -> int:
        return hash(self.topic)

    def __repr__(self) -> str:
        return f"BrokerCustody({self.topic!r})"


Proof = CommitProof | BrokerCustody  # what a decision rests on: ACCEPT a CommitProof only; REJECT either
