"""Test helpers that talk to the real broker the way a user would check it."""

from __future__ import annotations

import time

from confluent_kafka import ShareConsumer

from app.consume.group_settings import apply_group_settings
from app.embedded.kafka_broker import EmbeddedKafka


def share_receive(
    broker: EmbeddedKafka,
    topic: str,
    group: str,
    *,
    seconds: float,
    expect: int | None = None,
    earliest: bool = False,
    delivery_counts: dict[tuple[int, int], int] | None = None,
) -> list[tuple[int, int]]:
    """What a fresh share consumer in `group` receives within `seconds` (ACCEPTing it all).

    Stops early once `expect` records arrived. Returns (partition, offset) pairs; each record's
    delivery count goes into `delivery_counts` when given.
    """
    if earliest:
        apply_group_settings(broker.admin(), group, {"share.auto.offset.reset": "earliest"})
    consumer = ShareConsumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "share.acknowledgement.mode": "explicit"}
    )
    consumer.subscribe([topic])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and (expect is None or len(got) < expect):
            for m in consumer.poll(0.5):
                if m.error() is None:
                    got.append((int(m.partition() or 0), int(m.offset() or 0)))
                    if delivery_counts is not None:
                        delivery_counts[got[-1]] = int(m.delivery_count() or 0)
                    consumer.acknowledge(m)
            consumer.commit_sync()
    finally:
        consumer.close()
    return got
