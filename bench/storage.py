"""The storage mode of the benchmark: `python -m bench storage [--records N] [--rounds R] ...`.

Not a phase of `bench.run` (run it on its own; `make bench-storage`). What a table's storage and
its small-file policy cost the ingest, every variant measured in the same run on one embedded
broker (and one embedded S3 API server), the variants of a round back to back:

| variant | the job's table |
| --- | --- |
| `local` | a local path, Sharelake's defaults (the reference) |
| `s3` | `s3a://` through S3A to the embedded S3 API server (S3Proxy), with the writer lease |
| `auto-compact` | local, Delta's auto compaction (`spark.databricks.delta.autoCompact.enabled`) |
| `optimized-writes` | local, Delta's optimized writes (`spark.databricks.delta.optimizeWrite.enabled`) |
| `maintained` | local, and `jobs/maintain.py` (OPTIMIZE, then VACUUM) run once during the load |

Throughput: each variant drains a backlog of N JSON records (`devkit.workload`) on P partitions
until drained, R rounds; records/s = rows written / (last commit - first record), the job's own
`ingest_s` (so a slow start-up, S3's included, is left out alike). Latency (local variants): each
runs continuously under `--rate` records/s for `--seconds` after a warm-up (`bench.latency`); the
figure is the write stamp's (`ingested_at` - the record's CreateTime), since compaction rewrites
rows into files a later commit added (a commit time would then be OPTIMIZE's). Every table is
checked (rows, duplicates) and its data files counted. The report goes to
bench/results/<date>-storage.md and .json.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from delta.tables import DeltaTable

from bench.contenders.base import RunContext, tail
from bench.contenders.sharelake import start_sharelake
from bench.figures import finite_median, save_report
from bench.harness import add_places, stamp, work_folder
from bench.latency import run_latency
from bench.machine import machine_facts
from bench.settings import BenchSettings
from bench.verify import table_latency
from devkit.job_logs import parse_job_log
from devkit.paths import PROJECT_ROOT
from devkit.s3_server import EmbeddedS3
from devkit.spark_check import spark_session
from devkit.workload import produce_backlog
from sharelake.testing.kafka_broker import EmbeddedKafka

HELP = "local against S3 tables, auto compaction, optimized writes and jobs/maintain.py (make bench-storage)"
log = logging.getLogger(__name__)

S3_BUCKET = "bench"


@dataclass(frozen=True)
class Variant:
    name: str
    sets: tuple[str, ...] = ()
    s3: bool = False
    maintain_during_load: bool = False
    what: str = ""


VARIANTS = (
    Variant("local", what="a local path, Sharelake's defaults"),
    Variant("s3", s3=True, what="s3a:// through S3A to the embedded S3 API server, with the writer lease"),
    Variant(
        "auto-compact",
        ("spark_conf.spark.databricks.delta.autoCompact.enabled=true",),
        what="local, Delta's auto compaction",
    ),
    Variant(
        "optimized-writes",
        ("spark_conf.spark.databricks.delta.optimizeWrite.enabled=true",),
        what="local, Delta's optimized writes",
    ),
    Variant("maintained", maintain_during_load=True, what="local, jobs/maintain.py once during the load"),
)


@dataclass
class DrainRun:
    variant: str
    round: int
    ok: bool
    rows: int = 0
    rate: float = float("nan")
    data_files: int = 0
    mean_file_kib: float = float("nan")
    duplicates: int = 0
    details: dict[str, float] = field(default_factory=dict)
    error: str = ""


@dataclass
class LoadRun:
    variant: str
    ok: bool
    rows: int = 0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    max_ms: float = float("nan")
    data_files: int = 0
    mean_file_kib: float = float("nan")
    maintenance: str = ""
    error: str = ""


def _s3_sets(s3: EmbeddedS3) -> tuple[str, ...]:
    return tuple(f'spark_conf.{k}="{v}"' for k, v in s3.spark_conf().items())


def _files(spark: Any, location: str) -> tuple[int, float]:
    detail = DeltaTable.forPath(spark, location).detail().collect()[0]
    files = int(detail["numFiles"])
    return files, int(detail["sizeInBytes"]) / max(1, files) / 1024


def drain(
    kafka: EmbeddedKafka, s3: EmbeddedS3, s: BenchSettings, v: Variant, rnd: int, topic: str, work: Path
) -> tuple[DrainRun, str]:
    """One until-drained run of `v` on the backlog topic; its result and its table's location."""
    run_dir = work / f"drain-{v.name}-{rnd}"
    ctx = RunContext(kafka.bootstrap, topic, s.partitions[0], s.records, s.members, run_dir, s)
    location = f"s3a://{S3_BUCKET}/{v.name}-{rnd}" if v.s3 else str(run_dir / "table")
    sets = (*v.sets, *(_s3_sets(s3) if v.s3 else ()))
    destination = (f"kafka.topic={topic}", f"delta.table_path={location}")
    job = start_sharelake(
        ctx, "until-drained", sets, env=s3.credentials_env() if v.s3 else None, destination=destination
    )
    code = job.wait(s.run_timeout_s)
    summary = parse_job_log(job.log).summary
    if code != 0 or not summary.get("ingest_s"):
        return DrainRun(v.name, rnd, False, error=f"exit {code}: {tail(job.log, 6)}"), location
    rows = int(summary.get("rows_written", 0))
    return DrainRun(v.name, rnd, True, rows, rows / summary["ingest_s"], details=summary), location


def _maintain_later(location: str, after_s: float, out: list[str]) -> threading.Thread:
    def run() -> None:
        time.sleep(after_s)
        cmd = [str(PROJECT_ROOT / "spark-submit.sh"), "jobs/maintain.py", "--config", "conf/local.toml"]
        cmd += ["--set", "kafka.bootstrap_servers=unused:9092", "--set", f"delta.table_path={location}"]
        done = subprocess.run(cmd, cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
        lines = [ln for ln in done.stderr.splitlines() + done.stdout.splitlines() if "data files" in ln]
        out.append(lines[0].split(": ", 2)[-1] if lines else f"exit {done.returncode}: {done.stderr[-300:]}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def under_load(kafka: EmbeddedKafka, s: BenchSettings, v: Variant, work: Path) -> tuple[LoadRun, Path, int]:
    run_dir = work / f"load-{v.name}"
    settings = replace(s, sharelake_sets=(*s.sharelake_sets, *v.sets))
    maintenance: list[str] = []
    thread = None
    if v.maintain_during_load:  # halfway through the measured load (the job's start-up takes ~20-30 s)
        thread = _maintain_later(
            str(run_dir / "table"), 30 + s.latency_warmup_seconds + s.latency_seconds / 2, maintenance
        )
    run = run_latency(kafka, settings, run_dir, "sharelake", topic=f"bench-storage-load-{v.name}")
    if thread is not None:
        thread.join(600)
    r = run.result
    if not r.ok:
        return LoadRun(v.name, False, error=r.error[:500]), run_dir / "table", 0
    return LoadRun(v.name, True, r.records, maintenance=" ".join(maintenance)), run_dir / "table", run.warmup_records


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--records", type=int, default=100_000, help="backlog of each drain run")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2, help="drain rounds (each variant once per round)")
    p.add_argument("--rate", type=int, default=3000, help="offered load of the latency runs, records/s")
    p.add_argument("--seconds", type=float, default=90.0, help="measured load of the latency runs")
    p.add_argument("--variants", default=",".join(v.name for v in VARIANTS))
    add_places(p)


def settings(args: argparse.Namespace) -> BenchSettings:
    return replace(
        BenchSettings(),
        size="storage",
        records=args.records,
        partitions=(args.partitions,),
        latency_rate=args.rate,
        latency_seconds=args.seconds,
        latency_warmup_seconds=10.0,
        latency_partitions=args.partitions,
        work_dir=args.work_dir,
        results_dir=args.results_dir,
        keep_work=args.keep_work,
    )


def run(args: argparse.Namespace) -> int:
    s = settings(args)
    chosen = [v for v in VARIANTS if v.name in args.variants.split(",")]
    at = stamp()
    drains: list[tuple[DrainRun, str]] = []
    loads: list[tuple[LoadRun, Path, int]] = []
    with (
        work_folder(s.work_dir, f"{at.file}-storage", s.keep_work) as work,
        EmbeddedKafka(work / "broker") as kafka,
        EmbeddedS3(work / "s3") as s3,
    ):
        s3.bucket(S3_BUCKET)
        topic = f"bench-storage-p{args.partitions}"
        kafka.create_topic(topic, partitions=args.partitions)
        produce_backlog(kafka.bootstrap, topic, args.records, s.producer_batch_bytes)
        for rnd in range(args.rounds):
            for v in chosen:
                log.info("round %d: %s (%s)", rnd, v.name, v.what)
                drains.append(drain(kafka, s3, s, v, rnd, topic, work))
                log.info("  -> %s", f"{drains[-1][0].rate:,.0f} records/s" if drains[-1][0].ok else drains[-1][0].error)
        for v in (v for v in chosen if not v.s3):
            log.info("under load: %s at %d records/s for %gs", v.name, args.rate, args.seconds)
            try:
                loads.append(under_load(kafka, s, v, work))
            except Exception as e:
                log.exception("under load: %s failed", v.name)
                loads.append((LoadRun(v.name, False, error=repr(e)[:300]), work / "none", 0))
        # every table, checked with one session (S3's data lives only as long as the server)
        with spark_session() as spark:
            hadoop = spark.sparkContext._jsc.hadoopConfiguration()
            keys = s3.credentials_env()
            reach = {"fs.s3a.access.key": keys["AWS_ACCESS_KEY_ID"], "fs.s3a.secret.key": keys["AWS_SECRET_ACCESS_KEY"]}
            for key, value in {
                **{k.removeprefix("spark.hadoop."): v for k, v in s3.spark_conf().items()},
                **reach,
            }.items():
                hadoop.set(key, value)
            for drained, location in drains:
                if drained.ok:
                    df = spark.read.format("delta").load(location)
                    drained.duplicates = df.count() - df.select("topic", "partition", "offset").distinct().count()
                    drained.data_files, drained.mean_file_kib = _files(spark, location)
            for lrun, table, first_measured in loads:
                if lrun.ok:
                    lat = table_latency(spark, table, first_measured, s.latency_window_seconds, args.seconds)
                    proxy = lat.proxy_ms if lat.proxy_ms is not None else np.array([np.nan])
                    lrun.p50_ms, lrun.p99_ms, lrun.max_ms = (float(np.nanpercentile(proxy, q)) for q in (50, 99, 100))
                    lrun.data_files, lrun.mean_file_kib = _files(spark, str(table))
    write_report(at.file, args, chosen, [d for d, _ in drains], [ld for ld, _, _ in loads])
    return 0


def write_report(
    started: str, args: argparse.Namespace, chosen: list[Variant], drains: list[DrainRun], loads: list[LoadRun]
) -> Path:
    ref = finite_median([d.rate for d in drains if d.variant == "local" and d.ok])
    machine = ", ".join(f"{k} {v}" for k, v in machine_facts().items())
    md = [
        f"# Storage and small files: {started}",
        "",
        f"Machine: {machine}. Backlog {args.records:,} JSON records on {args.partitions} partitions, "
        f"{args.rounds} round(s) of drains (variants back to back in each round); load runs at {args.rate:,} "
        f"records/s for {args.seconds:g} s after a 10 s warm-up. `python -m bench storage` (bench/storage.py).",
        "",
        "## Drains: records/s (first record -> last commit), against `local` in the same run",
        "",
        "| variant | what | records/s per round | median | / local | data files | mean file | duplicates |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for v in chosen:
        runs = [d for d in drains if d.variant == v.name]
        rates = [d.rate for d in runs if d.ok]
        errors = "; ".join(d.error[:120] for d in runs if not d.ok)
        last = runs[-1] if runs else None
        md.append(
            f"| `{v.name}` | {v.what} | {', '.join(f'{r:,.0f}' for r in rates) or 'FAILED ' + errors} | "
            f"{finite_median(rates):,.0f} | {finite_median(rates) / ref:.2f} | {last.data_files if last else '-'} | "
            f"{last.mean_file_kib if last else float('nan'):,.0f} KiB | {sum(d.duplicates for d in runs)} |"
        )
    md += [
        "",
        "## Under a steady load: the write stamp's latency (ingested_at - CreateTime) of the measured records",
        "",
        "| variant | rows | p50 ms | p99 ms | max ms | data files at the end | mean file | maintenance during load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for ld in loads:
        if not ld.ok:
            md.append(f"| `{ld.variant}` | FAILED: {ld.error[:200]} | | | | | | |")
            continue
        md.append(
            f"| `{ld.variant}` | {ld.rows:,} | {ld.p50_ms:,.0f} | {ld.p99_ms:,.0f} | {ld.max_ms:,.0f} | "
            f"{ld.data_files} | {ld.mean_file_kib:,.0f} KiB | {ld.maintenance or '-'} |"
        )
    payload = {"args": vars(args), "drains": [asdict(d) for d in drains], "loads": [asdict(ld) for ld in loads]}
    return save_report(args.results_dir, f"{started}-storage", "\n".join(md) + "\n", payload)
