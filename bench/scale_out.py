"""Scale-out by drivers: k Sharelake drivers on one table, each a host of its own, at a steady offered rate.

Run on its own: `.cache/venv/bin/python -m bench scale-out --drivers 1,2,3 --rate 2000 --seconds 60`
(`--smoke` for tiny sizes). Root only: every process is a host of a `devkit.network` (a network
namespace with its own address; every packet between hosts crosses a router), so Kafka sees k
clients on k hosts: the broker on one, the producer on another, driver i on host `driver<i>`. The
table is on the machine's disk, which the hosts share as a cluster shares HDFS (the store refuses
the second create of a commit file, as HDFS does).

Per round, for each driver count k (interleaved), a fresh share group and table: k `jobs/ingest.py`
drivers in continuous mode; once every one has its members started, the producer offers `rate`
records/s for `seconds` (the share group spreads them over the drivers); when every record landed,
each driver is stopped with SIGTERM and its `run ended:` counters read. Each run gives, per driver
and in all:

- commits, refused commits (Delta sent the commit back: another driver committed first) and the
  refusal rate per commit attempt;
- the write window `w` (the `write` step's seconds per commit, less its refusals': from the
  transaction's snapshot to its commit) and the cost `r` of a refusal (seconds from a refusal to that append's commit);
- the model's refusal rate for the measured commit rate and window (docs/tuning.md, "Scale-out");
- exactly once: rows = records offered, no (topic, partition, offset) twice.

Writes `bench/results/<stamp>-scale-out.md` and `.json`.
"""

from __future__ import annotations

import argparse
import logging
import math
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from bench.contenders.base import RunContext, tail, wait_until
from bench.contenders.sharelake import SharelakeJob, start_sharelake
from bench.figures import finite_median, finite_values, fmt, kv_table, md_table, save_report
from bench.harness import Stamp, add_places, ints, stamp, work_folder
from bench.machine import machine_facts
from bench.settings import BenchSettings
from bench.verify import check_exactly_once
from devkit import network
from devkit.delta_log import data_commits, read_commits, rows_in
from devkit.job_logs import parse_job_log
from devkit.sample_data import produce_json_events
from sharelake.testing.kafka_broker import EmbeddedKafka

HELP = "k Sharelake drivers on one table, each a host of its own, at a steady offered rate (root only)"
log = logging.getLogger(__name__)
SMOKE = {"rate": 500, "seconds": 10, "rounds": 1}


def refusal_rate(drivers: int, commits_per_s: float, window_s: float) -> float:
    """The model: the share of commit attempts refused when each of `drivers` commits
    `commits_per_s` and holds a window of `window_s` from its snapshot to its commit, the others'
    commits arriving at random: 1 - exp(-(k - 1) c w)."""
    return 1 - math.exp(-(drivers - 1) * commits_per_s * window_s)


@dataclass
class DriverFigures:
    commits: int
    refused: int
    write_s: float
    refused_s: float

    @property
    def attempts(self) -> int:
        return self.commits + self.refused


@dataclass
class ScaleRun:
    """One run of k drivers on one table."""

    drivers: int
    round: int
    ok: bool = False
    error: str = ""
    offered: int = 0
    rows: int = 0
    duplicates: int = 0
    window_s: float = math.nan  # first -> last data commit
    per_driver: list[DriverFigures] = field(default_factory=list)
    table: str = ""

    @property
    def commits(self) -> int:
        return sum(d.commits for d in self.per_driver)

    @property
    def refused(self) -> int:
        return sum(d.refused for d in self.per_driver)

    @property
    def commit_rate(self) -> float:
        """The table's commits per second, all drivers."""
        return self.commits / self.window_s if self.window_s > 0 else math.nan

    @property
    def refused_share(self) -> float:
        """Refused commit attempts / all attempts."""
        attempts = self.commits + self.refused
        return self.refused / attempts if attempts else math.nan

    @property
    def write_window_s(self) -> float:
        """Mean seconds from a commit's snapshot to its commit, all drivers: the `write` step per
        commit, less the seconds its refusals cost (a retry's window is the refusal's, not this)."""
        spent = sum(d.write_s - d.refused_s for d in self.per_driver)
        return spent / self.commits if self.commits else math.nan

    @property
    def refusal_cost_s(self) -> float:
        return sum(d.refused_s for d in self.per_driver) / self.refused if self.refused else math.nan

    @property
    def commit_path_load(self) -> float:
        """U = C r / (1 - q): the table's commit path's load (docs/tuning.md); 1 is saturated."""
        return self.commit_rate * self.refusal_cost_s / (1 - self.refused_share) if self.refused else math.nan

    @property
    def modelled_share(self) -> float:
        return refusal_rate(self.drivers, self.commit_rate / self.drivers, self.write_window_s)


def hosts_for(net: network.Network, drivers: int) -> list[network.Host]:
    return [net.host(f"driver{i}") for i in range(drivers)]


def run_drivers(
    kafka: EmbeddedKafka, client: network.Host, hosts: list[network.Host], s: BenchSettings, a: argparse.Namespace,
    k: int, i: int, run_dir: Path,
) -> ScaleRun:  # fmt: skip
    """k drivers, one group, one table, a steady offered rate; never raises for a failed run."""
    out = ScaleRun(k, i, offered=a.rate * a.seconds)
    table = run_dir / "table"
    out.table = str(table)
    run_id = f"bench-scale{k}-{uuid.uuid4().hex[:8]}"
    topic, group = run_id, run_id  # a topic of its own: the group reads it from its start
    kafka.create_topic(topic, partitions=a.partitions)
    started: list[SharelakeJob] = []
    try:
        for j in range(k):
            ctx = RunContext(kafka.bootstrap, topic, a.partitions, out.offered, s.members, run_dir / f"driver-{j}", s)
            started.append(start_sharelake(ctx, "continuous", group=group, table=table, host=hosts[j]))
        if not _wait(lambda: all("members started" in _text(job) for job in started), 240, started):
            out.error = "a driver did not start its members: " + _first_tail(started)
            return out
        produced: list[int] = []
        producer = threading.Thread(
            target=lambda: produced.append(
                len(client.call(produce_json_events, kafka.bootstrap, topic, out.offered, rate=a.rate))
            )
        )
        producer.start()
        producer.join(a.seconds * 3 + 120)
        if not produced or produced[0] != out.offered:
            out.error = "the producer did not deliver every record"
            return out
        if not _wait(lambda: rows_in(read_commits(table)) >= out.offered, 300, started):
            out.error = f"not landed: {rows_in(read_commits(table))} of {out.offered}: " + _first_tail(started)
            return out
    finally:
        for job in started:
            job.kill()  # SIGTERM, the driver's graceful stop: it logs its run summary
    summaries = [parse_job_log(job.log).summary for job in started]
    if not all(summaries):
        out.error = "a driver logged no run summary: " + _first_tail(started)
        return out
    out.per_driver = [
        DriverFigures(
            int(x.get("delta_commits", 0)),
            int(x.get("commit_conflicts", 0)),
            x.get("write_s", 0.0),
            x.get("commit_conflict_s", 0.0),
        )
        for x in summaries
    ]
    commits = data_commits(read_commits(table))
    out.window_s = (commits[-1].timestamp_ms - commits[0].timestamp_ms) / 1000 if len(commits) > 1 else math.nan
    out.ok = True
    return out


def _text(job: SharelakeJob) -> str:
    return job.log.read_text(errors="replace") if job.log.exists() else ""


def _first_tail(jobs: list[SharelakeJob]) -> str:
    return tail(jobs[0].log, 8) if jobs else ""


def _wait(done: Callable[[], bool], timeout_s: float, jobs: list[SharelakeJob]) -> bool:
    """Until `done()` or a driver exits or the timeout."""
    return wait_until(done, lambda: all(job.proc.poll() is None for job in jobs), timeout_s, poll_s=0.5)


SUMMARY_HEAD = [
    "drivers", "runs ok", "table commits/s", "per driver", "w s", "refused %", "modelled %", "refusal cost s",
    "commit path load U",
]  # fmt: skip
MODELLED = ("commit_rate", "refused_share", "modelled_share", "write_window_s", "refusal_cost_s", "commit_path_load")


def write_report(
    runs: list[ScaleRun], a: argparse.Namespace, drivers: list[int], facts: dict[str, str], at: Stamp
) -> Path:
    ok = [r for r in runs if r.ok]
    summary = []
    for k in drivers:
        cell = [r for r in ok if r.drivers == k]
        summary.append(
            [
                str(k),
                f"{len(cell)} / {len([r for r in runs if r.drivers == k])}",
                fmt(finite_median([r.commit_rate for r in cell]), 2),
                fmt(finite_median([r.commit_rate / k for r in cell]), 2),
                fmt(finite_median([r.write_window_s for r in cell]), 2),
                fmt(finite_median([100 * r.refused_share for r in cell]), 1),
                fmt(finite_median([100 * r.modelled_share for r in cell]), 1),
                fmt(finite_median([r.refusal_cost_s for r in cell]), 2),
                fmt(finite_median([r.commit_path_load for r in cell]), 2),
            ]
        )
    every = [
        [
            str(r.round + 1),
            str(r.drivers),
            "yes" if r.ok else f"no: {r.error[:300]}",
            f"{r.rows:,} / {r.offered:,}",
            str(r.duplicates),
            " / ".join(f"{d.commits}" for d in r.per_driver),
            " / ".join(f"{d.refused}" for d in r.per_driver),
            " / ".join(fmt(100 * d.refused / d.attempts, 1) if d.attempts else "-" for d in r.per_driver),
            fmt(r.window_s, 1),
        ]
        for r in runs
    ]
    text = "\n\n".join(
        [
            f"# Scale-out by drivers on one table ({at.minute})",
            f"k Sharelake drivers, each on a host of its own (a network namespace: Kafka sees k hosts), one share "
            f"group, one table on the shared disk; {a.rate:,} JSON records/s offered for {a.seconds} s on "
            f"{a.partitions} partitions from a producer on its own host; {a.rounds} round(s), driver counts "
            f"interleaved; the drivers' --set: {', '.join(a.sets) or 'none (the shipped defaults)'}. "
            "Commit rate: the table's data commits / (last - first). Write window w: the `write` "
            "step's seconds per commit less its refusals' (the transaction's snapshot to its commit). "
            "Refused: commit attempts Delta sent back because another driver committed first, / all "
            "attempts; modelled: 1 - exp(-(k-1) c w) with c the commit rate per driver. "
            "Refusal cost r: seconds from a refusal to that append's commit. "
            "Commit path load U: the table's commits/s x r / (1 - refused share); 1 is saturated.",
            md_table(SUMMARY_HEAD, summary),
            "## Every run",
            md_table(
                ["round", "drivers", "ok", "rows", "dup", "commits", "refused", "refused % each", "window s"],
                every,
            ),
            "## Machine\n\n" + kv_table(facts),
        ]
    )
    raw = [
        {
            **finite_values(asdict(r)),
            **finite_values({k: getattr(r, k) for k in MODELLED}),
        }
        for r in runs
    ]
    stem = f"{at.file}-scale-out{'-smoke' if a.smoke else ''}"
    return save_report(a.results_dir, stem, text + "\n", {"args": vars(a), "machine": facts, "runs": raw})


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drivers", default="1,2,3", help="driver counts, comma-separated")
    p.add_argument("--rate", type=int, default=2000, help="records/s offered, all drivers together")
    p.add_argument("--seconds", type=int, default=60, help="how long the rate is offered")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--set", action="append", default=[], dest="sets", help="a --set for every driver (repeatable)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks the harness, numbers mean nothing")
    add_places(p)


def settings(a: argparse.Namespace) -> argparse.Namespace:
    """The command line, with the smoke sizes under `--smoke` (the report's JSON holds it as `args`)."""
    return argparse.Namespace(**{**vars(a), **(SMOKE if a.smoke else {})})


def run(args: argparse.Namespace) -> int:
    a = settings(args)
    drivers = sorted(set(ints(a.drivers)))
    s = replace(
        BenchSettings(),
        size="scale-out",
        partitions=(a.partitions,),
        contenders=("sharelake",),
        sharelake_sets=tuple(a.sets),
    )
    at = stamp()
    facts = machine_facts()
    runs: list[ScaleRun] = []
    with work_folder(a.work_dir, f"{at.file}-scale-out", a.keep_work) as work:
        with network.Network("bso") as net:
            client, hosts = net.host("client"), hosts_for(net, max(drivers))
            kafka = EmbeddedKafka(work / "broker", heap="1g", host=net.host("broker"))
            kafka.start()
            try:
                for i in range(a.rounds):
                    for k in drivers:
                        log.info("round %d: %d driver(s), %d records/s for %d s", i + 1, k, a.rate, a.seconds)
                        r = run_drivers(kafka, client, hosts, s, a, k, i, work / "runs" / f"r{i}-k{k}")
                        done = f"{100 * r.refused_share:.1f}% refused" if r.ok else f"FAILED: {r.error[:300]}"
                        log.info("  -> %s", done)
                        runs.append(r)
            finally:
                kafka.stop()
        check_exactly_once(runs, lambda r: r.offered)
    write_report(runs, a, drivers, facts, at)
    return 0 if all(r.ok for r in runs) else 1
