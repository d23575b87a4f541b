"""Each group type says how long a poll may wait for its decisions: no broker, no Spark."""

from __future__ import annotations

from sharelake.acknowledge.window import DecisionWindow
from sharelake.config.settings import KafkaConfig
from sharelake.consume.classic.consumer_group import ConsumerGroupType
from sharelake.consume.share.share_group import ShareGroupType


def kafka(group_type: str, **client: object) -> KafkaConfig:
    return KafkaConfig.model_validate(
        {"bootstrap_servers": "b:9092", "topic": "t", "group_id": "g", "group_type": group_type, "client": client}
    )


def test_a_share_groups_window_is_its_record_lock() -> None:
    share = ShareGroupType()
    window = share.decision_window(kafka("share"), {"share.record.lock.duration.ms": "15000"})
    assert window == DecisionWindow(15.0, "record lock", "kafka.record_lock_duration_ms")
    assert share.decision_window(kafka("share"), {}).seconds == 30.0  # the broker's default


def test_a_consumer_groups_window_is_its_poll_interval_not_a_record_lock() -> None:
    """A consumer group's member polls again only once its poll is decided: librdkafka takes it out of
    the group after max.poll.interval.ms, which is what its batches are measured against (they once
    were against the share group's 30 s record lock, with record-lock warnings)."""
    consumer = ConsumerGroupType()
    settings = {"share.record.lock.duration.ms": "15000"}  # not a consumer group's
    window = consumer.decision_window(kafka("consumer"), settings)
    assert window == DecisionWindow(300.0, "max.poll.interval.ms", 'kafka.client."max.poll.interval.ms"')
    tuned = kafka("consumer", **{"max.poll.interval.ms": 60000})
    assert str(consumer.decision_window(tuned, {})) == "60.0s max.poll.interval.ms"
