"""The latency section of the benchmark report: what the latency phase measured, as markdown and JSON.

The numbers are `bench.verify.table_latency`'s, the runs `bench.latency`'s.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.charts import latency_cdf_chart, latency_windows_chart
from bench.contenders import LABELS
from bench.figures import finite_or_none, fmt, md_table

if TYPE_CHECKING:
    from bench.outcome import Outcome


LATENCY_METHOD = (
    "latency of a row = commitInfo.timestamp of the Delta version whose add action wrote the row's data file "
    "- the row's kafka_timestamp (CreateTime); rows read with Spark with _metadata.file_path, file -> version "
    "from the add actions of _delta_log/*.json; rows with id below the first measured id (the warm-up) left out; "
    "windows by produce time from the first measured record"
)
LATENCY_RUNS = {
    "sharelake": "`jobs/ingest.py` with `run.mode=continuous`, {members} member(s), a fresh share group; started "
    "producing once its start-up checks had passed; stopped with SIGTERM to the spark-submit JVM (the job drains "
    "gracefully)",
    "sharelake-before": "the same as Sharelake's, with `--before-sets` on top (the path before a change)",
    "spark-kafka-source": "`bench/spark_jobs/kafka_source_continuous.py`: Spark's Kafka source (plain partition "
    'reads, no share group) -> from_json -> Delta append, `Trigger.ProcessingTime("{trigger}")`, '
    "`startingOffsets=earliest` (the topic is fresh); started producing once its SparkSession was up; stopped "
    "with SIGTERM to its process group",
}


def _latency_run_rows(o: Outcome) -> list[list[str]]:
    rows = []
    for run in o.latency_runs:
        label, lat = LABELS[run.contender], o.latencies.get(run.contender)
        if not run.result.ok or lat is None:
            why = run.result.error if not run.result.ok else o.latency_errors.get(run.contender, "no figures")
            rows.append([label, "failed", "", "", "", "", "", why.replace("\n", " / ")[:300]])
            continue
        rows.append(
            [
                f"{label}: produce -> Delta commit",
                fmt(lat.pct(50), 0),
                fmt(lat.pct(99), 0),
                fmt(lat.pct(100), 0),
                f"{len(lat.commit_ms):,}",
                f"{run.warmup_records:,}",
                fmt(run.producer_lag_s * 1000, 0),
                "",
            ]
        )
        if lat.proxy_ms is not None:
            rows.append(
                [
                    f"{label}: produce -> `ingested_at` (its stamp before the write; lower proxy)",
                    fmt(lat.pct(50, "proxy"), 0),
                    fmt(lat.pct(99, "proxy"), 0),
                    fmt(lat.pct(100, "proxy"), 0),
                    f"{len(lat.proxy_ms):,}",
                    "",
                    "",
                    "not a commit time: not comparable across contenders",
                ]
            )
    return rows


def _window_table(o: Outcome) -> str:
    names = [r.contender for r in o.latency_runs if r.contender in o.latencies]
    windows = {n: o.latencies[n].windows for n in names}
    header = ["window (s)"]
    for n in names:
        header += [f"{LABELS[n]} p50", "p99", "rows"]
    rows = []
    for i in range(max((len(w) for w in windows.values()), default=0)):
        first = next(w[i] for w in windows.values() if i < len(w))
        row = [f"{first.start_s:g} - {first.end_s:g}"]
        for n in names:
            w = windows[n][i] if i < len(windows[n]) else None
            row += ["", "", ""] if w is None else [fmt(w.p50_ms, 0), fmt(w.p99_ms, 0), f"{w.rows:,}"]
        rows.append(row)
    return md_table(header, rows)


def latency_section(o: Outcome, md: list[str], charts: Path) -> None:
    s = o.settings
    md.append(
        f"## Latency: produce -> Delta commit at {s.latency_rate:,} records/s offered on "
        f"{s.latency_partitions} partition(s) for {s.latency_seconds:g} s\n"
    )
    if not o.latency_runs:
        md.append("Not run (`--latency-seconds 0`, or neither Sharelake nor Spark's Kafka source is a contender).\n")
        return
    md.append(
        "The contenders below ran one after the other in this run, in this order, each on a fresh topic of "
        f"its own with the same load: {s.latency_rate:,} records/s (~250-byte JSON, keyed, `devkit/workload.py`) "
        "produced at a fixed schedule by one producer thread of the harness. The first records are a warm-up, "
        f"left out by record id: at least {s.latency_warmup_seconds:g} s and until the job's first Delta "
        f"commit. The next {s.latency_seconds:g} s of records are measured. Then the producer stops, and once "
        "every record is in the table the job is stopped.\n"
    )
    md += [
        f"- {LABELS[r.contender]}: "
        + LATENCY_RUNS[r.contender].format(members=s.members, trigger=s.latency_trigger)
        + "."
        for r in o.latency_runs
    ]
    md.append("")
    md.append(
        "How latency is measured, the same way for every contender and from its Delta table alone: "
        "latency of a row = `commitInfo.timestamp` of the Delta version that added the row's data file "
        "(the writer's clock when it committed that version) - the row's `kafka_timestamp` (the record's "
        "CreateTime, set by the producer when it was produced). Every measured row is read back with Spark with "
        "its `_metadata.file_path`, and each data file is given the version whose `add` action in "
        "`_delta_log/*.json` wrote it. Producer, broker and jobs share this machine's clock. p50 / p99 / max are "
        "over every measured row of the run; the producer lag is how far the producer fell behind its schedule "
        "at most (the offered load was late by that much).\n"
    )
    header = ["latency (ms)", "p50", "p99", "max", "measured rows", "warm-up records", "producer lag ms", ""]
    md.append(md_table(header, _latency_run_rows(o)) + "\n")
    for run in o.latency_runs:
        lat = o.latencies.get(run.contender)
        if lat is None or not run.result.ok:
            continue
        if lat.samples != run.measured or lat.unmatched or lat.rewritten:
            md.append(
                f"**Note**, {LABELS[run.contender]}: {lat.samples:,} measured rows in the table for {run.measured:,} "
                f"measured records produced; {lat.unmatched:,} rows in a file no add action names (left out); "
                f"{lat.rewritten:,} rows in files a later DELETE rewrote (timed to that commit).\n"
            )
    if not o.latencies:
        return
    runs = [r for r in o.latency_runs if r.contender in o.latencies]
    png = latency_windows_chart(
        {LABELS[r.contender]: o.latencies[r.contender].windows for r in runs},
        s.latency_window_seconds,
        f"produce -> Delta commit, p50 and p99 per {s.latency_window_seconds:g} s window "
        f"({s.latency_rate:,} records/s, {s.latency_partitions} partitions)",
        charts / "latency-windows.png",
    )
    md.append(
        f"p50 and p99 per {s.latency_window_seconds:g} s window: the rows are grouped by produce time, from the "
        "first measured record (0 s), so a window holds the records offered during those seconds and its latency "
        "says how long they took to be committed; a job that fell behind and catches up shows as a tail of "
        "high windows. The per-window numbers are in the JSON (`latency.contenders.<name>.windows`).\n"
    )
    md.append(f"![latency per window]({png.parent.name}/{png.name})\n")
    md.append(f"<details><summary>p50 / p99 per window (ms)</summary>\n\n{_window_table(o)}\n\n</details>\n")
    png = latency_cdf_chart(
        {LABELS[r.contender]: o.latencies[r.contender].commit_ms for r in runs},
        "produce -> Delta commit over the whole measured run",
        charts / "latency-cdf.png",
    )
    md.append(f"![latency distribution]({png.parent.name}/{png.name})\n")


def latency_json(o: Outcome) -> dict[str, Any] | None:
    """The latency phase's numbers: per contender the whole-run figures and the per-window series."""
    if not o.latency_runs:
        return None
    s = o.settings
    contenders: dict[str, Any] = {}
    for run in o.latency_runs:
        lat = o.latencies.get(run.contender)
        entry: dict[str, Any] = {
            "ok": run.result.ok and lat is not None,
            "error": run.result.error or o.latency_errors.get(run.contender, ""),
            "topic": run.topic,
            "produced": run.produced,
            "warmup_records": run.warmup_records,
            "measured_records": run.measured,
            "producer_lag_ms": run.producer_lag_s * 1000,
        }
        if lat is not None:
            entry |= {
                "samples": lat.samples,
                "unmatched": lat.unmatched,
                "rewritten": lat.rewritten,
                "p50_ms": finite_or_none(lat.pct(50)),
                "p99_ms": finite_or_none(lat.pct(99)),
                "max_ms": finite_or_none(lat.pct(100)),
                "windows": [
                    {k: finite_or_none(v) if isinstance(v, float) else v for k, v in asdict(w).items()}
                    for w in lat.windows
                ],
            }
            if lat.proxy_ms is not None:
                entry |= {
                    "proxy": "ingested_at - kafka_timestamp",
                    "proxy_p50_ms": finite_or_none(lat.pct(50, "proxy")),
                    "proxy_p99_ms": finite_or_none(lat.pct(99, "proxy")),
                    "proxy_max_ms": finite_or_none(lat.pct(100, "proxy")),
                }
        contenders[run.contender] = entry
    return {
        "method": LATENCY_METHOD,
        "rate": s.latency_rate,
        "partitions": s.latency_partitions,
        "seconds": s.latency_seconds,
        "warmup_seconds": s.latency_warmup_seconds,
        "window_seconds": s.latency_window_seconds,
        "spark_trigger": s.latency_trigger,
        "contenders": contenders,
    }
