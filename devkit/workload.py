"""The benchmark workload: ~250-byte JSON records with a declared schema, produced as fast as the
broker takes them (a backlog) or at a fixed rate (the latency phase's offered load).

Unlike `devkit.sample_data`, nothing is kept per record, so millions of
records cost no memory; the broker's delivery reports are only counted.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer

# The value's fields as a Spark DDL string (Sharelake's payload.schema, the Spark job's from_json)
SCHEMA_DDL = "id long, user string, ts string, amount double, kind string, tags array<string>, note string"
VALUE_BYTES = 250  # every value is padded to this length with its `note`
KINDS = ("view", "click", "buy", "refund")
TAGS = ("mobile", "web", "promo", "eu", "us", "returning", "new")
_EPOCH_2026 = 1_767_225_600  # the `ts` field counts seconds from 2026-01-01T00:00:00Z


def record_value(i: int) -> bytes:
    """Record `i`'s JSON value, exactly VALUE_BYTES long (the `note` pads it)."""
    fields = {
        "id": i,
        "user": f"user-{i % 9973:05d}",
        "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_EPOCH_2026 + i)),
        "amount": round((i * 7919) % 1_000_000 / 100, 2),
        "kind": KINDS[i % len(KINDS)],
        "tags": [TAGS[i % 7], TAGS[(i // 7) % 7]],
        "note": "",
    }
    bare = json.dumps(fields, separators=(",", ":"))
    pad = max(0, VALUE_BYTES - len(bare))
    return bare.replace('"note":""', '"note":"' + "x" * pad + '"').encode()


def record_key(i: int) -> bytes:
    return f"k-{i}".encode()


@dataclass
class ProduceStats:
    records: int = 0
    failures: int = 0
    seconds: float = 0.0
    first_error: str = ""


class _Counter:
    """Counts delivery reports (called from the producer's poll, in the producing thread)."""

    def __init__(self, stats: ProduceStats) -> None:
        self.stats = stats

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.stats.records += 1
        else:
            self.stats.failures += 1
            self.stats.first_error = self.stats.first_error or str(err)


def _producer(bootstrap: str, batch_bytes: int) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": batch_bytes,
            "enable.idempotence": True,
            "queue.buffering.max.messages": 500_000,
        }
    )


def user_key(i: int) -> bytes:
    """Record `i` keyed by its `user` (the upsert bench's key: a user's records share a partition)."""
    return f"user-{i % 9973:05d}".encode()


def _send(
    producer: Producer,
    topic: str,
    i: int,
    on_delivery: _Counter,
    value_of: Callable[[int], bytes] = record_value,
    key_of: Callable[[int], bytes] = record_key,
) -> None:
    while True:
        try:
            producer.produce(topic, key=key_of(i), value=value_of(i), on_delivery=on_delivery)
            return
        except BufferError:
            producer.poll(0.05)


def produce_backlog(
    bootstrap: str,
    topic: str,
    count: int,
    batch_bytes: int = 16384,
    start: int = 0,
    value_of: Callable[[int], bytes] = record_value,
    key_of: Callable[[int], bytes] = record_key,
) -> ProduceStats:
    """Produce records start..start+count-1 as fast as possible and wait until all are delivered.

    `value_of(i)` is record i's value: the JSON one by default (`bench.avro_workload` passes its Avro
    twin); `key_of(i)` its key (`k-<i>`; `bench.upserts` keys by user).
    """
    stats = ProduceStats()
    producer, on_delivery = _producer(bootstrap, batch_bytes), _Counter(stats)
    t0 = time.monotonic()
    for i in range(start, start + count):
        _send(producer, topic, i, on_delivery, value_of, key_of)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    stats.seconds = time.monotonic() - t0
    if stats.failures or remaining or stats.records != count:
        raise RuntimeError(
            f"producing {count} records to {topic} failed: {stats.failures} errors ({stats.first_error}), "
            f"{remaining} undelivered"
        )
    return stats


class RateProducer(threading.Thread):
    """Produces ids first_id, first_id + 1, ... at `rate` records/s in a background thread until `stop()`.

    Each record's Kafka timestamp is its produce() call (CreateTime), which the latency phase
    compares with the Delta commit that holds the row. `sent` counts the records handed to the
    client so far; `stats.records` counts the delivered ones (final once the thread has ended).
    `value_of(i)` / `key_of(i)` are record i's value and key (default: the workload's JSON, `k-<i>`;
    `bench.poison_storm` passes values of which every tenth is malformed).
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rate: int,
        batch_bytes: int = 16384,
        first_id: int = 0,
        value_of: Callable[[int], bytes] = record_value,
        key_of: Callable[[int], bytes] = record_key,
    ):
        super().__init__(name="bench-rate-producer", daemon=True)
        self.topic, self.rate, self.first_id = topic, rate, first_id
        self.value_of, self.key_of = value_of, key_of
        self.stats = ProduceStats()
        self.sent = 0
        self.lag_s = 0.0  # how far the producer fell behind its schedule at most
        self._producer = _producer(bootstrap, batch_bytes)
        self._halt = threading.Event()
        self.failure: BaseException | None = None

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            self.failure = e

    def _run(self) -> None:
        on_delivery = _Counter(self.stats)
        t0 = time.monotonic()
        while not self._halt.is_set():
            due = t0 + self.sent / self.rate
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            else:
                self.lag_s = max(self.lag_s, now - due)
            _send(self._producer, self.topic, self.first_id + self.sent, on_delivery, self.value_of, self.key_of)
            self._producer.poll(0)
            self.sent += 1
        self._producer.flush(60)
        self.stats.seconds = time.monotonic() - t0
