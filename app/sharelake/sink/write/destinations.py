"""Where a job's records land: one `Destination` per main table.

`open_destinations` builds them once, after the writer leases are held, from the config's routes, resolved at start
(`sharelake.config.routes.Routes`): one route with `kafka.topic`, one per table with `kafka.topics`. A
destination holds its topics, its table (a `DedupTable`, its writer given its lease check, its
catalog name and its layout when it is built; an existing table with another layout than the
config's stops the job here, `check_layout`), the builder of the frames written to it, its writer's
checkpointer, and its payload format, started (its schema checked, its registry reached). The
dead letters go elsewhere (`sharelake.sink.dead_letter.factory`). Each destination gets a table writer
(`sharelake.sink.batch.table_writer`): each micro-batch makes at most one commit per table, and each
table's records are decided on that table's commit alone. Every main table is opened through
`main_table`, the warm-up's and the tests' too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from sharelake.config.routes import Route, Routes
from sharelake.config.settings import SharelakeConfig
from sharelake.failures.dependency_wait import waiting_out_outages
from sharelake.failures.errors import ConfigError
from sharelake.formats import payload_format
from sharelake.formats.base import PayloadFormat
from sharelake.sink.dedup.dedup_table import DedupTable, OpenedTable, open_table
from sharelake.sink.delta.checkpointer import Checkpointer
from sharelake.sink.delta.frames import FrameBuilder
from sharelake.sink.delta.writer_lease import LeaseCheck
from sharelake.sink.write.append import Append
from sharelake.sink.write.mode_registry import write_mode
from sharelake.sink.write.write_mode import WriteMode
from sharelake.table.layout import TableLayout
from sharelake.table.location import TableLocation

MAIN_STAMP = "ingested_at"  # the main tables' write stamp (sharelake.table.columns.WRITE_FIELDS)


@dataclass(frozen=True)
class Destination:
    """A main table and the topics routed to it, with the format their values are read in, the
    builder of the frames written to it (on its writer's session) and its writer's checkpointer."""

    topics: tuple[str, ...]
    table: DedupTable
    format: PayloadFormat
    mode: WriteMode = field(default_factory=Append)  # how the table takes its records
    frames: FrameBuilder = field(kw_only=True)
    checkpointer: Checkpointer = field(kw_only=True)  # `wait_for_room`: until the table's next append may start

    @classmethod
    def of(
        cls, topics: tuple[str, ...], opened: OpenedTable, fmt: PayloadFormat, mode: WriteMode | None = None
    ) -> Destination:
        """The destination of `topics` on a table as `main_table` opened it (`mode` None: appends)."""
        mode = mode if mode is not None else Append()
        return cls(topics, opened.table, fmt, mode, frames=opened.frames, checkpointer=opened.checkpointer)


def main_table(
    spark: SparkSession,
    location: TableLocation,
    fmt: PayloadFormat,
    *,
    checkpoint_every: int,
    lookback_commits: int | None,
    prefix: str = "",
    name: str = "delta",
    log_retention: str | None = None,
    before_commit: LeaseCheck | None = None,
    layout: TableLayout | None = None,
    upserted: bool = False,
) -> OpenedTable:
    """A main table. `name` names its Delta writer's fault points (`before_delta_commit`, ...): the
    warm-up's tables take names of their own, since its commits run in committer threads, where
    `faults.suspended()` (per thread) does not reach. `before_commit`: its writer lease's check."""
    return open_table(
        spark,
        location,
        name,
        MAIN_STAMP,
        checkpoint_every=checkpoint_every,
        lookback_commits=lookback_commits,
        stats_columns=fmt.stats_columns(),
        prefix=prefix,
        log_retention=log_retention,
        before_commit=before_commit,
        register_as=location.name,  # a named table: entered in the catalog after a commit
        layout=layout,
        upserted=upserted,
    )


def counter_prefix(topic: str) -> str:
    """A routed table's counters are named after its (first) topic: `orders_rows_written`."""
    return re.sub(r"[^A-Za-z0-9_]", "_", topic) + "_"


def open_destinations(
    spark: SparkSession,
    cfg: SharelakeConfig,
    routes: Routes,
    lease_checks: Mapping[TableLocation, LeaseCheck] | None = None,
) -> list[Destination]:
    """Every destination of `routes` (its write mode built first: ConfigError when a mode does not take its
    route's payload envelope; formats started: ConfigError on a bad schema or registry settings; a
    registry that is down waited for up to `run.dependency_wait_s`), each table with its dedup cache
    loaded from the table's recent commits. `lease_checks`: the
    writer lease check of each table that has one (`sharelake.sink.delta.writer_lease.lease_checks`), run by
    its writer before every commit."""
    checks = lease_checks or {}
    routed = cfg.kafka.topics is not None
    lookback = cfg.delta.dedup_lookback_commits
    every = cfg.delta.checkpoint_interval
    destinations = []
    modes = [write_mode(route) for route in routes.main]  # a mode refusing its route's envelope: before any table
    for route, mode in zip(routes.main, modes, strict=True):
        check_layout(spark, route)
        fmt = payload_format(route.payload)
        waiting_out_outages(lambda: fmt.start(spark, route.location), cfg.run.dependency_wait_s)  # noqa: B023
        mode.check(spark, route.location, fmt)
        prefix = counter_prefix(route.topics[0]) if routed else ""
        main = main_table(
            spark,
            route.location,
            fmt,
            checkpoint_every=every,
            lookback_commits=lookback,
            prefix=prefix,
            log_retention=cfg.delta.log_retention,
            before_commit=checks.get(route.location),
            layout=route.layout,
            upserted=mode.merges_by_key,
        )
        destinations.append(Destination.of(route.topics, main, fmt, mode))
    for destination in destinations:
        destination.table.load()
    return destinations


def check_layout(spark: SparkSession, route: Route) -> None:
    """ConfigError (one line naming both layouts) when the route's table exists with another layout
    than its config asks for; a config that asks none takes the table's."""
    if not route.layout.chosen or not DeltaTable.isDeltaTable(spark, route.location.path):
        return
    held = TableLayout.of_table(spark, route.location.path)
    if route.layout.mismatch(held):
        raise ConfigError(
            f"{route.location.path} is {held.describe()}, but {route.layout_key}.partition_by / cluster_by / "
            f"generated_columns ask for {route.layout.describe()}: a table's layout is fixed when it is created; "
            "set those keys to match the table, or write to a new table"
        )
