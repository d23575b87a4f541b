"""Dead letters handed to the broker: each record REJECTed at once, copied by the broker to the share
group's dead-letter topic (`dead_letter.sink = "broker_topic"`, KIP-1191, brokers 4.4+).

No table is written. The broker archives a REJECTed record and copies it to the group's
`errors.deadletterqueue.topic.name` (`kafka.broker_dead_letter_topic`, set on the group and checked at
start, `sharelake.consume.share.broker_dead_letter_topic`: the topic exists, accepts share-group dead letters, and
its name has the broker's prefix), with its `__dlq.errors.*` headers and, with
`kafka.broker_dead_letter_copy_record`, its key and value. The topic carries no error class: each
record's class and message are one line of the job's log, written before its REJECT.

The proof its REJECTs rest on is a `BrokerCustody`, not a commit: the record stays in the broker's
custody (the source topic until the REJECT reaches it, the dead-letter topic after), the same
trade the broker's dead-letter topic makes for every archived record. Nothing is parked here that
could be found again, so `contains_many` is always false and a redelivered record is judged afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql import SparkSession

from sharelake.acknowledge.proof import BrokerCustody
from sharelake.config.routes import Routes
from sharelake.config.settings import SharelakeConfig
from sharelake.formats.base import BadRecord
from sharelake.sink.dedup.dedup_table import DedupTable
from sharelake.sink.delta.writer_lease import LeaseCheck
from sharelake.table.location import TableLocation
from sharelake.table.offset_ranges import PartitionKey

log = logging.getLogger(__name__)


class BrokerTopicDeadLetters:
    """Every bad record logged with its class, then REJECTed into the broker's dead-letter topic."""

    name: ClassVar[str] = "broker_topic"
    writes_table: ClassVar[bool] = False
    kept: ClassVar[str] = "in kafka.broker_dead_letter_topic, not a table; replay them with --from-broker-topic"

    def __init__(self, topic: str):
        self.topic = topic
        self._custody = BrokerCustody._mint(topic)

    @classmethod
    def open(
        cls, spark: SparkSession, cfg: SharelakeConfig, routes: Routes, checks: Mapping[TableLocation, LeaseCheck]
    ) -> BrokerTopicDeadLetters:
        """The share group's broker-side dead-letter topic (checked at start with the group's settings)."""
        assert cfg.kafka.broker_dead_letter_topic is not None, "the config's validator: the sink names its topic"
        return cls(cfg.kafka.broker_dead_letter_topic)

    def named(self) -> str:
        return f"the broker's topic {self.topic}"

    def describe(self) -> str:
        return f"to the broker's topic {self.topic} (REJECTed; each record's error class in this log)"

    def tables(self) -> list[DedupTable]:
        return []

    def refresh(self) -> None:
        pass  # nothing kept here to learn about

    def contains_many(self, key: PartitionKey, offsets: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        return np.zeros(len(offsets), dtype=np.bool_)

    def proof_of_presence(self) -> BrokerCustody:
        return self._custody

    def park(self, records: pa.Table, verdicts: Sequence[BadRecord], job: str, batch_id: int) -> BrokerCustody:
        where = zip(*(records.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True)
        for (topic, partition, offset), bad in zip(where, verdicts, strict=True):
            log.warning(
                "dead letter %s-%d@%d (%s) to the broker's topic %s: %s",
                topic,
                partition,
                offset,
                bad.error_class,
                self.topic,
                bad.message,
            )
        return self._custody

    def seen(self, records: Iterable[pa.Table], at: datetime) -> None:
        pass  # the topic's records say when the broker wrote them

    def repair_pending(self) -> None:
        pass  # no writes of ours to repair
