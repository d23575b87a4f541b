"""The share group type (`kafka.group_type = "share"`, the default): per-record acknowledgements.

Behind `sharelake.consume.group_type`'s seam; its consumers are made by a `ShareConsumerFactory` (confluent-kafka's
`ShareConsumer`, or a test's that provokes faults). At start, `ShareGroupType.prepare` sets the group configs the
job owns (`sharelake.consume.share.group_settings`) after checking the broker-side dead-letter topic
(`sharelake.consume.share.broker_dead_letter_topic`), since an old broker would refuse the settings. Its decision
window is the group's record lock (`share.record.lock.duration.ms`); members beyond the partition count share the
partitions. Each member's `ShareGroupClient` holds one `ShareConsumer` in explicit mode: every record of a poll must
be acknowledged before the next poll; `acknowledge` applies one AckCommand (each of its records with
the command's ACCEPT, RELEASE or REJECT), `commit` sends the poll's acknowledgements with
`commit_sync` once all are applied. With `pump.acknowledgement_commit = "async"` they go with
`commit_async` instead and the member polls again at once; the broker's per-partition results come
back inside a later poll, to the commit callback. The broker takes or refuses a partition's acknowledgements
together (a refused one: a record whose lock expired); each refused acknowledgement is an ack error, so the
client counts the acknowledgements it sent per partition since its last commit. Their records come back and are
deduplicated.

`ShareGroupType.read_state` reads the group's members and each share partition's start offset and lag through the
Java Admin (`GroupAdmin.java`: `describeShareGroups`, `listShareGroupOffsets`). The lag is the broker's: records at
or after the start offset not yet delivered to completion (available or in flight); how many are in flight now is
not in the admin API.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Message, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata
from py4j.protocol import Py4JJavaError

from sharelake.acknowledge.lifecycle import AckCommand
from sharelake.acknowledge.proof import Decision
from sharelake.acknowledge.window import DecisionWindow
from sharelake.config.settings import MAX_RECORD_LOCKS, KafkaConfig, PumpConfig
from sharelake.consume.broker_settings import AUTHORIZATION
from sharelake.consume.group_admin import GroupAdmin
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
from sharelake.consume.java_admin import ADMIN_TIMEOUT_MS
from sharelake.consume.share.broker_dead_letter_topic import check_broker_dead_letter_topic
from sharelake.consume.share.group_settings import (
    BROKER_LOCK_CAP,
    DELIVERY_LIMIT,
    GROUP_LOCKS,
    apply_group_settings,
    broker_lock_cap,
    desired_group_settings,
    read_group_settings,
    settled_group_settings,
    with_broker_defaults,
)
from sharelake.failures.errors import ConfigError, one_line

log = logging.getLogger(__name__)

ACK_TYPES: Mapping[Decision, AcknowledgeType] = {
    Decision.ACCEPT: AcknowledgeType.ACCEPT,
    Decision.RELEASE: AcknowledgeType.RELEASE,
    Decision.REJECT: AcknowledgeType.REJECT,
}

ShareConsumerFactory = Callable[[dict[str, Any]], ShareConsumer]

# The client has no RENEW yet; a future one lets a background cadence renew in-flight locks
# (the seed's RENEW_ALL every lock x 0.4). Until then the batch cycle must stay under the lock.
RENEW_SUPPORTED = hasattr(AcknowledgeType, "RENEW")
LOCK_DURATION = "share.record.lock.duration.ms"  # the group's config
DEFAULT_LOCK_MS = 30_000  # the broker's group.share.record.lock.duration.ms default


def share_consumer_config(kafka: KafkaConfig, pump: PumpConfig, member_id: int) -> dict[str, Any]:
    return {
        **kafka.client_config(),
        "group.id": kafka.group_id,
        "client.id": f"sharelake-{kafka.group_id}-{member_id}",
        "share.acknowledgement.mode": "explicit",
        "max.poll.records": pump.max_poll_records,
    }


class ShareGroupType(GroupType):
    name = "share"
    noun = "share group"
    offset_label = "start offset"
    counts_deliveries = True
    delivery_limit_setting = DELIVERY_LIMIT

    def __init__(self, factory: ShareConsumerFactory = ShareConsumer):
        self._factory = factory

    def prepare(
        self, admin: AdminClient, k: KafkaConfig, metadata: ClusterMetadata, broker: dict[str, str], apply: bool = True
    ) -> dict[str, str]:
        user = k.client.get("sasl.username", "(the client's principal)")
        settings = desired_group_settings(k, self.broker_lock_cap(k, broker))
        try:
            # the group's settings before the job changes them (read once: the DLQ check and `check` use them)
            current = read_group_settings(admin, k.group_id) if k.broker_dead_letter_topic or not apply else {}
            if k.broker_dead_letter_topic is not None:  # before the settings: an old broker would refuse them
                check_broker_dead_letter_topic(admin, k, metadata, current, broker, create=apply)
            if not apply:
                return with_broker_defaults(current, broker)
            apply_group_settings(admin, k.group_id, settings)
            return with_broker_defaults(settled_group_settings(admin, k.group_id, settings), broker)
        except KafkaException as e:
            if e.args and isinstance(e.args[0], KafkaError) and e.args[0].code() in AUTHORIZATION:
                raise ConfigError(
                    f"kafka.group_id = {k.group_id!r}: {user} is not authorized on the share group "
                    f"({e.args[0].str()}); grant it READ on the group, and DESCRIBE_CONFIGS and ALTER_CONFIGS when "
                    "the job sets group configs (docs/security.md)"
                ) from None
            keys = ", ".join(f"{name}={value}" for name, value in settings.items())
            raise ConfigError(
                f"kafka.group_id = {k.group_id!r}: the broker refused the share-group settings ({keys}): "
                f"{one_line(e, 200)}; fix kafka.auto_offset_reset / kafka.record_lock_duration_ms / "
                "kafka.partition_max_record_locks / kafka.broker_dead_letter_topic, or check the "
                "broker's group.share.* bounds and ACLs"
            ) from None

    def broker_lock_cap(self, k: KafkaConfig, broker: dict[str, str]) -> int | None:
        return broker_lock_cap(broker) if k.partition_max_record_locks == "max" else None

    def client(
        self, kafka: KafkaConfig, pump: PumpConfig, member_id: int, positions: TablePositions = NO_POSITIONS
    ) -> GroupClient:
        consumer = self._factory(share_consumer_config(kafka, pump, member_id))
        return ShareGroupClient(consumer, member_id, pump.acknowledgement_commit == "async")

    def member_cap(self, partitions: int) -> int | None:
        return None  # more members than partitions share them

    def decision_window(self, k: KafkaConfig, settings: dict[str, str]) -> DecisionWindow:
        return DecisionWindow.record_lock(int(settings.get(LOCK_DURATION) or DEFAULT_LOCK_MS) / 1000)

    def describe(self, k: KafkaConfig, settings: dict[str, str], broker_lock_cap: int | None) -> str:
        renew = "available" if RENEW_SUPPORTED else "not available: each poll must be decided within the lock"
        lock_ms = int(settings.get(LOCK_DURATION) or DEFAULT_LOCK_MS)
        return (
            f"share group {k.group_id} (record lock {lock_ms} ms, delivery limit "
            f"{settings.get(DELIVERY_LIMIT, '?')}; client RENEW {renew})\n"
            f"  record locks per partition {lock_note(k, settings, broker_lock_cap)}"
        )

    def read_state(self, admin: GroupAdmin, k: KafkaConfig) -> GroupState:
        group_id, jvm = k.group_id, admin.jvm
        ms = jvm.java.util.concurrent.TimeUnit.MILLISECONDS
        groups = jvm.java.util.Collections.singletonList(group_id)
        java = admin.java
        try:
            described = java.describeShareGroups(groups).describedGroups().get(group_id).get(ADMIN_TIMEOUT_MS, ms)
        except Py4JJavaError as e:
            cause = e.java_exception.getCause()
            if cause is None or cause.getClass().getSimpleName() != "GroupIdNotFoundException":
                raise
            if "not a share group" in str(cause.getMessage()):
                raise ConfigError(
                    f"kafka.group_id = {group_id!r} is not a share group: set kafka.group_type = "
                    '"consumer" to read a consumer group'
                ) from None
            return GroupState(group_id, NO_SUCH_GROUP, [], [])
        members = []
        for m in jvm.java.util.ArrayList(described.members()):
            assigned = sorted((str(tp.topic()), int(tp.partition())) for tp in m.assignment().topicPartitions())
            members.append(GroupMember(str(m.consumerId()), str(m.clientId()), str(m.host()), assigned))
        all_partitions = jvm.org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec()
        spec = jvm.java.util.Collections.singletonMap(group_id, all_partitions)
        offsets = java.listShareGroupOffsets(spec).partitionsToOffsetInfo(group_id).get(ADMIN_TIMEOUT_MS, ms)
        partitions = []
        for tp in offsets.keySet():
            info = offsets.get(tp)
            start = None if info is None else int(info.startOffset())
            lag = None if info is None or not info.lag().isPresent() else int(info.lag().get())
            partitions.append(PartitionState(str(tp.topic()), int(tp.partition()), start, lag))
        partitions.sort(key=lambda p: (p.topic, p.partition))
        members.sort(key=lambda m: m.member_id)
        return GroupState(group_id, str(described.groupState()), members, partitions)


def lock_note(k: KafkaConfig, settings: dict[str, str], cap: int | None) -> str:
    """What bounds the records in flight per partition, for the banner."""
    locks = settings.get(GROUP_LOCKS, "?")
    wanted = k.partition_max_record_locks
    if wanted == "max" and cap is None:
        return f"{locks} (the broker's {BROKER_LOCK_CAP} could not be read: kept the group's)"
    if wanted == "max" and cap is not None and cap < MAX_RECORD_LOCKS:
        return (
            f"{locks}: the broker's cap {BROKER_LOCK_CAP} = {cap} binds; raising it toward "
            f"{MAX_RECORD_LOCKS} lets more records per partition be in flight (throughput on few partitions)"
        )
    if wanted == "max":
        return f"{locks} (the most Kafka allows)"
    return (
        f"{locks} ({'kept the group' + chr(39) + 's' if wanted == 'unchanged' else 'kafka.partition_max_record_locks'})"
    )


class ShareGroupClient(GroupClient):
    def __init__(self, consumer: ShareConsumer, member_id: int, commit_async: bool):
        self._consumer = consumer
        self._member_id = member_id
        self._async = commit_async
        self._refused_later = 0  # counted by the commit callback, inside a poll
        # the acknowledgements applied since the last commit, a poll's records and the indices sent: counted
        # per partition only when the broker refuses one (never on the per-record path)
        self._sent: list[tuple[Sequence[Message], Sequence[int]]] = []
        if commit_async:
            consumer.set_acknowledgement_commit_callback(self._on_commit)

    def subscribe(self, topics: list[str]) -> None:
        self._consumer.subscribe(topics)

    def poll(self, timeout_s: float) -> Sequence[Message]:
        return list(self._consumer.poll(timeout_s))

    def acknowledge(self, cmd: AckCommand) -> int:
        ack_type = ACK_TYPES[cmd.decision]
        refused = self._take_refused()
        failed: list[int] = []
        for i in cmd.indices:
            try:
                self._consumer.acknowledge(cmd.batch.records[i], ack_type)
            except KafkaException as e:
                refused += 1
                failed.append(i)
                log.warning("member %d acknowledge failed: %s", self._member_id, e)
        sent = [i for i in cmd.indices if i not in failed] if failed else cmd.indices
        self._sent.append((cmd.batch.records, sent))
        return refused

    def commit(self) -> int:
        sent, self._sent = self._sent, []
        try:
            if self._async:
                self._consumer.commit_async()
                return self._take_refused()
            results = self._consumer.commit_sync()
        except KafkaException as e:
            log.warning("member %d commit failed: %s", self._member_id, e)
            return max(1, sum(len(indices) for _, indices in sent))  # none of them reached the broker
        refused = 0
        for tp, err in results.items():
            if err is not None:
                refused += max(1, _sent_to(sent, tp.topic, tp.partition))  # the partition's, all of them
                log.warning(
                    "member %d: acknowledgements on %s/%s failed: %s", self._member_id, tp.topic, tp.partition, err
                )
        return refused

    def close(self) -> None:
        self._consumer.close()  # commits pending acknowledgements and leaves the group

    def _on_commit(self, offsets: dict[TopicPartition, set[int]], error: KafkaException | None) -> None:
        if error is None:
            return
        self._refused_later += max(1, sum(len(acknowledged) for acknowledged in offsets.values()))
        where = ", ".join(f"{tp.topic}/{tp.partition}" for tp in offsets) or "?"
        log.warning("member %d: acknowledgements on %s failed: %s", self._member_id, where, error)

    def _take_refused(self) -> int:
        refused, self._refused_later = self._refused_later, 0
        return refused


def _sent_to(sent: Sequence[tuple[Sequence[Message], Sequence[int]]], topic: str | None, partition: int | None) -> int:
    """How many of the acknowledgements `sent` went to one partition (read only when the broker refused it)."""
    return sum(
        1
        for records, indices in sent
        for i in indices
        if records[i].topic() == topic and (records[i].partition() or 0) == (partition or 0)
    )
