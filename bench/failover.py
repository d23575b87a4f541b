"""The failover phase of the benchmark: broker deaths on a 3-node cluster under a running job, and their stalls.

The scenario is `devkit.failover`'s (`run_failover`, `FailoverRun`: what was produced and each death's
stall); here `failover_phase` runs it and `failover_section` reports the stall of each death
against the 5 s target (`TARGET_STALL_S`).
"""

from __future__ import annotations

import argparse
import logging
import math
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.figures import md_table, save_report
from bench.harness import add_places, stamp, work_folder
from devkit.failover import FailoverRun, run_failover
from devkit.job_logs import parse_job_log
from devkit.kafka_cluster import EmbeddedKafkaCluster
from devkit.paths import PROJECT_ROOT

HELP = "kill -9 a partition leader, then the group coordinator, of a 3-node cluster under a running job; the stalls"
log = logging.getLogger(__name__)

TARGET_STALL_S = 5.0


def job_command(bootstrap: str, topic: str, group: str, table: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """The ingest job as users run it, continuous, on the run's topic, group and table (`extra`: more --set)."""
    sets = [
        f"kafka.bootstrap_servers={bootstrap}", f"kafka.topic={topic}", f"kafka.group_id={group}",
        f"delta.table_path={table}", "run.mode=continuous", *extra,
    ]  # fmt: skip
    cmd = [str(PROJECT_ROOT / "spark-submit.sh"), "jobs/ingest.py", "--config", "conf/local.toml"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def failover_phase(
    records: int,
    rate: int,
    work: Path,
    seed: int = 932,
    *,
    fast_fencing: bool = True,
    job_sets: tuple[str, ...] = (),
    backlog: int = 0,
) -> FailoverRun:
    """The benchmark's phase: a fresh 3-node cluster, a 6-partition topic, the scenario above.

    `fast_fencing` False: the cluster on Kafka's default fencing and quorum timeouts; `job_sets`:
    more `--set` overrides of the job (e.g. pump.acknowledgement_commit=async)."""
    work.mkdir(parents=True, exist_ok=True)
    topic, group, table, log_path = "failover", "g-failover", work / "table", work / "job.log"
    log.info(
        "failover: 3-node cluster (%s fencing), %d records at %d records/s, two broker deaths; job %s",
        "fast" if fast_fencing else "Kafka's default", records, rate, " ".join(job_sets) or "as configured",
    )  # fmt: skip
    cluster = EmbeddedKafkaCluster(work / "cluster", fast_fencing=fast_fencing)

    def start() -> subprocess.Popen[bytes]:
        with log_path.open("wb") as out:
            return subprocess.Popen(
                job_command(cluster.bootstrap, topic, group, table, job_sets), cwd=PROJECT_ROOT,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    try:
        with cluster:
            cluster.create_topic(topic, partitions=6)
            run = run_failover(
                cluster, topic, group, table, start, records=records, rate=rate, seed=seed, backlog=backlog
            )
    except Exception as e:
        log.exception("failover phase failed")
        run = FailoverRun(error=f"{e!r}")
    run.counters = parse_job_log(log_path).summary
    log.info("failover: %s", run.summary())
    return run


def failover_section(run: FailoverRun | None) -> list[str]:
    """The report's markdown: each broker death's stall against the target, and what the job counted."""
    if run is None:
        return []
    md = ["## Broker failover: a 3-node cluster loses a partition leader, then the group coordinator\n"]
    if run.error:
        return [*md, f"The phase failed: {run.error}\n"]
    md.append(
        f"{len(run.produced):,} records produced at a steady rate into 6 partitions (replication factor 3, "
        "min.insync.replicas 2) while the job ran in continuous mode; each node was killed with SIGKILL at a "
        "random moment and restarted 5-10 s later; the job was never restarted. One producer ran throughout (records "
        "for a partition without a leader waited in it while the others flowed). Stall = the longest gap between "
        "two Delta commits from the kill until 5 s after the node was back; a partition's wait = the same gap "
        "between the commits holding records of that partition (the longest over the partitions the node led, and "
        f"over the others). The median gap between commits over the whole run was {run.commit_gap_median_s:.2f} s.\n"
    )
    rows = [
        [
            f"node {d.node}", d.role, ", ".join(map(str, d.led)) or "none", f"{d.stall_s:.1f}",
            f"{d.led_wait_s:.1f}", f"{d.others_wait_s:.1f}",
            "no load left" if math.isnan(d.stall_s) else "met" if d.stall_s <= TARGET_STALL_S else "not met",
        ]
        for d in run.deaths
    ]  # fmt: skip
    md.append(
        md_table([
            "killed", "its role", "partitions it led", "stall (s)", "its partitions waited (s)",
            "the others waited (s)", f"stall target <= {TARGET_STALL_S:g} s",
        ], rows) + "\n"
    )  # fmt: skip
    c = run.counters
    keys = ("accepted", "released", "rejected", "dead_lettered", "dedup_hits", "ack_errors", "poll_errors")
    md.append(
        f"Rows in the table: {run.rows:,} of {len(run.produced):,} produced; the job "
        f"{'kept running' if run.job_survived else 'ENDED BY ITSELF'} (exit {run.job_rc} after SIGTERM). "
        "Its counters: " + ", ".join(f"{k} {int(c.get(k, 0)):,}" for k in keys) + ".\n"
    )
    return md


def failover_json(run: FailoverRun | None) -> dict[str, object] | None:
    if run is None:
        return None
    return {
        "produced": len(run.produced),
        "rows": run.rows,
        "deaths": [asdict(d) for d in run.deaths],
        "commit_gap_median_s": run.commit_gap_median_s,
        "job_survived": run.job_survived,
        "job_rc": run.job_rc,
        "counters": run.counters,
        "error": run.error,
    }


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--rate", type=int, default=2_000)
    p.add_argument("--seed", type=int, default=932)
    p.add_argument("--backlog", type=int, default=0, help="of --records, produced at once before the steady rate")
    p.add_argument("--default-fencing", action="store_true", help="the cluster on Kafka's default fencing timeouts")
    p.add_argument("--set", action="append", default=[], dest="sets", help="a --set override of the job (repeatable)")
    add_places(p)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """`failover_phase`'s arguments, but its work folder."""
    return {
        "records": args.records, "rate": args.rate, "seed": args.seed, "backlog": args.backlog,
        "fast_fencing": not args.default_fencing, "job_sets": tuple(args.sets),
    }  # fmt: skip


def run(args: argparse.Namespace) -> int:
    phase = settings(args)
    at = stamp()
    with work_folder(args.work_dir, f"{at.file}-failover", args.keep_work) as work:
        failed_over = failover_phase(work=work, **phase)
    fencing = "fast (FAILOVER_SETTINGS)" if phase["fast_fencing"] else "Kafka defaults"
    setup = f"Cluster fencing: {fencing}; backlog {args.backlog:,}; job overrides: {' '.join(args.sets) or 'none'}.\n"
    text = "\n".join([f"# Sharelake broker failover, {at.file}\n", setup, *failover_section(failed_over)])
    save_report(args.results_dir, f"{at.file}-failover", text, failover_json(failed_over))
    return 0
