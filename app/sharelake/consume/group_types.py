"""The choice of the job's group type (`kafka.group_type`): the one module that imports both implementations.

`group_type` gives a consumer group's type or a share group's; a share group's consumers are made by the factory
it is given (a test's provokes faults with it). The seam's abstractions are in `sharelake.consume.group_type`;
`sharelake.consume.share.share_group` and `sharelake.consume.classic.consumer_group` import those, never each other
nor this module, so nothing imports back here and the graph has no cycle.
"""

from __future__ import annotations

from confluent_kafka import ShareConsumer

from sharelake.config.settings import KafkaConfig
from sharelake.consume.classic.consumer_group import ConsumerGroupType
from sharelake.consume.group_type import GroupType
from sharelake.consume.share.share_group import ShareConsumerFactory, ShareGroupType


def group_type(k: KafkaConfig, share_consumer: ShareConsumerFactory = ShareConsumer) -> GroupType:
    """The job's group type. `share_consumer` makes a share group's consumers (a test's factory
    provokes faults with it); a consumer group makes its own."""
    if k.group_type == "consumer":
        return ConsumerGroupType()
    return ShareGroupType(share_consumer)
