"""The benchmark report: what a run collected (`Outcome`), rendered as markdown with its charts,
plus a JSON file of the raw numbers (the smoke test reads it).

Written through `bench.figures.save_report`. Every failed run is
listed with its error: a contender without a number says so, it is never left out silently.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.charts import scaling_chart, throughput_chart
from bench.contenders import LABELS
from bench.cpu_report import cpu_json, cpu_section
from bench.cycle import cycle_json, cycle_section
from bench.failover import failover_json, failover_section
from bench.figures import (
    BASE,
    Spread,
    finite_median,
    finite_or_none,
    fmt,
    fmt_rate,
    kv_table,
    md_table,
    pairwise_ratios,
    save_report,
    scheduled,
    spread_cell,
    spreads,
)
from bench.latency_report import latency_json, latency_section
from bench.outcome import Outcome

WINDOWS = {
    "sharelake": "rows written / (last Delta commit - start of run_ingest, once the SparkSession is up): "
    "start-up checks, the warm-up (the group join runs during it) and the whole drain; not the JVM start, not the "
    "idle timeout that ends the run",
    "sharelake-before": "as Sharelake's, the same job with --before-sets on top (the path before a change)",
    "sharelake-consumer-group": "as Sharelake's, the same job with kafka.group_type = consumer: a classic consumer "
    "group, offsets committed to Kafka after each Delta commit, at most one member per partition",
    "spark-kafka-source": "rows in the table / (last Delta commit - the job's start, once the SparkSession is up): "
    "the same window as Sharelake's; Trigger.AvailableNow, consumer-group reads of the partitions (not a share group)",
    "share-consumer-drain": "records / (last record - first record), M threads, explicit ACCEPT per record and "
    "commit_sync per poll, nothing written: the Python client's ceiling",
    "sink-ceiling": "rows in the table / (last Delta commit - the job's start, once the SparkSession is up, the "
    "rows are built in Arrow and a warm-up batch is written to a table of its own): the same rows, appended in "
    "batches of the share group's window (locks x partitions), through Sharelake's own write path (frame, "
    "one-parse job, Delta append), no Kafka: the limit of Spark plus Delta for this shape here, and its steady "
    "rate the share-group bound",
    "perf-tool": "the tool's nMsg.sec: records / (end - start), its window includes the group join; Java client, "
    "implicit acknowledgement, nothing written (no Delta table): the broker's ceiling here",
}


def _ratio_cell(s: Spread) -> str:
    if not s.rates:
        return "n/a (a run failed)"
    return f"{s.median:.3g} ({s.low:.3g} - {s.high:.3g})"


def _throughput(o: Outcome, md: list[str], charts: Path) -> None:
    s = o.settings
    cells = spreads(o.results, "throughput")
    md.append(f"## Throughput: drain {s.records:,} records, {s.members} member(s)/thread(s)\n")
    md.append("records/s, median of the runs (min - max):\n")
    header = ["contender", *[f"{p} partition(s)" for p in s.partitions]]
    rows = [[LABELS[c], *[spread_cell(cells.get((c, p, s.members))) for p in s.partitions]] for c in s.contenders]
    md.append(md_table(header, rows) + "\n")
    png = throughput_chart(cells, list(s.contenders), LABELS, charts / "throughput.png")
    md.append(f"![throughput]({png.parent.name}/{png.name})\n")
    md.append("What each number measures:\n")
    md += [f"- {LABELS[c]}: {WINDOWS[c]}." for c in s.contenders]
    md.append("")
    peers = [c for c in s.contenders if c != BASE]
    if BASE in s.contenders and peers:
        md.append("### Sharelake / peer, pair by pair\n")
        md.append(
            "Run i of Sharelake divided by run i of the peer (the runs of one round ran back to back), "
            "median (min - max):\n"
        )
        rows = [
            [f"(a) / {LABELS[c]}", *[_ratio_cell(pairwise_ratios(o.results, c, p)) for p in s.partitions]]
            for c in peers
        ]
        md.append(md_table(["ratio", *[f"{p} partition(s)" for p in s.partitions]], rows) + "\n")
    _scheduled(o, md)
    md += cpu_section(o.results, s)


def _scheduled(o: Outcome, md: list[str]) -> None:
    """The same runs, timed as a scheduler sees a drain: from the process start, JVM included."""
    s, runs = o.settings, scheduled(o.results)
    if not runs:
        return
    cells = spreads(runs, "scheduled")
    md.append("### Scheduled drain: process start to the last Delta commit\n")
    md.append(
        "The same runs, timed from the job's process start (the JVM, the SparkSession, the start-up) to its "
        "last Delta commit: what a scheduler waits for. records/s, median (min - max):\n"
    )
    contenders = [c for c in s.contenders if any(r.contender == c for r in runs)]
    rows = [[LABELS[c], *[spread_cell(cells.get((c, p, s.members))) for p in s.partitions]] for c in contenders]
    md.append(md_table(["contender", *[f"{p} partition(s)" for p in s.partitions]], rows) + "\n")
    if BASE in contenders:
        rows = [
            [f"(a) / {LABELS[c]}", *[_ratio_cell(pairwise_ratios(runs, c, p, "scheduled")) for p in s.partitions]]
            for c in contenders
            if c != BASE
        ]
        md.append(md_table(["ratio, pair by pair", *[f"{p} partition(s)" for p in s.partitions]], rows) + "\n")


def _lock_caps(o: Outcome, md: list[str]) -> None:
    """Sharelake's throughput with the group's record locks held at a stock broker's caps."""
    s = o.settings
    if not s.lock_caps or BASE not in s.contenders:
        return
    md.append("## Sharelake under a stock broker's record-lock cap\n")
    md.append(
        "The throughput table above has the group's `share.partition.max.record.locks` raised to the broker's cap "
        f"(`group.share.max.partition.max.record.locks` = {o.locks} on the embedded broker). Most brokers keep "
        "Kafka's defaults: a group at 2,000 locks per partition, and a cap of 4,000, which is what Sharelake's "
        'default `kafka.partition_max_record_locks = "max"` reaches there. One run each, records/s:\n'
    )
    tp = spreads(o.results, "throughput")
    rows = [[f"{o.locks:,} (this broker's cap)", *[spread_cell(tp.get((BASE, p, s.members))) for p in s.partitions]]]
    for cap in s.lock_caps:
        cells = spreads(o.results, f"locks-{cap}")
        rows.append([f"{cap:,}", *[spread_cell(cells.get((BASE, p, s.members))) for p in s.partitions]])
    md.append(md_table(["record locks per partition", *[f"{p} partition(s)" for p in s.partitions]], rows) + "\n")


def _memory(o: Outcome, md: list[str]) -> None:
    s = o.settings
    runs = [r for r in o.results if r.contender == BASE and r.phase == "memory"]
    md.append("## Sharelake driver memory while draining a backlog\n")
    md.append(
        "Peak RSS of the spark-submit process tree, sampled every 0.5 s with psutil (JVM = java processes, "
        "Python = the Python driver and any Python workers).\n"
    )
    if not runs:
        runs = [r for r in o.results if r.contender == BASE and r.phase == "throughput" and r.ok]
        md.append(f"No dedicated memory run (`--memory-records 0`): peaks over the {len(runs)} throughput run(s).\n")
    rows = []
    for r in runs:
        d = r.details
        if not r.ok:
            rows.append([f"{r.phase}, {r.partitions} partition(s)", "failed", "", "", r.error[:200]])
            continue
        rows.append(
            [
                f"{r.phase}, {r.partitions} partition(s), {r.records:,} records",
                fmt(d.get("jvm_rss_mib"), 0),
                fmt(d.get("python_rss_mib"), 0),
                fmt(d.get("tree_rss_mib"), 0),
                fmt_rate(r.rate),
            ]
        )
    if s.memory_records and runs:
        md.append(f"Backlog: {s.memory_records:,} records on {s.memory_partitions} partition(s).\n")
    md.append(md_table(["run", "JVM MiB", "Python MiB", "tree MiB", "records/s"], rows) + "\n")


def _share_bound(o: Outcome, md: list[str]) -> None:
    md.append("## The share-group bound\n")
    md.append(
        f"`share.partition.max.record.locks` = {o.locks} ({o.locks_source}). A partition never has more records "
        "acquired-and-undecided than that, and a record's lock is held from its poll to the ACCEPT after the Delta "
        "commit holding it, so on P partitions a drain commits at most a window of locks x P records per cycle: "
        "records/s <= locks x P / write_time(locks x P). The write time is the sink ceiling's (e), which writes "
        "batches of exactly that window through Sharelake's write path with no Kafka, after a warm-up batch: its "
        "steady rate (the rows of its commits after the first / the time from its first commit to its last) is "
        "the bound. Each drain's steady rate is measured the same way, and reported as a fraction of it (the "
        "target is 0.85). Spark's source is not held to the bound (it reads a backlog as one batch).\n"
    )
    by_cell: dict[tuple[str, int], list[float]] = {}
    for r in o.results:
        if r.phase == "throughput" and r.ok:
            by_cell.setdefault((r.contender, r.partitions), []).append(r.details.get("steady_rate", math.nan))
    rows = []
    for p in o.settings.partitions:
        ceiling = finite_median(by_cell.get(("sink-ceiling", p), []))
        for name in (c for c in o.settings.contenders if c != "sink-ceiling"):
            steady = by_cell.get((name, p))
            if not steady:
                continue
            fractions = [v / ceiling for v in steady if math.isfinite(v) and math.isfinite(ceiling)]
            rows.append(
                [
                    f"{p}",
                    f"{o.locks * p:,}",
                    _steady(ceiling),
                    LABELS.get(name, name),
                    " / ".join(_steady(v) for v in steady),
                    " / ".join(fmt(f, 2) for f in fractions) or "-",
                ]
            )
    header = ["partitions", "window", "bound (e) rec/s", "contender", "steady rec/s per run", "of the bound"]
    md.append(md_table(header, rows) + "\n")
    md.append("A contender with one commit (Spark's source drains a backlog in one batch) has no steady rate (`-`).\n")


def _steady(rate: float) -> str:
    """A steady rate's cell: `-` when the run had none (one commit) or failed."""
    return fmt_rate(rate) if math.isfinite(rate) else "-"


def _scaling(o: Outcome, md: list[str], charts: Path) -> None:
    s = o.settings
    md.append(f"## Sharelake scaling: pump.members x partitions ({s.records:,} records)\n")
    tp, sc = spreads(o.results, "throughput"), spreads(o.results, "scaling")
    cells: dict[tuple[int, int], Spread] = {}
    for p in s.scaling_partitions:
        for m in s.scaling_members:
            cell = sc.get((BASE, p, m)) or tp.get((BASE, p, m))
            if cell is not None:
                cells[(p, m)] = cell
    rows = [[str(m), *[spread_cell(cells.get((p, m))) for p in s.scaling_partitions]] for m in s.scaling_members]
    md.append(md_table(["members", *[f"{p} partition(s)" for p in s.scaling_partitions]], rows) + "\n")
    md.append("Cells with members = the throughput phase's members reuse its runs.\n")
    if any(c.rates for c in cells.values()):
        png = scaling_chart({k: v for k, v in cells.items() if v.rates}, charts / "scaling.png")
        md.append(f"![scaling]({png.parent.name}/{png.name})\n")


def _checks(o: Outcome, md: list[str]) -> None:
    md.append("## Delta table checks\n")
    md.append("Every Delta table read back with Spark after the runs: rows and duplicate (topic, partition, offset).\n")
    rows = [
        [
            LABELS[t.run.contender],
            t.run.phase,
            str(t.run.partitions),
            str(t.run.members),
            f"{t.expected:,}",
            f"{t.rows:,}",
            str(t.duplicates),
            "ok" if t.ok else "**MISMATCH**",
        ]
        for t in o.tables
    ]
    md.append(
        md_table(["contender", "phase", "partitions", "members", "expected", "rows", "duplicates", ""], rows) + "\n"
    )


def _failures(o: Outcome, md: list[str]) -> None:
    bad = [r for r in o.results if not r.ok]
    md.append("## Failed runs\n")
    if not bad:
        md.append("None.\n")
        return
    for r in bad:
        err = r.error.replace("\n", " / ")[:1500]
        md.append(f"- {LABELS[r.contender]}, {r.phase}, {r.partitions} partition(s), {r.members} member(s): {err}")
    md.append("")


def render(o: Outcome, charts: Path) -> str:
    s = o.settings
    md = [f"# Sharelake benchmark: {s.size} size, {o.started}\n"]
    if s.size == "smoke":
        md.append("> **Smoke size**: this run only checks that the harness works. Its numbers mean nothing.\n")
    md.append(
        "One embedded single-node Kafka broker; every contender in turn on the same topics (the failover "
        "phase alone runs on a 3-node cluster). "
        f"Total {o.seconds / 60:.1f} min.\n"
    )
    md.append("## Machine and versions\n")
    md.append(kv_table(o.machine) + "\n")
    md.append("Other processes on the machine were not stopped: read the load average above.\n")
    md.append("## Settings\n")
    md.append(kv_table({k: f"`{v}`" for k, v in s.as_table().items()}, ("setting", "value")) + "\n")
    if o.produce_rates:
        rates = ", ".join(f"{t}: {fmt_rate(r)} records/s" for t, r in o.produce_rates.items())
        md.append(
            f"Workload: ~250-byte JSON values (`devkit/workload.py`), keyed, produced before the runs ({rates}).\n"
        )
    _throughput(o, md, charts)
    _lock_caps(o, md)
    md += cycle_section(o.cycles)
    latency_section(o, md, charts)
    md += failover_section(o.failover)
    _memory(o, md)
    _share_bound(o, md)
    _scaling(o, md, charts)
    _checks(o, md)
    _failures(o, md)
    md.append("## Notes\n")
    md.append(
        "- (d) does not write Delta (and (c) writes nothing): they bound what the client and the broker can do "
        "here, not what an ingest into Delta can do.\n"
        "- (b) reads with Spark's Kafka source, i.e. plain partition reads without share-group locks or "
        "acknowledgements; its spark-token-provider-kafka jar is 4.0.0 (see conf/maven/bench-jars.pom.xml).\n"
        "- The Sharelake table also holds `headers`, `delivery_count`, `ingested_at` and `batch_id`; the Spark "
        "table holds the common layout only (topic, partition, offset, key, kafka_timestamp + the JSON fields).\n"
        "- In the latency phase (b) is the anchor: what Spark's own Kafka source reaches on the same offered load, "
        "partitions and machine, measured from its table the same way as Sharelake's.\n"
    )
    return "\n".join(md)


def _jsonable(o: Outcome) -> dict[str, Any]:
    return {
        "settings": o.settings.as_table(),
        "machine": o.machine,
        "results": [{**asdict(r), "rate": finite_or_none(r.rate)} for r in o.results],
        "tables": [
            {
                "contender": t.run.contender,
                "phase": t.run.phase,
                "partitions": t.run.partitions,
                "expected": t.expected,
                "rows": t.rows,
                "duplicates": t.duplicates,
                "ok": t.ok,
            }
            for t in o.tables
        ],
        "latency": latency_json(o),
        "cpu": cpu_json(o.results, o.settings),
        "cycle": cycle_json(o.cycles),
        "failover": failover_json(o.failover),
        "locks": o.locks,
        "seconds": o.seconds,
    }


def write_report(o: Outcome, results_dir: Path, stem: str) -> Path:
    """Write `<stem>.md` with its charts in `<stem>-charts/`, and `<stem>.json`; the markdown's path."""
    charts = results_dir / f"{stem}-charts"
    charts.mkdir(parents=True, exist_ok=True)
    return save_report(results_dir, stem, render(o, charts), _jsonable(o))
