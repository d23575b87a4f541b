"""The consumer group type (`kafka.group_type = "consumer"`): offsets committed after the Delta commit.

Behind `sharelake.consume.group_type`'s seam, for brokers before share groups (4.2), for order per partition, and for
teams moving a topic between the two types with one table. Each member's `ConsumerGroupClient` holds one classic
`Consumer` (cooperative-sticky assignment, no auto-commit). A poll's decisions become offsets: ACCEPT and
REJECT (after the dead-letter table's commit) let a partition's committed offset move past the
record; RELEASE rewinds the partition to the record, so it and the records after it are read again
(the dedup recognises those the table already holds). The offsets are committed to Kafka once every
record of the poll is decided, so only after the Delta commit that holds them. A member polls again
only then, so a rebalance, which the client runs inside a poll, never finds a member holding
records: the group pauses while a member's poll is written (the trade-off), and a revoked
partition's records are never lost nor written twice. Its decision window is `max.poll.interval.ms`: a poll not
decided by then, librdkafka takes its member out of the group.

At assignment the member starts each partition at the later of the offset this group committed and
the tables' (`TablePositions`, handed to `client` as a value once the tables are open: the offset
after the highest one the main and dead-letter tables hold, from their commit metadata): after a
crash between the Delta commit and the Kafka commit the table is ahead, and is the source of truth.
A partition without a committed offset starts at `auto.offset.reset`, and the dedup recognises what
the table holds. No group configs are set (a share group's `kafka.broker_dead_letter_topic` is refused); members
beyond the partition count would idle, so the pool is capped at it.

`ConsumerGroupType.read_state` reads the group's members and their partitions (librdkafka's
`describe_consumer_groups`) and, per partition of the subscribed topics, the committed offset and the lag: the end
offset (read-committed) minus it. No JVM is needed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, OffsetSpec

from sharelake.acknowledge.lifecycle import AckCommand
from sharelake.acknowledge.proof import Decision
from sharelake.acknowledge.window import DecisionWindow
from sharelake.config.settings import KafkaConfig, PumpConfig
from sharelake.consume.group_admin import ADMIN_TIMEOUT_S, GroupAdmin
from sharelake.consume.group_type import (
    NO_POSITIONS,
    NO_SUCH_GROUP,
    GroupClient,
    GroupMember,
    GroupState,
    GroupType,
    PartitionState,
    TablePositions,
)
from sharelake.failures.errors import ConfigError

log = logging.getLogger(__name__)

COMMITTED_TIMEOUT_S = 30.0
# a member polls again only once its last poll is decided: librdkafka takes it out of the group after this
MAX_POLL_INTERVAL = "max.poll.interval.ms"
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000  # librdkafka's default


def consumer_config(kafka: KafkaConfig, pump: PumpConfig, member_id: int) -> dict[str, Any]:
    reset = {"auto.offset.reset": kafka.auto_offset_reset} if kafka.auto_offset_reset != "unchanged" else {}
    return {
        **kafka.client_config(),
        "group.id": kafka.group_id,
        "client.id": f"sharelake-{kafka.group_id}-{member_id}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "partition.assignment.strategy": "cooperative-sticky",
        **reset,
    }


class ConsumerGroupType(GroupType):
    name = "consumer"
    noun = "consumer group"
    offset_label = "committed"

    def prepare(
        self, admin: AdminClient, k: KafkaConfig, metadata: ClusterMetadata, broker: dict[str, str], apply: bool = True
    ) -> dict[str, str]:
        if k.broker_dead_letter_topic is not None:
            raise ConfigError(
                f"kafka.broker_dead_letter_topic = {k.broker_dead_letter_topic!r}: a share group's setting (the broker "
                'archives only share-group records); unset it with kafka.group_type = "consumer"'
            )
        return {}  # a classic group has no configs the job owns

    def client(
        self, kafka: KafkaConfig, pump: PumpConfig, member_id: int, positions: TablePositions = NO_POSITIONS
    ) -> GroupClient:
        return ConsumerGroupClient(consumer_config(kafka, pump, member_id), member_id, pump.max_poll_records, positions)

    def member_cap(self, partitions: int) -> int | None:
        return partitions

    def decision_window(self, k: KafkaConfig, settings: dict[str, str]) -> DecisionWindow:
        ms = int(k.client_config().get(MAX_POLL_INTERVAL, DEFAULT_MAX_POLL_INTERVAL_MS))
        return DecisionWindow.poll_interval(ms / 1000)

    def describe(self, k: KafkaConfig, settings: dict[str, str], broker_lock_cap: int | None) -> str:
        return (
            f"consumer group {k.group_id}: offsets committed after the Delta commit; order per partition, at most "
            "one member per partition, a rebalance pauses the group until each member's poll is written, no "
            "per-record RELEASE (a failed write rewinds the partition)"
        )

    def read_state(self, admin: GroupAdmin, k: KafkaConfig) -> GroupState:
        described = _describe(admin.client, k.group_id)
        if described.state.name == "DEAD":  # the broker knows no such consumer group
            return GroupState(k.group_id, NO_SUCH_GROUP, [], [])
        members = sorted(
            (
                GroupMember(
                    str(m.member_id),
                    str(m.client_id),
                    str(m.host),
                    sorted((tp.topic, tp.partition) for tp in m.assignment.topic_partitions),
                )
                for m in described.members
            ),
            key=lambda m: m.member_id,
        )
        metadata = admin.client.list_topics(timeout=ADMIN_TIMEOUT_S)
        partitions = [
            TopicPartition(t, p)
            for t in k.subscribed
            if t in metadata.topics
            for p in sorted(metadata.topics[t].partitions)
        ]
        committed = admin.committed(partitions) if partitions else []
        ends: dict[tuple[str, int], int] = {}
        if partitions:
            latest = {tp: OffsetSpec.latest() for tp in partitions}  # type: ignore[no-untyped-call]
            futures = admin.client.list_offsets(
                latest, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=ADMIN_TIMEOUT_S
            )
            ends = {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
        states = []
        for tp in committed:
            end = ends.get((tp.topic, tp.partition))
            done = tp.offset if tp.offset >= 0 else None  # negative: the group committed nothing there
            lag = None if done is None or end is None else max(0, end - done)
            states.append(PartitionState(tp.topic, tp.partition, done, lag))
        state = described.state.name.replace("_", " ").title().replace(" ", "")  # Stable, PreparingRebalance
        return GroupState(k.group_id, state, members, states)


RETRIABLE_DESCRIBE_S = 0.5  # between attempts while the group's coordinator is not ready
COORDINATOR_NOT_READY = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)


def _describe(admin: AdminClient, group_id: str) -> Any:
    """The group's description, retried while the broker answers with a retriable error (a coordinator
    not ready yet: NOT_COORDINATOR) until `ADMIN_TIMEOUT_S`."""
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        try:
            return admin.describe_consumer_groups([group_id], request_timeout=ADMIN_TIMEOUT_S)[group_id].result()
        except KafkaException as e:
            error = e.args[0] if e.args else None
            waiting = error is not None and (error.retriable() or error.code() in COORDINATOR_NOT_READY)
            if not waiting or time.monotonic() > deadline:
                raise
            time.sleep(RETRIABLE_DESCRIBE_S)


class ConsumerGroupClient(GroupClient):
    def __init__(self, config: dict[str, Any], member_id: int, max_records: int, positions: TablePositions):
        self._consumer = Consumer(config)
        self._member_id = member_id
        self._max = max_records
        self._positions = positions
        self._next: dict[tuple[str, int], int] = {}  # after ACCEPT / REJECT: the offset to commit
        self._rewind: dict[tuple[str, int], int] = {}  # after RELEASE: the lowest released offset
        self._decided: dict[tuple[str, int], int] = {}  # ACCEPTs and REJECTs since the last commit, per partition

    def subscribe(self, topics: list[str]) -> None:
        self._consumer.subscribe(topics, on_assign=self._on_assign)

    def poll(self, timeout_s: float) -> Sequence[Message]:
        return self._consumer.consume(self._max, timeout_s)

    def acknowledge(self, cmd: AckCommand) -> int:
        for i in cmd.indices:
            m = cmd.batch.records[i]
            key, offset = (str(m.topic()), int(m.partition() or 0)), int(m.offset() or 0)
            if cmd.decision is Decision.RELEASE:
                self._rewind[key] = min(self._rewind.get(key, offset), offset)
            else:
                self._next[key] = max(self._next.get(key, 0), offset + 1)
                self._decided[key] = self._decided.get(key, 0) + 1
        return 0

    def commit(self) -> int:
        # never past a released record: it is read again, and so are the decided ones after it
        offsets = [TopicPartition(t, p, min(n, self._rewind.get((t, p), n))) for (t, p), n in self._next.items()]
        rewind, decided, self._next, self._rewind, self._decided = self._rewind, self._decided, {}, {}, {}
        refused = 0  # the decisions a refused partition's offset carried, each of them
        if offsets:
            try:
                done = self._consumer.commit(offsets=offsets, asynchronous=False) or []
                refused = sum(max(1, decided.get((tp.topic, tp.partition), 0)) for tp in done if tp.error is not None)
            except KafkaException as e:
                log.warning("member %d offset commit failed: %s", self._member_id, e)
                refused = max(1, sum(decided.values()))
        for (t, p), offset in rewind.items():
            try:
                self._consumer.seek(TopicPartition(t, p, offset))
            except KafkaException as e:  # revoked meanwhile: its next owner starts at the committed offset
                log.info("member %d: %s/%d not rewound (%s)", self._member_id, t, p, e)
        return refused

    def close(self) -> None:
        self._consumer.close()  # leaves the group; nothing is committed here (nothing undecided is)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Start each new partition at the tables' position when they are ahead of Kafka's committed offset."""
        if self._positions and partitions:
            try:
                committed = consumer.committed(partitions, timeout=COMMITTED_TIMEOUT_S)
            except KafkaException as e:
                log.warning("member %d: committed offsets unreadable (%s); starting from Kafka's", self._member_id, e)
                committed = partitions
            for tp, seen in zip(partitions, committed, strict=True):
                table = self._positions.get((tp.topic, tp.partition))
                # only ahead of an offset this group committed: a group without one (new, or moving from a
                # share group, whose table may have gaps) starts at auto.offset.reset, and the dedup knows the rest
                if table is not None and seen.offset >= 0 and seen.offset < table:
                    log.info(
                        "member %d: %s/%d starts at %d, where the table is (Kafka's committed offset: %d)",
                        self._member_id, tp.topic, tp.partition, table, seen.offset,
                    )  # fmt: skip
                    tp.offset = table
        consumer.incremental_assign(partitions)
