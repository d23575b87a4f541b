"""The share group's record locks per partition, which bound a drain (the report's share-group bound).

A share group lets at most `share.partition.max.record.locks` records of
one partition be acquired and undecided at a time; Sharelake (by default,
`kafka.partition_max_record_locks = "max"`) raises that group setting at start
to the broker's cap `group.share.max.partition.max.record.locks` (4000 on a stock broker, 10000 on
the embedded one), and holds each poll's locks for a whole cycle (acquire -> Delta commit ->
ACCEPT), so a run cannot exceed locks x partitions / the write time of that many records, whatever
the members and batch sizes. `max_record_locks` reads the cap from the broker (a stock broker's 4000
when it is not there, at most Kafka's 10000).
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

DEFAULT_LOCKS = 4000  # a stock broker's group.share.max.partition.max.record.locks
MAX_LOCKS = 10_000  # Kafka's bound on the group setting
LOCKS_KEYS = ("group.share.max.partition.max.record.locks",)


def max_record_locks(bootstrap: str, broker_id: str = "1") -> tuple[int, str]:
    """The broker's per-partition record-lock limit and where it came from."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, broker_id)]).values()
    entries = future.result(timeout=30)
    for key in LOCKS_KEYS:
        if key in entries and entries[key].value:
            cap = min(MAX_LOCKS, int(entries[key].value))
            return cap, f"broker config {key} (Sharelake raises the group to it)"
    return DEFAULT_LOCKS, "a stock broker's cap (not found in the broker's config)"
