"""A user's own pipeline run in a test: the config until drained, and what it left behind.

`run_until_drained` loads the user's config file with the test's overrides (the broker's address,
tables under the test's temporary folder), runs the same pipeline `sharelake ingest` runs, in the
test's local SparkSession, until nothing has arrived for `idle_ms`, and returns a `DrainedRun`:
the rows each table holds, the dead letters, and the run's counters (`RunSummary`: `accepted`,
`dead_lettered`, `dead_lettered_by_class`, ...). A run that raises raises here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from sharelake.config.loader import load_config
from sharelake.run.pipeline import IngestRun, RunSummary
from sharelake.testing.tables import read_table


@dataclass(frozen=True)
class DrainedRun:
    """What a drained run left: each table's rows by its topics, the dead letters, the counters."""

    spark: SparkSession
    tables: dict[str, str]  # topic -> its table's path
    dead_letter_table: str | None  # None: `dead_letter.sink` writes no table
    summary: RunSummary

    def landed(self, topic: str) -> DataFrame:
        """The rows of `topic`'s table, in Kafka's order (`read_table`)."""
        if topic not in self.tables:
            raise KeyError(f"{topic} is not a topic of this run: it reads {sorted(self.tables)}")
        return read_table(self.spark, self.tables[topic])

    def dead_letters(self) -> DataFrame:
        """The dead-letter table's rows (one per rejected record, its `error_class` named), in Kafka's
        order; an empty frame when nothing was dead-lettered (the table is created on first need).
        A run whose dead letters go to no table (`dead_letter.sink = "broker_topic"`) has none to read."""
        if self.dead_letter_table is None:
            raise ValueError(
                'dead_letter.sink = "broker_topic": the dead letters are in the broker\'s topic, not a table'
            )
        return read_table(self.spark, self.dead_letter_table, missing_ok=True)


def run_until_drained(
    spark: SparkSession,
    config: str | Path,
    *,
    bootstrap_servers: str | None = None,
    overrides: Sequence[str] = (),
    idle_ms: int = 3000,
) -> DrainedRun:
    """Run the pipeline `config` describes until drained, in `spark` (a local session with Delta).

    `bootstrap_servers` replaces the file's broker (the test's); `overrides` are `--set` lines
    (`delta.table_path=...`, `kafka.group_id=...`), applied last."""
    sets = [
        *([f"kafka.bootstrap_servers={bootstrap_servers}"] if bootstrap_servers else []),
        "run.mode=until-drained",
        f"run.idle_timeout_ms={idle_ms}",
        *overrides,
    ]
    cfg = load_config(config, sets)
    finished = IngestRun(spark, cfg).run()
    routes = finished.opened.routes  # each table located
    tables = {topic: route.location.path for route in routes.main for topic in route.topics}
    dead = routes.dead_letter.path if routes.dead_letter is not None else None
    return DrainedRun(spark, tables, dead, finished.summary)
