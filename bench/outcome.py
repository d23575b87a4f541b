"""What a run of the benchmark collected (`Outcome`, with a `TableRow` per checked table).

`bench.run` fills it; `bench.report` and `bench.latency_report` render it, and import it from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.contenders import RunResult
from bench.cycle import CycleRun
from bench.latency import LatencyRun
from bench.settings import BenchSettings
from bench.verify import Latency
from devkit.failover import FailoverRun


@dataclass
class TableRow:
    run: RunResult
    rows: int
    duplicates: int

    @property
    def expected(self) -> int:
        return self.run.expected

    @property
    def ok(self) -> bool:
        return self.rows == self.expected and self.duplicates == 0


@dataclass
class Outcome:
    settings: BenchSettings
    started: str
    machine: dict[str, str]
    results: list[RunResult] = field(default_factory=list)
    tables: list[TableRow] = field(default_factory=list)
    latency_runs: list[LatencyRun] = field(default_factory=list)  # in the order they ran
    latencies: dict[str, Latency] = field(default_factory=dict)  # contender -> its figures
    latency_errors: dict[str, str] = field(default_factory=dict)  # contender -> why it has no figures
    cycles: list[CycleRun] = field(default_factory=list)  # the cycle breakdown's runs
    failover: FailoverRun | None = None  # broker deaths on a 3-node cluster
    locks: int = 0
    locks_source: str = ""
    produce_rates: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
