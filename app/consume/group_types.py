"""Chooses the job's group type (`kafka.group_type`): the one module that imports both implementations.

Called by `app.run.pipeline` (`sharelake ingest`, with the tests' share-consumer factory when one is
given), `app.commands.check` and `app.ops.group_status` (`sharelake status`). The seam's abstractions
are in `app.consume.group_client`; `app.consume.share_group` and `app.consume.consumer_group` import
only those, so nothing imports back here and the graph has no cycle.
"""

from __future__ import annotations

from confluent_kafka import ShareConsumer

from app.config.settings import KafkaConfig
from app.consume.consumer_group import ConsumerGroupType
from app.consume.group_client import GroupType
from app.consume.share_group import ShareConsumerFactory, ShareGroupType


def group_type(k: KafkaConfig, share_consumer: ShareConsumerFactory = ShareConsumer) -> GroupType:
    """The job's group type. `share_consumer` makes a share group's consumers (a test's factory
    provokes faults with it); a consumer group makes its own."""
    if k.group_type == "consumer":
        return ConsumerGroupType()
    return ShareGroupType(share_consumer)
