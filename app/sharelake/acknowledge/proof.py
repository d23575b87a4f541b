"""The decision types and the commit proof: what a record's decision is, and what it rests on.

A proof is minted by its one maker only and cannot be changed (`_Minted`): a `CommitProof` by a table's Delta
writer (`DeltaWriter.append` for its commit, `proof_of_presence` for records an earlier commit holds), a
`BrokerCustody` by the broker-topic dead-letter sink. So an ACCEPT always rests on a commit, and a REJECT on a
commit or, where the config sends dead letters to the broker's topic, on the broker's custody (INVARIANT 1,
`sharelake.acknowledge.lifecycle`). Nothing here imports Kafka or Arrow, so the sink's side and the consumer's side
meet in these types without importing each other.
"""

from __future__ import annotations

import enum
from typing import Self


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


class _Minted:
    """A proof's mechanics: made only by its maker (`_new`), never changed, equal by its fields."""

    __slots__: tuple[str, ...] = ()
    _MAKER = ""  # who mints it, for the constructor's refusal

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError(f"a {type(self).__name__} is minted by {self._MAKER}")

    @classmethod
    def _new(cls, **fields: object) -> Self:
        proof = object.__new__(cls)
        for name, value in fields.items():
            object.__setattr__(proof, name, value)
        return proof

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a {type(self).__name__} cannot be changed")

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash((type(self), self._fields()))


class CommitProof(_Minted):
    """Evidence that records are durably in a Delta table: minted by the table's Delta writer only.

    `DeltaWriter.append` mints one for the commit it made once the commit file is written and read
    back holding this write's `write_id` (`sharelake.sink.delta.commit_read_back`; `DeltaMerge.merge` for a
    MERGE's likewise); its `proof_of_presence` mints one for records the dedup
    cache found in an earlier commit (`already_present`; `version` is then the version the cache
    has read up to). Constructing
    one directly raises, so INVARIANT 1 is enforced, not a convention. Tests get proofs from a
    real append or from `tests/proofs.py`.
    """

    __slots__ = ("already_present", "table", "version")
    table: str
    version: int
    already_present: bool

    _MAKER = "the Delta writer (DeltaWriter.append / proof_of_presence)"

    @classmethod
    def _mint(cls, table: str, version: int, already_present: bool = False) -> CommitProof:
        """For `sharelake.sink.delta.writer` and `.merge` (and the test-only factory): the one way to make a proof."""
        return cls._new(table=table, version=version, already_present=already_present)

    def __repr__(self) -> str:
        return f"CommitProof({self.table!r}, version={self.version}, already_present={self.already_present})"


class BrokerCustody(_Minted):
    """Evidence that REJECTed records go to the broker's own dead-letter topic, which the job checked at
    start (it exists, accepts the group's dead letters, and the group names it): minted by the
    broker-topic dead-letter sink only (`sharelake.sink.dead_letter.broker_topic`). It backs a REJECT, never
    an ACCEPT: the records stay in the broker's custody, the source topic's until the REJECT reaches
    it and the dead-letter topic's after."""

    __slots__ = ("topic",)
    topic: str

    _MAKER = "the broker-topic dead-letter sink"

    @classmethod
    def _mint(cls, topic: str) -> BrokerCustody:
        return cls._new(topic=topic)

    def __repr__(self) -> str:
        return f"BrokerCustody({self.topic!r})"


Proof = CommitProof | BrokerCustody  # what a decision rests on: ACCEPT a CommitProof only; REJECT either
