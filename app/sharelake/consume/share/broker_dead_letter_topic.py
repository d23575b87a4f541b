"""The share group's broker-side dead-letter topic (KIP-1191, Kafka 4.4): its start-up check and its records' form.

The broker writes to the topic on its own and, when it cannot (no such topic, the topic does not accept dead
letters, the name lacks the broker's required prefix), it logs an error and archives the record anyway: a client
never hears of it. So `check_broker_dead_letter_topic` checks each of those at start and stops the job with one
line naming the fix (`ConfigError`). It reads the group's settings as they were before the job changes them (a
broker before 4.4 lists no `DLQ_TOPIC`, and would refuse it), so it runs before the group's settings are applied.
A missing topic is created as the broker would create it, accepting dead letters (`TOPIC_ACCEPTS`), unless the
broker creates such topics itself or the check must change nothing (`create=False`). `ArchivedRecord.from_headers`
reads where a record of the topic came from, and why the broker archived it, from its `__dlq.errors.*` headers.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, NewTopic, ResourceType

from sharelake.config.settings import KafkaConfig
from sharelake.consume.share.group_settings import DLQ_TOPIC
from sharelake.failures.errors import ConfigError, one_line

TOPIC_ACCEPTS = "errors.deadletterqueue.group.enable"  # topic config: share groups may write dead letters here
BROKER_PREFIX = "errors.deadletterqueue.topic.name.prefix"  # broker config: the name every such topic starts with
BROKER_AUTO_CREATE = "errors.deadletterqueue.auto.create.topics.enable"  # broker config
KEY = "kafka.broker_dead_letter_topic"
TIMEOUT_S = 30.0

# The headers the broker puts on each record it writes there (kafka-server's ShareGroupDLQStateManager)
HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
HEADER_PREFIX = "__dlq.errors."


@dataclass(frozen=True)
class ArchivedRecord:
    """Where a record in the broker's dead-letter topic came from, and why the broker archived it."""

    topic: str
    partition: int
    offset: int
    group: str
    delivery_count: int
    message: str

    @classmethod
    def from_headers(cls, headers: list[tuple[str, str | bytes | None]] | None) -> ArchivedRecord | None:
        """The broker's `__dlq.errors.*` headers; None when a record lacks them (not written by a broker)."""
        seen = {k: _text(v) for k, v in headers or [] if k.startswith(HEADER_PREFIX)}
        try:
            return cls(
                topic=seen[HEADER_TOPIC],
                partition=int(seen[HEADER_PARTITION]),
                offset=int(seen[HEADER_OFFSET]),
                group=seen.get(HEADER_GROUP, ""),
                delivery_count=int(seen.get(HEADER_DELIVERY_COUNT) or 0),
                message=seen.get(HEADER_MESSAGE, ""),
            )
        except (KeyError, ValueError):
            return None


def _text(value: str | bytes | None) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")


def check_broker_dead_letter_topic(
    admin: AdminClient,
    k: KafkaConfig,
    metadata: ClusterMetadata,
    group_settings: dict[str, str],
    broker: dict[str, str],
    create: bool = True,
) -> None:
    """The broker supports it, the name is one the broker writes to, and the topic accepts dead letters.

    `group_settings`: the group's described configs, before the job changes them (a broker before
    4.4 does not list DLQ_TOPIC); `broker`: a broker's configs, empty when unreadable. A missing
    topic is created with TOPIC_ACCEPTS on (the job's principal needs CREATE on it), unless the
    broker creates such topics itself or `create` is off (`sharelake check`).
    """
    name = k.broker_dead_letter_topic
    assert name is not None
    if DLQ_TOPIC not in group_settings:
        raise ConfigError(
            f"{KEY} = {name!r}: the broker at {k.bootstrap_servers} runs Kafka older than 4.4 (its share groups "
            f"have no {DLQ_TOPIC}, KIP-1191); upgrade the brokers to 4.4 or later, or unset the key (Sharelake's "
            "dead-letter table works on every broker)"
        )
    prefix = broker.get(BROKER_PREFIX, "dlq.")
    if not name.startswith(prefix):
        raise ConfigError(
            f"{KEY} = {name!r}: the broker writes share-group dead letters only to topics whose name starts with "
            f"{prefix!r} (its {BROKER_PREFIX}); name it {prefix}{name}, or change the broker setting"
        )
    if name not in metadata.topics:
        if broker.get(BROKER_AUTO_CREATE) == "true":
            return  # the broker creates it, marked, on the first dead letter
        if create:
            _create(admin, k, name)
        return
    accepts = _topic_setting(admin, k, name, TOPIC_ACCEPTS)
    if accepts != "true":
        raise ConfigError(
            f"{KEY} = {name!r}: the topic does not accept share-group dead letters ({TOPIC_ACCEPTS} is "
            f"{accepts or 'false'}), so the broker would drop them; set it: kafka-configs.sh --alter --entity-type "
            f"topics --entity-name {name} --add-config {TOPIC_ACCEPTS}=true"
        )


def _topic_setting(admin: AdminClient, k: KafkaConfig, name: str, setting: str) -> str | None:
    try:
        (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)]).values()
        entry = future.result(timeout=TIMEOUT_S).get(setting)
    except KafkaException as e:
        user = k.client.get("sasl.username", "the job's principal")
        raise ConfigError(
            f"{KEY} = {name!r}: could not read the topic's {setting} ({one_line(e, 160)}); grant {user} "
            "DESCRIBE_CONFIGS on the topic (docs/security.md)"
        ) from None
    return None if entry is None else entry.value


def _create(admin: AdminClient, k: KafkaConfig, name: str) -> None:
    """Create the topic as the broker's own DLQ creation would: broker-default partitions and replicas."""
    topic = NewTopic(name, num_partitions=-1, replication_factor=-1, config={TOPIC_ACCEPTS: "true"})
    try:
        admin.create_topics([topic], operation_timeout=TIMEOUT_S)[name].result(timeout=TIMEOUT_S * 2)
    except KafkaException as e:
        error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if error is not None and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return  # another job starting on the same group made it a moment ago
        user = k.client.get("sasl.username", "the job's principal")
        raise ConfigError(
            f"{KEY} = {name!r}: no such topic, and creating it failed ({one_line(e, 160)}); create it with "
            f"{TOPIC_ACCEPTS}=true, or grant {user} CREATE on it (docs/security.md)"
        ) from None
