"""The dead-letter sink a config asks for (`dead_letter.sink`): one builder per kind, listed once."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyspark.sql import SparkSession

from sharelake.config.routes import Routes
from sharelake.config.settings import SharelakeConfig
from sharelake.sink.dead_letter.broker_topic import BrokerTopicDeadLetters
from sharelake.sink.dead_letter.sinks import DeadLetterSink, DeltaDeadLetters, dead_letter_table
from sharelake.sink.delta.writer_lease import LeaseCheck
from sharelake.table.location import TableLocation

Builder = Callable[[SparkSession, SharelakeConfig, Routes, Mapping[TableLocation, LeaseCheck]], DeadLetterSink]


def _table(
    spark: SparkSession, cfg: SharelakeConfig, routes: Routes, checks: Mapping[TableLocation, LeaseCheck]
) -> DeadLetterSink:
    """The Delta dead-letter table of `routes`, its dedup cache loaded from its recent commits."""
    assert routes.dead_letter is not None, 'resolve_routes: dead_letter.sink = "table" has its table'
    opened = dead_letter_table(
        spark,
        routes.dead_letter,
        checkpoint_every=cfg.delta.checkpoint_interval,
        lookback_commits=cfg.delta.dedup_lookback_commits,
        log_retention=cfg.delta.log_retention,
        before_commit=checks.get(routes.dead_letter),
    )
    opened.table.load()
    return DeltaDeadLetters(opened.table, opened.frames)


def _broker_topic(
    spark: SparkSession, cfg: SharelakeConfig, routes: Routes, checks: Mapping[TableLocation, LeaseCheck]
) -> DeadLetterSink:
    """The share group's broker-side dead-letter topic (checked at start with the group's settings)."""
    assert cfg.kafka.broker_dead_letter_topic is not None, "the config's validator: the sink names its topic"
    return BrokerTopicDeadLetters(cfg.kafka.broker_dead_letter_topic)


SINKS: dict[str, Builder] = {"table": _table, "broker_topic": _broker_topic}


def open_dead_letters(
    spark: SparkSession,
    cfg: SharelakeConfig,
    routes: Routes,
    lease_checks: Mapping[TableLocation, LeaseCheck] | None = None,
) -> DeadLetterSink:
    """The dead-letter sink of `cfg` (`dead_letter.sink`), ready to park; `lease_checks`: the writer
    lease check of each table that has one, run before every commit."""
    return SINKS[cfg.dead_letter.sink](spark, cfg, routes, lease_checks or {})
