"""The group type's seam (`kafka.group_type`): the abstract types, and the group's state as values.

Only abstractions live here; each implementation is one module that imports this one, and the registry
`sharelake.consume.group_types` (the only module importing them all) lists them by name, so the import graph has no
cycle. The seam:

- `GroupType`: its `name` (the config value) and what others call it by (`noun`, `offset_label`), at start
  `prepare` (the group's settings and their checks; `apply=False` changes nothing) and the `broker_lock_cap` it
  reads from the broker's settings, the group setting that bounds a record's deliveries
  (`delivery_limit_setting`), one `client` per member, `member_cap` (how many members can hold records at once),
  the `decision_window` (how long a poll may wait for its decisions), the banner's `describe`, and `read_state`
  (the group's members and partitions, read with the admin clients of `sharelake.consume.group_admin.GroupAdmin`);
- `GroupClient`: one member's client, used by its member thread only (the clients are not thread-safe);
- the state as values (`GroupState`, `GroupMember`, `PartitionState`), and where the tables are
  (`TablePositions`, `table_positions`), handed to the clients.

Two types, each one module:

- `share` (`sharelake.consume.share.share_group`): a share group. ACCEPT, RELEASE and REJECT are the broker's
  per-record acknowledgements, sent with the poll's commit; RELEASE redelivers one record. Its
  state: each share partition's start offset and lag (the Java Admin).
- `consumer` (`sharelake.consume.classic.consumer_group`): a classic consumer group. ACCEPT and REJECT let the
  partition's committed offset move past the record, committed to Kafka only after the Delta
  commit that holds it; RELEASE rewinds the partition to the record (it and those after it are
  read again, and the dedup recognises those already in the table). Its state: each partition's
  committed offset and its lag to the end offset (librdkafka's admin client).

The dedup, the sink, the dead-letter table and the replay do not know which type fed them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from confluent_kafka import Message
from confluent_kafka.admin import AdminClient, ClusterMetadata

from sharelake.acknowledge.lifecycle import AckCommand
from sharelake.acknowledge.window import DecisionWindow
from sharelake.config.settings import KafkaConfig, PumpConfig
from sharelake.consume.group_admin import GroupAdmin

# (topic, partition) -> the next offset the Delta tables want: the one after the highest they hold
TablePositions = Mapping[tuple[str, int], int]
NO_POSITIONS: TablePositions = MappingProxyType({})

NO_SUCH_GROUP = "does not exist"  # the state of a group the broker does not know (no member ever joined)


def table_positions(tables: Iterable[Mapping[tuple[str, int], int]]) -> TablePositions:
    """The tables' positions as one value: per partition the furthest of the tables' next offsets
    (each `DedupCache.next_offsets()`), read once the tables are open."""
    out: dict[tuple[str, int], int] = {}
    for offsets in tables:
        for key, offset in offsets.items():
            out[key] = max(out.get(key, 0), offset)
    return MappingProxyType(out)


@dataclass(frozen=True)
class GroupMember:
    """One member of the group, as the broker describes it."""

    member_id: str
    client_id: str
    host: str
    partitions: list[tuple[str, int]]


@dataclass(frozen=True)
class PartitionState:
    """One partition as the group sees it. `start_offset`: a share partition's start offset, or a
    consumer group's committed offset (the next record it reads); `lag`: the records after it not yet
    done (a share group: not delivered to completion; a consumer group: up to the end offset)."""

    topic: str
    partition: int
    start_offset: int | None  # None: the group holds no state for the partition yet
    lag: int | None  # None: the broker did not report one (or no offset is committed)
    in_flight: int | None = None  # not in the admin API: None unless a running job says


@dataclass(frozen=True)
class GroupState:
    """What the broker says about the group: its state, members and partitions."""

    group_id: str
    state: str  # the broker's: Stable, Empty, ...; NO_SUCH_GROUP when it does not exist
    members: list[GroupMember]
    partitions: list[PartitionState]


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
        """Send the poll's decisions once all are applied; how many acknowledgements (records' decisions) the
        broker refused: each one of a refused partition, all of a refused call."""

    @abstractmethod
    def close(self) -> None: ...


class GroupType(ABC):
    """A group type: its start-up, its members' clients, and its state on the broker."""

    name: str  # the kafka.group_type value
    noun: str  # how the banner names the group
    offset_label: str  # what a partition's offset in its state is (`sharelake status`'s column)
    # whether a delivery count of 1 proves a record was never delivered before (so no table can
    # hold it yet): a share group counts every acquisition, a consumer group re-reads by offset
    counts_deliveries: bool = False
    # the group config bounding a record's deliveries, where the broker archives it unseen; None: the type has none
    delivery_limit_setting: str | None = None

    @abstractmethod
    def prepare(
        self, admin: AdminClient, k: KafkaConfig, metadata: ClusterMetadata, broker: dict[str, str], apply: bool = True
    ) -> dict[str, str]:
        """At start, before any member joins: apply the settings the job owns; the group's effective
        settings. Raises ConfigError (one line) on what would go wrong later. `apply=False`
        (`sharelake check`): the same checks, changing nothing; the group's settings as they are."""

    def broker_lock_cap(self, k: KafkaConfig, broker: dict[str, str]) -> int | None:
        """The broker's bound on the records in flight per partition, from its settings `broker`, when the type
        has such a bound and the job asks for it; None otherwise (the banner's `describe` is given it)."""
        return None

    @abstractmethod
    def client(
        self, kafka: KafkaConfig, pump: PumpConfig, member_id: int, positions: TablePositions = NO_POSITIONS
    ) -> GroupClient:
        """One member's client. `positions`: where the tables are (`table_positions`), read before any
        member is made; a consumer group starts a partition there when the tables are ahead of its
        committed offset, a share group has no use for it."""

    @abstractmethod
    def member_cap(self, partitions: int) -> int | None:
        """The most members that can hold records at once; None: no bound."""

    @abstractmethod
    def decision_window(self, k: KafkaConfig, settings: dict[str, str]) -> DecisionWindow:
        """How long a member's polled records may wait for their decisions before the group takes them
        back, from the group's effective `settings` (`prepare`'s)."""

    @abstractmethod
    def describe(self, k: KafkaConfig, settings: dict[str, str], broker_lock_cap: int | None) -> str:
        """The banner's lines on the group: its settings, and what this type gives and costs."""

    @abstractmethod
    def read_state(self, admin: GroupAdmin, k: KafkaConfig) -> GroupState:
        """The group's state now: its members and each partition's offset and lag (all jobs'). Raises
        ConfigError (one line) when the group is of the other type; the admin client's own error when
        the broker does not answer."""
