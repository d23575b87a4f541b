"""The dead-letter sink types by their `dead_letter.sink` name, and the one place the sink a config asks for is
opened.

A new sink is its own module (a `DeadLetterSink` type, `sharelake.sink.dead_letter.sinks`, declaring what it
needs: its name, whether it writes the dead-letter table, where its dead letters are kept, how it is opened),
its config value (`DeadLetterConfig.sink`; with `TABLE_SINKS` when it writes the table), and one entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from pyspark.sql import SparkSession

from sharelake.config.routes import Routes
from sharelake.config.settings import SharelakeConfig
from sharelake.sink.dead_letter.broker_topic import BrokerTopicDeadLetters
from sharelake.sink.dead_letter.sinks import DeadLetterSink, DeltaDeadLetters
from sharelake.sink.delta.writer_lease import LeaseCheck
from sharelake.table.location import TableLocation

# every dead-letter sink type, one entry each
SINKS: Mapping[str, type[DeadLetterSink]] = MappingProxyType(
    {sink.name: sink for sink in (DeltaDeadLetters, BrokerTopicDeadLetters)}
)


def dead_letter_sink(cfg: SharelakeConfig) -> type[DeadLetterSink]:
    """The type of the dead-letter sink `cfg` asks for (`dead_letter.sink`)."""
    return SINKS[cfg.dead_letter.sink]


def open_dead_letters(
    spark: SparkSession,
    cfg: SharelakeConfig,
    routes: Routes,
    lease_checks: Mapping[TableLocation, LeaseCheck] | None = None,
) -> DeadLetterSink:
    """The dead-letter sink of `cfg` (`dead_letter.sink`), ready to park; `lease_checks`: the writer
    lease check of each table that has one, run before every commit."""
    return dead_letter_sink(cfg).open(spark, cfg, routes, lease_checks or {})
