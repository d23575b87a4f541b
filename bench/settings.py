"""The benchmark's sizes and knobs, with the full-size defaults and the `--smoke` preset.

Built from the command line of `python -m bench run` (and `cycle`) and handed to every phase.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from bench.harness import RESULTS_DIR, WORK_ROOT, add_places, add_settings, settings_from
from devkit.ingest_job import IDLE_TIMEOUT_MS
from devkit.paths import CACHE_DIR

BENCH_JARS = CACHE_DIR / "jars" / "bench"


@dataclass(frozen=True)
class BenchSettings:
    """Everything a benchmark run is parameterised by (all of it is printed in the report)."""

    size: str = "full"
    records: int = 1_000_000  # per throughput topic
    partitions: tuple[int, ...] = (1, 4, 16)
    runs: int = 3  # runs per contender and partition count (median, min, max)
    members: int = 4  # Sharelake pump.members (its shipped default); also the plain drain's and perf tool's threads
    contenders: tuple[str, ...] = (
        "sharelake",
        "sharelake-consumer-group",
        "spark-kafka-source",
        "share-consumer-drain",
        "perf-tool",
        "sink-ceiling",
    )
    latency_rate: int = 5_000  # offered load, records/s
    latency_seconds: float = 300.0  # the measured part of the load, after the warm-up
    latency_warmup_seconds: float = 10.0  # produced at the same rate before, and left out of the figures
    latency_partitions: int = 4
    latency_window_seconds: float = 10.0  # p50/p99 per window of this length (by produce time) over the run
    latency_trigger: str = "0 seconds"  # Spark's Kafka source in the latency phase: Trigger.ProcessingTime(this)
    memory_records: int = 1_000_000  # backlog drained while sampling the driver's memory (0: skip)
    memory_partitions: int = 4
    scaling_members: tuple[int, ...] = (1, 2, 4, 8)
    scaling_partitions: tuple[int, ...] = (1, 4)
    scaling_runs: int = 1
    cycle_records: int = 100_000  # the cycle breakdown's topic, as the baseline's (0: skip the phase)
    cycle_partitions: int = 4
    # the cycle breakdown runs the shipped defaults, then these overrides ("tuned"; empty: defaults only)
    cycle_tuned: tuple[str, ...] = (
        "pump.members=8",
        "pump.max_poll_records=10000",
        "pump.buffer_max_records=100000",
        "batch.max_records=100000",
    )
    # throughput rows with the group's record locks held at these caps (Kafka's group default 2,000;
    # a stock broker's group.share.max.partition.max.record.locks, 4,000), one run per partition count
    lock_caps: tuple[int, ...] = (2000, 4000)
    # broker deaths on a 3-node cluster under a steady load (bench.failover); 0 skips the phase
    failover_records: int = 100_000
    failover_rate: int = 2_000
    idle_timeout_ms: int = IDLE_TIMEOUT_MS  # Sharelake until-drained: quiet this long after the last record
    drain_idle_seconds: float = 3.0  # plain drain: stop when every consumer saw nothing this long
    producer_batch_bytes: int = 16384  # the Java producer's default batch.size (sets share poll sizes)
    run_timeout_s: float = 1800.0  # any single contender run
    sharelake_sets: tuple[str, ...] = ()  # extra --set overrides for every Sharelake run
    # contender (a0) `sharelake-before`: Sharelake with these overrides on top, the path before a change
    # (a lever behind a setting), run in the same rounds as (a); only when named in --contenders
    before_sets: tuple[str, ...] = ()
    before_root: Path | None = None  # (a0) runs from this checkout (e.g. a worktree of the commit before)
    work_dir: Path = WORK_ROOT
    results_dir: Path = RESULTS_DIR
    keep_work: bool = False  # keep broker data and tables after the run (default: delete them)

    def as_table(self) -> dict[str, str]:
        skip = {"work_dir", "results_dir"}
        return {
            k: ", ".join(map(str, v)) if isinstance(v, tuple) else str(v)
            for k, v in asdict(self).items()
            if k not in skip
        }


SMOKE: dict[str, Any] = {
    "size": "smoke",
    "records": 3000,
    "partitions": (2,),
    "runs": 1,
    "latency_rate": 300,
    "latency_seconds": 4.0,
    "latency_warmup_seconds": 1.0,
    "latency_partitions": 2,
    "latency_window_seconds": 2.0,
    "memory_records": 0,  # the peak is taken over the throughput runs instead
    "scaling_members": (4,),  # the throughput run's cell: the scaling report takes it, no extra run
    "scaling_partitions": (2,),
    "cycle_records": 3000,
    "cycle_partitions": 2,
    "cycle_tuned": (),
    "lock_caps": (),
    "failover_records": 0,  # three more JVMs: the failover test runs the scenario in CI
    "idle_timeout_ms": 2000,
    "drain_idle_seconds": 2.0,
    "run_timeout_s": 300.0,
}


HELPS = {  # the options of `python -m bench run` (and `cycle`): BenchSettings' fields a run may change
    "records": "records per throughput topic",
    "partitions": "partition counts, comma-separated",
    "runs": "runs per contender and partition count",
    "members": "share-group members of every contender",
    "contenders": "a subset, comma-separated",
    "latency_rate": "offered load, records/s",
    "latency_seconds": "measured load duration, 0 to skip the latency phase",
    "latency_warmup_seconds": "load before the measured part",
    "latency_partitions": "partitions of the latency topics",
    "latency_window_seconds": "p50/p99 per window of this length over the run",
    "latency_trigger": "processingTime trigger of Spark's Kafka source in the latency phase",
    "memory_records": "backlog for the memory phase, 0 to skip",
    "memory_partitions": "partitions of the memory topic",
    "scaling_members": "pump.members values",
    "scaling_partitions": "partition counts for the scaling table",
    "scaling_runs": "runs per scaling cell",
    "cycle_records": "the cycle breakdown's topic, 0 to skip",
    "cycle_partitions": "partitions of the cycle topic",
    "cycle_tuned": "the tuned run's overrides, comma-separated section.key=value",
    "lock_caps": "record-lock caps for the extra throughput rows",
    "failover_records": "the failover phase's records, 0 to skip",
    "failover_rate": "its steady produce rate, records/s",
    "idle_timeout_ms": "Sharelake run.idle_timeout_ms",
    "producer_batch_bytes": "producer batch.size",
    "run_timeout_s": "bound of one contender run",
    "before_sets": "contender sharelake-before's overrides, comma-separated section.key=value (a lever's before)",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every size and knob of `BenchSettings` (`python -m bench run` and `python -m bench cycle`)."""
    add_settings(p, BenchSettings(), HELPS)
    add_before_root(p)
    p.add_argument(
        "--set",
        dest="sharelake_sets",
        action="append",
        metavar="SECTION.KEY=VALUE",
        help="extra override for every Sharelake run (repeatable), e.g. --set batch.max_records=50000",
    )
    add_places(p)


def add_before_root(p: argparse.ArgumentParser) -> None:
    """`--before-root`: the checkout contender sharelake-before runs from (the `before_root` setting)."""
    p.add_argument(
        "--before-root",
        type=Path,
        help="the checkout contender sharelake-before runs from (its own spark-submit.sh and app), e.g. a "
        "git worktree of the commit before a change (default this checkout)",
    )


def carried(s: Any, **more: Any) -> BenchSettings:
    """The `BenchSettings` the contenders and the latency runs read, for a scenario whose own settings
    are `s` (a dataclass): the fields it shares with them (same name and type, e.g. `size`,
    `run_timeout_s` and the places) carried over, and `more`."""
    d = BenchSettings()
    same = {f.name: getattr(s, f.name) for f in fields(s) if type(getattr(d, f.name, None)) is type(getattr(s, f.name))}
    return replace(d, **same, **more)


def add_drain_arguments(p: argparse.ArgumentParser, partitions: int = 4) -> None:
    """The sizes of a scenario whose every run drains one backlog: records, partitions, rounds."""
    p.add_argument("--records", type=int, default=200_000, help="the backlog (default 200,000)")
    p.add_argument("--partitions", type=int, default=partitions, help=f"of the topic (default {partitions})")
    p.add_argument("--rounds", type=int, default=2, help="runs of each kind, interleaved round by round (default 2)")
    add_places(p)


def drain_settings(args: argparse.Namespace) -> BenchSettings:
    """`add_drain_arguments`' sizes as settings (`runs` = the rounds; members 0: the shipped default)."""
    return replace(
        BenchSettings(),
        records=args.records,
        partitions=(args.partitions,),
        runs=args.rounds,
        members=0,
        work_dir=args.work_dir,
        results_dir=args.results_dir,
        keep_work=args.keep_work,
    )


def from_args(args: argparse.Namespace) -> BenchSettings:
    s = settings_from(args, BenchSettings(), SMOKE)
    unknown = set(s.contenders) - {*BenchSettings().contenders, "sharelake-before"}
    if unknown:
        raise SystemExit(f"bench: unknown contender(s) {', '.join(sorted(unknown))}")
    return s
