"""What the broker says of itself at start, whichever the group type: one broker's configs, and the error codes
that mean the job's principal lacks an ACL."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

# the broker's answers that mean: the job's principal lacks an ACL
AUTHORIZATION = (
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
)


def read_broker_settings(admin: AdminClient, broker_id: int, timeout_s: float = 30) -> dict[str, str]:
    """One broker's configs; empty when they cannot be read (e.g. no DESCRIBE_CONFIGS on the cluster)."""
    try:
        (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker_id))]).values()
        entries = future.result(timeout=timeout_s)
    except KafkaException:
        return {}
    return {name: entry.value for name, entry in entries.items() if entry.value is not None}
