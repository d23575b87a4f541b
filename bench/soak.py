"""The soak mode of the benchmark, `python -m bench soak`: runs `devkit.soak.run_soak` (30 minutes by default)
and reports it (`soak_section`, `soak_json`) to `bench/results/<stamp>-soak.md` and `.json`.

The scenario, its faults and its measures are described in `devkit.soak`.
"""

from __future__ import annotations

import argparse
import logging
import statistics
from dataclasses import asdict
from typing import Any

import numpy as np

from bench.figures import md_table, save_report
from bench.harness import add_places, stamp, work_folder
from devkit.soak import (
    FAULT_KINDS,
    FULL_BATCH,
    RATE_WINDOW_S,
    RECOVERED_LAG_S,
    SoakRun,
    best_rate,
    memory_by_incarnation,
    run_soak,
)
from sharelake.testing.kafka_broker import EmbeddedKafka

HELP = "a long steady load at 60% of the measured maximum, with kill -9 of the driver and broker restarts"
log = logging.getLogger(__name__)


def soak_section(run: SoakRun) -> list[str]:
    md = ["## Soak: a steady load with driver kills and broker restarts\n"]
    if run.error:
        md.append(f"The soak failed: {run.error}\n")
    lags = [s.lag for s in run.samples]
    order = ", ".join(FAULT_KINDS[c].split()[0] for c in run.pattern)
    md.append(
        f"The job drained a backlog at **{run.max_rate:,.0f} records/s** (4 partitions, shipped defaults, nothing "
        f"else running); the soak then offered {run.rate:,} records/s ({run.rate / run.max_rate:.0%} of that) for "
        f"{run.duration_s / 60:.0f} minutes on one broker, with a fault every {run.fault_every_s / 60:.1f} minutes "
        f"in the order {order}: driver = a SIGKILL of the driver's process group (started again at once, "
        f"{run.incarnations} starts in all), broker = a SIGKILL of the broker (started again after a pause). "
        "Lag = records offered to the producer that no Delta commit held yet, sampled every few seconds.\n"
        if run.max_rate
        else ""
    )
    if run.samples and run.rate:
        best = best_rate(run)
        md.append(
            f"Under the load (the producer, the broker and the job share the machine) the job committed at most "
            f"**{best:,.0f} records/s** over any {RATE_WINDOW_S:.0f} s, {best / run.rate:.2f}x the offered rate: "
            "that margin is what drains the lag a fault leaves.\n"
        )
    if lags:
        md.append(
            f"Lag over the run: median {statistics.median(lags):,.0f} records "
            f"({statistics.median(lags) / max(1, run.rate):.1f} s of load), p99 {np.percentile(lags, 99):,.0f}, "
            f"max {max(lags):,}.\n"
        )
    rows = [
        [f"{f.at_s / 60:.1f} min", f.kind, f"{f.peak_lag:,}",
         f"{f.recovered_s:.0f}" if f.recovered_s >= 0 else f"not before the next fault ({f.lag_left:,} left)"]
        for f in run.faults
    ]  # fmt: skip
    if rows:
        md.append(
            md_table(["at", "fault", "peak lag (records)", f"back under {RECOVERED_LAG_S:g} s of lag (s)"], rows) + "\n"
        )
    if run.batches:
        md.append(
            "Each job start's micro-batches; the medians are over its full batches (at least "
            f"{FULL_BATCH:.0%} of its largest), which it runs while it catches up:\n"
        )
        batch_rows = [
            [f"{int(b['start'])}", f"{int(b['batches'])}", f"{int(b['full_batches'])}",
             f"{b['records']:,.0f}", f"{b['cycle_ms']:.0f}", f"{b['write_ms']:.0f}",
             f"{b['records'] / b['cycle_ms'] * 1000:,.0f}"]
            for b in run.batches
        ]  # fmt: skip
        md.append(
            md_table(["start", "batches", "full", "records", "cycle ms", "write ms", "records/s"], batch_rows) + "\n"
        )
    mem = memory_by_incarnation(run)
    if mem:
        md.append("Memory of each job start, from a minute after it started (median of the first and last fifth):\n")
        md.append(
            md_table(
                ["start", "minutes", "Python MiB warm -> end", "trend MiB/min", "JVM MiB warm -> end", "trend MiB/min"],
                [
                    [
                        f"{int(m['incarnation'])}",
                        f"{m['minutes']:.1f}",
                        f"{m['python_warm_mib']:.0f} -> {m['python_end_mib']:.0f}",
                        f"{m['python_mib_per_min']:+.2f}",
                        f"{m['jvm_warm_mib']:.0f} -> {m['jvm_end_mib']:.0f}",
                        f"{m['jvm_mib_per_min']:+.2f}",
                    ]
                    for m in mem
                ],
            )
            + "\n"
        )
        first, last = mem[0], mem[-1]
        md.append(
            f"Once warm, the first measured start held {first['python_warm_mib']:.0f} MiB in Python and "
            f"{first['jvm_warm_mib']:.0f} MiB in the JVM, the last {last['python_warm_mib']:.0f} and "
            f"{last['jvm_warm_mib']:.0f}: what a start needs does not grow with the table or the run.\n"
            if abs(last["python_warm_mib"] - first["python_warm_mib"]) < 0.2 * first["python_warm_mib"]
            else f"Once warm, the first measured start held {first['python_warm_mib']:.0f} MiB in Python, the last "
            f"{last['python_warm_mib']:.0f}: it grows with the run.\n"
        )
    if run.rows:
        md.append(
            f"Exactly once at the end: {run.delivered:,} records delivered, {run.rows:,} rows, "
            f"**{run.lost:,} lost, {run.duplicates:,} duplicates**, {run.dead_lettered:,} dead-lettered; the last "
            f"backlog drained {run.drained_s:.1f} s after the producer stopped. The last job's counters: "
            + ", ".join(
                f"{k} {int(run.last_counters.get(k, 0)):,}"
                for k in ("accepted", "released", "dedup_hits", "ack_errors")
            )
            + f". Appends re-planned because another writer had committed some of their records: "
            f"{run.replans}; commits Delta refused for another writer's: {run.commit_conflicts}.\n"
        )
    return md


def soak_json(run: SoakRun) -> dict[str, object]:
    out = asdict(run)
    out["lost"], out["duplicates"] = run.lost, run.duplicates
    out["memory"] = memory_by_incarnation(run)
    return out


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--fault-every-minutes", type=float, default=2.5)
    p.add_argument("--fraction", type=float, default=0.6, help="of the measured maximum (default 0.6)")
    p.add_argument("--rate", type=int, help="offer this many records/s instead of a fraction of the maximum")
    p.add_argument("--calibrate-records", type=int, default=500_000)
    p.add_argument(
        "--pattern", default="DBB",
        help="the faults' order, repeated: D = driver kill -9, B = broker restart (default DBB: each job start "
        "lives through two broker restarts, long enough to judge its memory)",
    )  # fmt: skip
    add_places(p)
    p.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="an override for the job (repeatable), e.g. --set 'delta.log_retention=\"interval 5 minutes\"'",
    )  # fmt: skip


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """`run_soak`'s arguments, but its broker and work folder."""
    return {
        "duration_s": args.minutes * 60, "fault_every_s": args.fault_every_minutes * 60, "fraction": args.fraction,
        "calibrate_records": args.calibrate_records, "rate": args.rate, "pattern": args.pattern,
        "sets": tuple(args.sets),
    }  # fmt: skip


def run(args: argparse.Namespace) -> int:
    soak = settings(args)
    at = stamp()
    with work_folder(args.work_dir, f"{at.file}-soak", args.keep_work) as work, EmbeddedKafka(work / "broker") as kafka:
        soaked = run_soak(kafka, work / "run", **soak)
    overrides = f"The job's overrides: `{' '.join(args.sets)}`.\n" if args.sets else ""
    text = "\n".join([f"# Sharelake soak, {at.file}\n", overrides, *soak_section(soaked)])
    save_report(args.results_dir, f"{at.file}-soak", text, soak_json(soaked))
    return 0
