"""The group type's seam (`kafka.group_type`): what a member polls with and what its decisions mean.

Called by `app.preflight` at start (`GroupType.prepare`: the group's settings), by
`app.consume.member_pool` (`GroupType.client`, `GroupType.member_cap`) and by each member thread
(`app.consume.member`), which only ever talks to its `GroupClient`. Two types, each one module:

- `share` (`app.consume.share_group`): a share group. ACCEPT, RELEASE and REJECT are the broker's
  per-record acknowledgements, sent with the poll's commit; RELEASE redelivers one record.
- `consumer` (`app.consume.consumer_group`): a classic consumer group. ACCEPT and REJECT let the
  partition's committed offset move past the record, committed to Kafka only after the Delta
  commit that holds it; RELEASE rewinds the partition to the record (it and those after it are
  read again, and the dedup recognises those already in the table).

The dedup, the sink, the dead-letter table and the replay do not know which type fed them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Message
from confluent_kafka.admin import AdminClient, ClusterMetadata

from app.acknowledge.lifecycle import AckCommand
from app.config import KafkaConfig, PumpConfig

# (topic, partition) -> the next offset the Delta tables want: the one after the highest they hold
TablePositions = Callable[[str, int], int | None]


class GroupClient(ABC):
    """One member's Kafka client. Used by its member thread only (the clients are not thread-safe)."""

    @abstractmethod
    def subscribe(self, topics: list[str]) -> None: ...

    @abstractmethod
    def poll(self, timeout_s: float) -> Sequence[Message]:
        """Records (and any per-partition errors); a member polls again only once all are decided."""

    @abstractmethod
    def acknowledge(self, cmd: AckCommand) -> int:
        """Apply one decision to its records; how many the client refused."""

    @abstractmethod
    def commit(self) -> int:
        """Send the poll's decisions once all are applied; how many partitions (or calls) were refused."""

    @abstractmethod
    def close(self) -> None: ...


class GroupType(ABC):
    """A group type's start-up and its members' clients."""

    name: str  # the kafka.group_type value
    noun: str  # how the banner names the group

    @abstractmethod
    def prepare(
        self, admin: AdminClient, k: KafkaConfig, metadata: ClusterMetadata, broker: dict[str, str], apply: bool = True
    ) -> dict[str, str]:
        """At start, before any member joins: apply the settings the job owns; the group's effective
        settings. Raises ConfigError (one line) on what would go wrong later. `apply=False`
        (`sharelake check`): the same checks, changing nothing; the group's settings as they are."""

    @abstractmethod
    def client(self, kafka: KafkaConfig, pump: PumpConfig, member_id: int) -> GroupClient: ...

    @abstractmethod
    def member_cap(self, partitions: int) -> int | None:
        """The most members that can hold records at once; None: no bound."""

    @abstractmethod
    def describe(self, k: KafkaConfig, settings: dict[str, str], broker_lock_cap: int | None, lock_ms: int) -> str:
        """The banner's lines on the group: its settings, and what this type gives and costs."""


def group_type(
    k: KafkaConfig, share_consumer_factory: Callable[[dict[str, Any]], Any], positions: TablePositions | None = None
) -> GroupType:
    """The job's group type (`positions`: where the tables are, for a consumer group's start offsets)."""
    if k.group_type == "consumer":
        from app.consume.consumer_group import ConsumerGroupType

        return ConsumerGroupType(positions)
    from app.consume.share_group import ShareGroupType

    return ShareGroupType(share_consumer_factory)
