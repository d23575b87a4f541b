"""Reads one group's state on the broker, through its group type, with an admin client of its own."""

from __future__ import annotations

from pyspark.sql import SparkSession

from sharelake.config.settings import KafkaConfig
from sharelake.consume.group_admin import GroupAdmin
from sharelake.consume.group_type import GroupState, GroupType


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
