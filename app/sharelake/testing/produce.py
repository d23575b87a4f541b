"""Records produced to a test's broker, and what the broker acknowledged for each.

`produce_records` sends (key, value) pairs in order and returns one `Produced` per record with the
partition and offset from its delivery report, so a test compares a table with exactly what was
produced (`Produced` rows are what `chispa` compares the landed rows with).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer


@dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes | None  # None: a tombstone


def produce_records(
    bootstrap: str,
    topic: str,
    items: Iterable[tuple[bytes | None, bytes | None]],
    max_bytes: int = 1_000_000,
    client: dict[str, str] | None = None,
    rate: float | None = None,
) -> list[Produced]:
    """Produce (key, value) pairs in order and wait for all; a None value is a tombstone.

    `client`: extra librdkafka settings (a secured broker's security.protocol, sasl.*, ssl.*).
    `rate`: at most this many records/s, one producer throughout (records for a partition whose
    leader is away wait in the client while the others flow on); None: as fast as it takes them."""
    # batch.size as the Java producer's default (16 KiB, ~150 small records): the broker hands a
    # share consumer whole record batches, so this also sets how many records one poll returns
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 16384,
            "enable.idempotence": True,
            "message.max.bytes": max(max_bytes, 1_000_000),
            **(client or {}),
        }
    )
    produced: list[Produced] = []
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(err)
            return
        value = msg.value()
        produced.append(
            Produced(
                str(msg.topic()),
                int(msg.partition() or 0),
                int(msg.offset() or 0),
                bytes(msg.key() or b""),
                bytes(value) if value is not None else None,
            )
        )

    started = time.monotonic()
    for n, (key, value) in enumerate(items):
        if rate and n % 100 == 0 and (ahead := n / rate - (time.monotonic() - started)) > 0:
            time.sleep(ahead)
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    if failures or remaining:
        raise RuntimeError(f"produce failed: {len(failures)} errors ({failures[:1]}), {remaining} undelivered")
    return produced
