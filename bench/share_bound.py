"""The share-group bound on throughput: in-flight record locks per partition / batch cycle time.

Called by `bench.run`. The broker lets at most `group.share.partition.max.record.locks` records
of one partition be acquired and undecided at a time (2000 by default), and Sharelake holds each
poll's locks for a whole cycle (acquire -> Delta commit -> ACCEPT), so a run cannot exceed
locks x partitions / cycle seconds, whatever the members and batch sizes.
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

DEFAULT_LOCKS = 2000
LOCKS_KEYS = ("group.share.partition.max.record.locks", "share.partition.max.record.locks")


def max_record_locks(bootstrap: str, broker_id: str = "1") -> tuple[int, str]:
    """The broker's per-partition record-lock limit and where it came from."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, broker_id)]).values()
    entries = future.result(timeout=30)
    for key in LOCKS_KEYS:
        if key in entries and entries[key].value:
            return int(entries[key].value), f"broker config {key}"
    return DEFAULT_LOCKS, "Kafka's documented default (not found in the broker's config)"


def bound(locks: int, partitions: int, cycle_s: float) -> float:
    return locks * partitions / cycle_s if cycle_s > 0 else float("nan")
