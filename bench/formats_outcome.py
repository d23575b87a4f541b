"""What a run of `python -m bench formats` holds: its settings, its runs and their table checks.

`bench.formats` fills it, `bench.formats_report` renders it; both import it, neither the other's way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from bench.contenders.base import RunResult
from bench.harness import RESULTS_DIR, WORK_ROOT
from bench.settings import BenchSettings, carried

ROUTES = 3  # routing topics (and tables) of the routed run


@dataclass(frozen=True)
class FormatsSettings:
    """The mode's sizes (printed in the report)."""

    size: str = "formats"
    records: int = 200_000  # per topic: the JSON, the Avro and each routing topic hold records 0..N-1
    partitions: int = 4  # of every topic
    runs: int = 3  # rounds
    members: int = 4  # Sharelake pump.members (the shipped default)
    idle_timeout_ms: int = 3000
    run_timeout_s: float = 1800.0
    work_dir: Path = WORK_ROOT
    results_dir: Path = RESULTS_DIR
    keep_work: bool = False

    def bench_settings(self) -> BenchSettings:
        """What the contenders read (`RunContext.settings`)."""
        return carried(self, partitions=(self.partitions,))

    def as_table(self) -> dict[str, str]:
        return {
            "records per topic (JSON, Avro, each routing topic)": f"{self.records:,}",
            "partitions per topic": str(self.partitions),
            "rounds": str(self.runs),
            "Sharelake pump.members": str(self.members),
            "Sharelake run.idle_timeout_ms": str(self.idle_timeout_ms),
            "run timeout s": f"{self.run_timeout_s:g}",
        }


@dataclass(frozen=True)
class TableSpec:
    """A table a run must end with: records first_id .. first_id + count - 1, exactly once."""

    path: Path
    first_id: int
    count: int
    dead_letter: Path | None = None  # Sharelake's dead-letter table: must be empty (or absent)


@dataclass
class TableResult:
    spec: TableSpec
    rows: int = 0
    duplicates: int = 0  # rows - distinct (topic, partition, offset)
    distinct_ids: int = 0
    ids_in_range: bool = False
    checksum_ok: bool = False  # the payload columns hash-sum to that of the records produced
    dead_letter_rows: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        return (
            not self.error
            and self.rows == self.spec.count
            and self.duplicates == 0
            and self.distinct_ids == self.spec.count
            and self.ids_in_range
            and self.checksum_ok
            and self.dead_letter_rows == 0
        )


@dataclass
class FormatRun:
    key: str  # sl-json, sl-avro, spark-json, spark-avro, sl-routed, sl-single
    round: int
    topics: list[str]
    result: RunResult
    tables: list[TableSpec]
    checks: list[TableResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result.ok and bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def rate(self) -> float:
        """records/s of a run whose tables passed every check, else NaN."""
        return self.result.rate if self.ok else math.nan


@dataclass(frozen=True)
class Topic:
    name: str
    first_id: int
    count: int
    payload: str  # json or avro
    produce_rate: float
    value_bytes: float  # mean value size over a sample


@dataclass
class FormatsOutcome:
    settings: FormatsSettings
    started: str
    machine: dict[str, str]
    topics: dict[str, Topic] = field(default_factory=dict)  # json, avro, route-0 .. route-2
    schema_id: int = -1
    registry_start_s: float = math.nan
    runs: list[FormatRun] = field(default_factory=list)
    load_after: str = ""
    seconds: float = 0.0
