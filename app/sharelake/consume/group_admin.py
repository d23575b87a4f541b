"""One admin interface over the Kafka clients a group's state is read with, each made on first use.

- `GroupAdmin.client`: confluent-kafka's `AdminClient` (librdkafka, the job's `kafka.client`
  settings as they are): metadata, end offsets, a consumer group's members.
- `GroupAdmin.committed`: a consumer group's committed offsets, through a librdkafka `Consumer` of
  the group that never subscribes (so never joins it). Not `AdminClient.list_consumer_group_offsets`:
  in confluent-kafka 2.16.1 that call kills the process (SIGSEGV) when the group's coordinator is
  not ready yet (seen against a broker just started); `Consumer.committed` retries instead.
- `GroupAdmin.java`: the Kafka Java client's `Admin` in the Spark driver's JVM (`sharelake.consume.java_admin`
  maps the settings), for what librdkafka has no admin call for: a share group's members and
  offsets (`describeShareGroups`, `listShareGroupOffsets`; confluent-kafka 2.16 has neither).

A group type's `read_state` (`sharelake.consume.group_type`) takes a `GroupAdmin` and uses the client it needs, so a
consumer group's state needs no JVM and a share group's never opens the librdkafka client. A `GroupAdmin` is not
thread-safe: one per reading thread. `close()` closes whichever clients were made.

The start-up checks do not use it: they need an `AdminClient` made with the client-error callback they read
security failures from.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from sharelake.config.settings import KafkaConfig
from sharelake.consume.java_admin import ADMIN_TIMEOUT_MS, close_admin, create_admin

ADMIN_TIMEOUT_S = ADMIN_TIMEOUT_MS / 1000


class GroupAdmin:
    """The admin clients of one reader; not thread-safe (one per thread)."""

    def __init__(self, kafka: KafkaConfig, spark: SparkSession | None = None):
        self._kafka = kafka
        self._spark = spark
        self._client: AdminClient | None = None
        self._java: Any = None
        self._offsets: Consumer | None = None

    @property
    def client(self) -> AdminClient:
        """confluent-kafka's AdminClient with the job's librdkafka settings."""
        if self._client is None:
            self._client = AdminClient(self._kafka.client_config())
        return self._client

    def committed(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The consumer group `kafka.group_id`'s committed offsets of `partitions` (negative: none)."""
        if self._offsets is None:
            self._offsets = Consumer(
                {**self._kafka.client_config(), "group.id": self._kafka.group_id, "enable.auto.commit": False}
            )
        return list(self._offsets.committed(partitions, timeout=ADMIN_TIMEOUT_S))

    @property
    def java(self) -> Any:
        """The Java `org.apache.kafka.clients.admin.Admin` (a py4j proxy) in the driver's JVM."""
        if self._java is None:
            if self._spark is None:
                raise RuntimeError("the Java admin client needs the Spark session's JVM")
            self._java = create_admin(self._spark, self._kafka.client_config())
        return self._java

    @property
    def jvm(self) -> Any:
        """The driver's JVM view (py4j), for the Java admin's arguments."""
        if self._spark is None:
            raise RuntimeError("the Java admin client needs the Spark session's JVM")
        jvm = self._spark.sparkContext._jvm
        assert jvm is not None
        return jvm

    def close(self) -> None:
        if self._java is not None:
            java, self._java = self._java, None
            assert self._spark is not None
            close_admin(self._spark, java)
        if self._offsets is not None:
            offsets, self._offsets = self._offsets, None
            offsets.close()  # it never joined the group: leaves nothing, commits nothing
        self._client = None  # librdkafka's admin client has no close: dropped, it is destroyed

    def __enter__(self) -> GroupAdmin:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
