"""Reading a group's state on the broker (its members, each partition's offset and lag): the one place it is read.

The state is the group type's (`GroupType.read_state`, `sharelake.consume.group_type`), read through an admin of its
own (`sharelake.consume.group_admin.GroupAdmin`): a share group's through the Kafka Java Admin, a consumer group's
through librdkafka's. `read_group_state` reads it once (`sharelake status`), a broker that does not answer a
`ConfigError` of one line; a `GroupStateReader` reads it again at each `read()` (the job's lag gauge,
`sharelake.observe.group_lag`, on its timer), its admin's clients made on first use in the reading thread.
"""

from __future__ import annotations

from contextlib import closing

from confluent_kafka import KafkaException
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from sharelake.config.settings import KafkaConfig
from sharelake.consume.group_admin import GroupAdmin
from sharelake.consume.group_type import GroupState, GroupType
from sharelake.failures.errors import ConfigError, one_line


class GroupStateReader:
    """The group's state each `read()`; its admin's clients are made on first use, in the reading thread."""

    def __init__(self, group: GroupType, kafka: KafkaConfig, spark: SparkSession | None = None):
        self._group = group
        self._kafka = kafka
        self._admin = GroupAdmin(kafka, spark)

    def read(self) -> GroupState:
        return self._group.read_state(self._admin, self._kafka)

    def close(self) -> None:
        self._admin.close()


def read_group_state(group: GroupType, kafka: KafkaConfig, spark: SparkSession) -> GroupState:
    """The group's state now, read once. ConfigError (one line) when the group is of the other type or the broker
    does not answer."""
    try:
        with closing(GroupStateReader(group, kafka, spark)) as reader:  # closed inside: its failure is the read's
            return reader.read()
    except (Py4JJavaError, KafkaException) as e:
        cause = e.java_exception if isinstance(e, Py4JJavaError) else e
        raise ConfigError(
            f"the {group.noun} {kafka.group_id!r} could not be read from kafka.bootstrap_servers = "
            f"{kafka.bootstrap_servers} ({one_line(cause)}): check the broker answers and the kafka.client "
            "security settings"
        ) from None
