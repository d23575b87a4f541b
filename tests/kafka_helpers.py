"""Test helpers that talk to the real broker the way a user would check it."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import ShareConsumer

from devkit.sample_data import produce_records
from sharelake.consume.share.group_settings import apply_group_settings
from sharelake.testing.kafka_broker import KafkaBrokers


def share_receive(
    broker: KafkaBrokers,
    topic: str,
    group: str,
    *,
    seconds: float,
    expect: int | None = None,
    earliest: bool = False,
    delivery_counts: dict[tuple[int, int], int] | None = None,
    until: tuple[int, int] | None = None,
    linger_s: float = 0.0,
) -> list[tuple[int, int]]:
    """What a fresh share consumer in `group` receives within `seconds` (ACCEPTing it all).

    Stops early once `expect` records arrived, or `linger_s` after the record `until`
    (partition, offset) arrived. Returns (partition, offset) pairs; each record's delivery count
    goes into `delivery_counts` when given.
    """
    if earliest:
        apply_group_settings(broker.admin(), group, {"share.auto.offset.reset": "earliest"})
    consumer = ShareConsumer({**broker.client_settings, "group.id": group, "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and (expect is None or len(got) < expect):
            for m in consumer.poll(0.5):
                if m.error() is None:
                    got.append((int(m.partition() or 0), int(m.offset() or 0)))
                    if got[-1] == until:
                        deadline = min(deadline, time.monotonic() + linger_s)
                    if delivery_counts is not None:
                        delivery_counts[got[-1]] = int(m.delivery_count() or 0)
                    consumer.acknowledge(m)
            consumer.commit_sync()
    finally:
        consumer.close()
    return got


def nothing_left(broker: KafkaBrokers, topic: str, group: str, *, seconds: float = 30, linger_s: float = 2.0) -> bool:
    """Whether `group` has nothing left to deliver on `topic`, proven with a sentinel.

    An empty poll would also pass when the consumer never got an assignment, so one sentinel
    record is produced now and a fresh member of `group` must receive exactly it: the sentinel
    and nothing else, within `seconds` (and `linger_s` more, for anything behind it). Everything
    received is ACCEPTed, the sentinel included, so the group stays drained.
    """
    key = f"sentinel-{uuid.uuid4().hex}".encode()
    client = {k: str(v) for k, v in broker.client_settings.items()}
    sentinel = produce_records(broker.bootstrap, topic, [(key, b"{}")], client=client)[0]
    want = (sentinel.partition, sentinel.offset)
    got = share_receive(broker, topic, group, seconds=seconds, until=want, linger_s=linger_s)
    if got != [want]:
        print(f"nothing_left: expected only the sentinel {want}, got {len(got)} records: {got[:10]}")
    return got == [want]
