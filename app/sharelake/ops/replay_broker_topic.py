"""Re-publishes the records of the share group's broker-side dead-letter topic to their source topics.

The topic is
`kafka.broker_dead_letter_topic` (KIP-1191, sharelake.consume.share.broker_dead_letter_topic). A consumer group
of the replay's own (`<group_id>.broker-dlq-replay`) reads it from where the last replay stopped to
its end at start, and keeps the records the broker wrote for this share group (header
`__dlq.errors.group`), each origin once: the broker's write is not atomic with the archive, so the
topic may hold a record twice. Each goes back to its source topic (`__dlq.errors.topic`) or
`to_topic`, with a `sharelake.replay_of` header: the original record read back from the source
while the source still holds it (key, value and headers), else the broker's copy (key and value,
when `errors.deadletterqueue.copy.record.enable` was on). Only after every delivery are the replay
group's offsets committed: run twice, the second run publishes nothing; a crash in between leaves
them uncommitted and the next run publishes those records again (at least once, never lost).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, Message, TopicPartition

from sharelake.config.settings import SharelakeConfig
from sharelake.consume.share.broker_dead_letter_topic import HEADER_PREFIX, ArchivedRecord
from sharelake.failures.errors import ConfigError
from sharelake.ops.replay import ReplayError, ReplayResult, Republisher

log = logging.getLogger(__name__)

GROUP_SUFFIX = ".broker-dlq-replay"
TIMEOUT_S = 60.0

Headers = list[tuple[str, str | bytes | None]]


@dataclass(frozen=True)
class Republish:
    """One record to publish again: where it came from and its bytes."""

    origin: ArchivedRecord
    key: bytes | None
    value: bytes | None
    headers: Headers


def replay_broker_dead_letters(cfg: SharelakeConfig, to_topic: str | None = None) -> ReplayResult:
    k = cfg.kafka
    name = k.broker_dead_letter_topic
    if name is None:
        raise ConfigError(
            "kafka.broker_dead_letter_topic is not set: name the share group's broker-side dead-letter topic to "
            "replay it (without --from-broker-topic the replay reads the dead-letter table)"
        )
    base = k.client_config()
    reader = Consumer(
        {**base, "group.id": k.group_id + GROUP_SUFFIX, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    try:
        archived, ends = _read_to_end(reader, name, k.group_id)
        records, unrecoverable = _with_bytes(base, archived)
        published = _publish(cfg, records, to_topic)
        if ends:
            reader.commit(offsets=ends, asynchronous=False)
    finally:
        reader.close()
    if unrecoverable:
        first = unrecoverable[0]
        log.warning(
            "%d archived records could not be replayed: the source topic no longer holds them (retention) and the "
            "broker copied no bytes (errors.deadletterqueue.copy.record.enable was off); first: %s/%d/%d",
            len(unrecoverable),
            first.topic,
            first.partition,
            first.offset,
        )
    topics = tuple(sorted({to_topic or r.origin.topic for r in records}))
    log.info("replayed %d records of broker dead-letter topic %s to %s", published, name, ", ".join(topics) or "-")
    return ReplayResult(published, topics)


def _read_to_end(
    reader: Consumer, name: str, group: str
) -> tuple[list[tuple[ArchivedRecord, Message]], list[TopicPartition]]:
    """This group's records from the replay group's committed offsets to the topic's end at start,
    each origin once; and the offsets to commit once they are published."""
    metadata = reader.list_topics(name, timeout=TIMEOUT_S).topics.get(name)
    if metadata is None or metadata.error is not None:
        raise ConfigError(f"kafka.broker_dead_letter_topic = {name!r}: no such topic; nothing was ever archived there")
    partitions = [TopicPartition(name, p) for p in sorted(metadata.partitions)]
    marks = {tp.partition: reader.get_watermark_offsets(tp, timeout=TIMEOUT_S) for tp in partitions}
    ends = {p: high for p, (_, high) in marks.items()}
    # from the last replay's committed offset; never committed (negative): from the oldest record kept
    starts = {tp.partition: max(tp.offset, marks[tp.partition][0]) for tp in reader.committed(partitions, TIMEOUT_S)}
    todo = {p for p, start in starts.items() if start < ends[p]}
    reader.assign([TopicPartition(name, p, starts[p]) for p in sorted(todo)])
    seen: set[tuple[str, int, int]] = set()
    kept: list[tuple[ArchivedRecord, Message]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while todo:
        if time.monotonic() > deadline:
            raise ReplayError(f"reading {name} stalled before its end; nothing was published: run the replay again")
        for msg in reader.consume(500, 1.0):
            if msg.error() is not None:
                continue
            partition, offset = msg.partition(), msg.offset()
            if partition is None or offset is None or partition not in todo or offset >= ends[partition]:
                continue
            if offset + 1 >= ends[partition]:
                todo.discard(partition)
            origin = ArchivedRecord.from_headers(_headers(msg))
            if origin is None or origin.group != group:
                continue  # not written by the broker for this share group
            where = (origin.topic, origin.partition, origin.offset)
            if where not in seen:
                seen.add(where)
                kept.append((origin, msg))
    return kept, [TopicPartition(name, p, end) for p, end in ends.items()]


def _with_bytes(
    base: dict[str, object], archived: list[tuple[ArchivedRecord, Message]]
) -> tuple[list[Republish], list[ArchivedRecord]]:
    """Each record's bytes: the original from its source topic while it is there, else the broker's copy."""
    source = Consumer({**base, "group.id": "sharelake-replay-source", "enable.auto.commit": False})
    records: list[Republish] = []
    lost: list[ArchivedRecord] = []
    try:
        for origin, copy in archived:
            original = _original(source, origin)
            if original is not None:
                records.append(Republish(origin, original.key(), original.value(), _headers(original)))
            elif copy.key() is not None or copy.value() is not None:
                own = [(h, v) for h, v in _headers(copy) if not h.startswith(HEADER_PREFIX)]
                records.append(Republish(origin, copy.key(), copy.value(), own))
            else:
                lost.append(origin)
    finally:
        source.close()
    return records, lost


def _headers(msg: Message) -> Headers:
    found = msg.headers() or []
    return list(found.items()) if isinstance(found, dict) else list(found)


def _original(source: Consumer, origin: ArchivedRecord) -> Message | None:
    """The record at the origin's offset, if the source topic still holds it."""
    tp = TopicPartition(origin.topic, origin.partition, origin.offset)
    low, high = source.get_watermark_offsets(tp, timeout=TIMEOUT_S)
    if not low <= origin.offset < high:
        return None
    source.assign([tp])
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        msg = source.poll(1.0)
        if msg is None or msg.error() is not None or msg.partition() != origin.partition:
            continue
        return msg if msg.offset() == origin.offset else None  # a compacted topic may have dropped it
    raise ReplayError(
        f"reading {origin.topic}/{origin.partition}/{origin.offset} back timed out; nothing was published"
    )


def _publish(cfg: SharelakeConfig, records: list[Republish], to_topic: str | None) -> int:
    producer = Republisher(cfg)
    for r in records:
        o = r.origin
        producer.send(to_topic or o.topic, r.key, r.value, r.headers, (o.topic, o.partition, o.offset))
    producer.finish("the broker dead-letter topic's replay offsets were not committed")
    return len(records)
