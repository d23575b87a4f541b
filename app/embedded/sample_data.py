"""Sample records for the demo, the tests and the benchmark: JSON events with distinct keys.

Called by `jobs/demo.py`, the end-to-end tests and `bench/`. `produce_json_events` returns what
the broker acknowledged for each record (partition and offset from the delivery reports), so a
test can compare the Delta table with exactly what was produced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer


@dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes


def event_value(i: int) -> bytes:
    """About 100 bytes of JSON: {"id": i, "user": ..., "amount": ..., "kind": ...}."""
    return json.dumps(
        {
            "id": i,
            "user": f"user-{i % 997}",
            "amount": round((i * 7919) % 100000 / 100, 2),
            "kind": ("view", "click", "buy")[i % 3],
        },
        separators=(",", ":"),
    ).encode()


def produce_json_events(
    bootstrap: str, topic: str, count: int, start: int = 0, key_prefix: str = "k"
) -> list[Produced]:
    # batch.size as the Java producer's default (16 KiB, ~150 of these records): the broker hands a
    # share consumer whole record batches, so this also sets how many records one poll returns
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384, "enable.idempotence": True}
    )
    produced: list[Produced] = []
    failures: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(err)
            return
        produced.append(
            Produced(
                str(msg.topic()),
                int(msg.partition() or 0),
                int(msg.offset() or 0),
                bytes(msg.key() or b""),
                bytes(msg.value() or b""),
            )
        )

    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, key=f"{key_prefix}-{i}".encode(), value=event_value(i), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    if failures or remaining:
        raise RuntimeError(f"produce failed: {len(failures)} errors ({failures[:1]}), {remaining} undelivered")
    return produced
