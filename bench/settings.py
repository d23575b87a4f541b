"""The benchmark's sizes and knobs, with the full-size defaults and the `--smoke` preset.

Built by `bench.run` from the command line and handed to every phase; nothing else reads flags.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from devkit.paths import CACHE_DIR, PROJECT_ROOT

BENCH_DIR = PROJECT_ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
BENCH_JARS = CACHE_DIR / "jars" / "bench"
WORK_ROOT = CACHE_DIR / "bench"  # broker data, Delta tables, job logs of each run


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
    idle_timeout_ms: int = 3000  # Sharelake until-drained: quiet this long after the last record
    drain_idle_seconds: float = 3.0  # plain drain: stop when every consumer saw nothing this long
    producer_batch_bytes: int = 16384  # the Java producer's default batch.size (sets share poll sizes)
    run_timeout_s: float = 1800.0  # any single contender run
    sharelake_sets: tuple[str, ...] = ()  # extra --set overrides for every Sharelake run
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


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.run",
        description="Sharelake against Spark's Kafka source, a plain ShareConsumer drain and Kafka's "
        "share-consumer perf tool, side by side on one embedded broker; writes bench/results/<date>-<size>.md",
    )
    d = BenchSettings()
    p.add_argument("--smoke", action="store_true", help="tiny sizes that only check the harness works")
    p.add_argument("--records", type=int, help=f"records per throughput topic (default {d.records:,})")
    p.add_argument("--partitions", type=_ints, help="partition counts, comma-separated (default 1,4,16)")
    p.add_argument("--runs", type=int, help=f"runs per contender and partition count (default {d.runs})")
    p.add_argument("--members", type=int, help=f"share-group members of every contender (default {d.members})")
    p.add_argument("--contenders", type=_names, help="subset, comma-separated: " + ",".join(d.contenders))
    p.add_argument("--latency-rate", type=int, help=f"offered load, records/s (default {d.latency_rate})")
    p.add_argument("--latency-seconds", type=float, help=f"measured load duration (default {d.latency_seconds:g})")
    p.add_argument("--latency-warmup-seconds", type=float, help="load before the measured part (default 10)")
    p.add_argument("--latency-partitions", type=int, help=f"(default {d.latency_partitions})")
    p.add_argument(
        "--latency-window-seconds",
        type=float,
        help=f"p50/p99 per window of this length over the run (default {d.latency_window_seconds:g})",
    )
    p.add_argument(
        "--latency-trigger",
        help=f"processingTime trigger of Spark's Kafka source in the latency phase (default {d.latency_trigger!r})",
    )
    p.add_argument(
        "--memory-records", type=int, help=f"backlog for the memory phase, 0 to skip (default {d.memory_records:,})"
    )
    p.add_argument("--memory-partitions", type=int, help=f"(default {d.memory_partitions})")
    p.add_argument("--scaling-members", type=_ints, help="pump.members values (default 1,2,4,8)")
    p.add_argument("--scaling-partitions", type=_ints, help="partition counts for the scaling table (default 1,4)")
    p.add_argument("--scaling-runs", type=int, help=f"runs per scaling cell (default {d.scaling_runs})")
    p.add_argument(
        "--cycle-records", type=int, help=f"the cycle breakdown's topic, 0 to skip (default {d.cycle_records:,})"
    )
    p.add_argument("--cycle-partitions", type=int, help=f"(default {d.cycle_partitions})")
    p.add_argument(
        "--cycle-tuned",
        type=_names,
        help="the tuned run's overrides, comma-separated section.key=value (default: 8 members, ...)",
    )
    p.add_argument("--lock-caps", type=_ints, help="record-lock caps for the extra throughput rows (default 2000,4000)")
    p.add_argument(
        "--failover-records", type=int, help=f"the failover phase's records, 0 to skip (default {d.failover_records:,})"
    )
    p.add_argument(
        "--failover-rate", type=int, help=f"its steady produce rate, records/s (default {d.failover_rate:,})"
    )
    p.add_argument("--idle-timeout-ms", type=int, help="Sharelake run.idle_timeout_ms (default 3000)")
    p.add_argument("--producer-batch-bytes", type=int, help="producer batch.size (default 16384)")
    p.add_argument("--run-timeout-s", type=float, help="bound of one contender run (default 1800)")
    p.add_argument(
        "--set",
        dest="sharelake_sets",
        action="append",
        metavar="SECTION.KEY=VALUE",
        help="extra override for every Sharelake run (repeatable), e.g. --set batch.max_records=50000",
    )
    p.add_argument("--work-dir", type=Path, help=f"broker data, tables, logs (default {WORK_ROOT})")
    p.add_argument("--results-dir", type=Path, help=f"where the report goes (default {RESULTS_DIR})")
    p.add_argument("--keep-work", action="store_true", default=None, help="keep broker data, tables and logs")
    return p


def settings_from_args(argv: list[str] | None = None) -> BenchSettings:
    args = parser().parse_args(argv)
    s = replace(BenchSettings(), **SMOKE) if args.smoke else BenchSettings()
    given = {k: v for k, v in vars(args).items() if k != "smoke" and v is not None}
    if "sharelake_sets" in given:
        given["sharelake_sets"] = tuple(given["sharelake_sets"])
    s = replace(s, **given)
    unknown = set(s.contenders) - set(BenchSettings().contenders)
    if unknown:
        raise SystemExit(f"bench: unknown contender(s) {', '.join(sorted(unknown))}")
    return s
