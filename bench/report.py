"""The benchmark report: what a run collected (`Outcome`), rendered as markdown with its charts,
plus a JSON file of the raw numbers (the smoke test reads it).

Called by `bench.run` at the end. Every failed run is listed with its error: a contender
without a number says so, it is never left out silently.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.charts import latency_chart, scaling_chart, throughput_chart
from bench.contenders import LABELS, RunResult
from bench.figures import BASE, Spread, fmt, fmt_rate, pairwise_ratios, spreads
from bench.latency import LatencyRun
from bench.settings import BenchSettings
from bench.share_bound import bound
from bench.verify import Latency

WINDOWS = {
    "sharelake": "rows written / (last Delta commit - start of run_ingest, once the SparkSession is up): "
    "start-up checks, group join and the whole drain; not the JVM start, not the idle timeout that ends the run",
    "spark-kafka-source": "rows in the table / (last Delta commit - the job's start, once the SparkSession is up): "
    "the same window as Sharelake's; Trigger.AvailableNow, consumer-group reads of the partitions (not a share group)",
    "share-consumer-drain": "records / (last record - first record), M threads, explicit ACCEPT per record and "
    "commit_sync per poll, nothing written: the Python client's ceiling",
    "perf-tool": "the tool's nMsg.sec: records / (end - start), its window includes the group join; Java client, "
    "implicit acknowledgement, nothing written (no Delta table): the broker's ceiling here",
}


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
    latency_run: LatencyRun | None = None
    latency: Latency | None = None
    locks: int = 0
    locks_source: str = ""
    produce_rates: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _cell(s: Spread | None) -> str:
    if s is None:
        return "not run"
    if not s.rates:
        return "failed"
    return f"{fmt_rate(s.median)} ({fmt_rate(s.low)} - {fmt_rate(s.high)})" + (
        f", {len(s.failures)} failed" if s.failures else ""
    )


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
    rows = [[LABELS[c], *[_cell(cells.get((c, p, s.members))) for p in s.partitions]] for c in s.contenders]
    md.append(_table(header, rows) + "\n")
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
        md.append(_table(["ratio", *[f"{p} partition(s)" for p in s.partitions]], rows) + "\n")


def _latency(o: Outcome, md: list[str], charts: Path) -> None:
    s, run, lat = o.settings, o.latency_run, o.latency
    md.append(f"## Sharelake latency at {s.latency_rate:,} records/s offered for {s.latency_seconds:g} s\n")
    if run is None:
        md.append("Not run (Sharelake not among the contenders).\n")
        return
    if not run.result.ok or lat is None:
        md.append(f"**Failed**: {run.result.error}\n")
        return
    measured = run.produced - run.warmup_records
    md.append(
        f"{s.latency_partitions} partition(s), {s.members} member(s), continuous mode, stopped by SIGTERM once every "
        f"record was in the table. {run.warmup_records:,} warm-up records (at least "
        f"{s.latency_warmup_seconds:g} s, and until the job's first Delta commit) left out; "
        f"{measured:,} measured; the producer fell behind its schedule by at most "
        f"{run.producer_lag_s * 1000:,.0f} ms.\n"
    )
    md.append(
        "Latency = `commitInfo.timestamp` of the Delta version holding the row - the row's `kafka_timestamp` "
        "(produce time). Rows are joined to their commit through the `ingested_at` stamp that each Sharelake "
        "commit records in its userMetadata (`ingested_at_us`). The `ingested_at` column itself (stamped "
        "before the write) is shown as the lower proxy.\n"
    )
    rows = [
        [
            "produce -> Delta commit",
            fmt(lat.pct("commit", 50), 0),
            fmt(lat.pct("commit", 99), 0),
            fmt(lat.pct("commit", 100), 0),
            f"{len(lat.commit_ms):,}",
        ],
        [
            "produce -> ingested_at (proxy)",
            fmt(lat.pct("ingested", 50), 0),
            fmt(lat.pct("ingested", 99), 0),
            fmt(lat.pct("ingested", 100), 0),
            f"{len(lat.ingested_ms):,}",
        ],
    ]
    md.append(_table(["latency (ms)", "p50", "p99", "max", "rows"], rows) + "\n")
    if lat.samples != measured or lat.unmatched:
        md.append(
            f"**Note**: {lat.samples:,} measured rows in the table for {measured:,} produced; "
            f"{lat.unmatched} rows matched no commit.\n"
        )
    png = latency_chart(
        lat.commit_ms,
        lat.pct("commit", 50),
        lat.pct("commit", 99),
        "Sharelake: produce -> Delta commit",
        charts / "latency.png",
    )
    md.append(f"![latency]({png.parent.name}/{png.name})\n")


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
    md.append(_table(["run", "JVM MiB", "Python MiB", "tree MiB", "records/s"], rows) + "\n")


def _share_bound(o: Outcome, md: list[str]) -> None:
    md.append("## The share-group bound\n")
    md.append(
        f"`share.partition.max.record.locks` = {o.locks} ({o.locks_source}). A partition never has more records "
        "acquired-and-undecided than that, and Sharelake holds a poll's locks for a whole cycle (acquire -> Delta "
        "commit -> ACCEPT), so records/s <= locks x partitions / cycle. RunSummary gives only the longest cycle "
        "(`max_cycle_s`, so the bound with it is the lower one); the mean interval between data commits stands "
        "in for the mean cycle (it under-estimates a cycle by the time a poll waits in the buffer).\n"
    )
    rows = []
    for r in o.results:
        if r.contender != BASE or not r.ok or r.phase == "latency":
            continue
        mean_c, max_c = r.details.get("mean_commit_interval_s", math.nan), r.details.get("max_cycle_s", math.nan)
        rows.append(
            [
                f"{r.phase}, {r.partitions} p, {r.members} m",
                fmt(mean_c, 2),
                fmt(max_c, 1),
                fmt(bound(o.locks, r.partitions, mean_c), 0),
                fmt(bound(o.locks, r.partitions, max_c), 0),
                fmt_rate(r.rate),
            ]
        )
    header = ["run", "mean commit interval s", "max_cycle_s", "bound (mean)", "bound (max cycle)", "achieved records/s"]
    md.append(_table(header, rows) + "\n")


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
    rows = [[str(m), *[_cell(cells.get((p, m))) for p in s.scaling_partitions]] for m in s.scaling_members]
    md.append(_table(["members", *[f"{p} partition(s)" for p in s.scaling_partitions]], rows) + "\n")
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
        _table(["contender", "phase", "partitions", "members", "expected", "rows", "duplicates", ""], rows) + "\n"
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
        "One embedded single-node Kafka broker; every contender in turn on the same topics. "
        f"Total {o.seconds / 60:.1f} min.\n"
    )
    md.append("## Machine and versions\n")
    md.append(_table(["", ""], [[k, v] for k, v in o.machine.items()]) + "\n")
    md.append("Other processes on the machine were not stopped: read the load average above.\n")
    md.append("## Settings\n")
    md.append(_table(["setting", "value"], [[k, f"`{v}`"] for k, v in s.as_table().items()]) + "\n")
    if o.produce_rates:
        rates = ", ".join(f"{t}: {fmt_rate(r)} records/s" for t, r in o.produce_rates.items())
        md.append(
            f"Workload: ~250-byte JSON values (`bench/workload.py`), keyed, produced before the runs ({rates}).\n"
        )
    _throughput(o, md, charts)
    _latency(o, md, charts)
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
    )
    return "\n".join(md)


def _jsonable(o: Outcome) -> dict[str, Any]:
    def run(r: RunResult) -> dict[str, Any]:
        d = asdict(r)
        d["rate"] = r.rate if math.isfinite(r.rate) else None
        d["table"] = str(r.table) if r.table else None
        d["log"] = str(r.log) if r.log else None
        return d

    lat = o.latency
    return {
        "settings": o.settings.as_table(),
        "machine": o.machine,
        "results": [run(r) for r in o.results],
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
        "latency": None
        if lat is None
        else {
            "samples": lat.samples,
            "unmatched": lat.unmatched,
            "p50_commit_ms": lat.pct("commit", 50),
            "p99_commit_ms": lat.pct("commit", 99),
            "p50_ingested_ms": lat.pct("ingested", 50),
            "p99_ingested_ms": lat.pct("ingested", 99),
        },
        "locks": o.locks,
        "seconds": o.seconds,
    }


def write_report(o: Outcome, path: Path) -> Path:
    """Write `path` (markdown), its charts in `<stem>-charts/` and `<stem>.json`; return `path`."""
    charts = path.parent / f"{path.stem}-charts"
    charts.mkdir(parents=True, exist_ok=True)
    path.write_text(render(o, charts))
    path.with_suffix(".json").write_text(json.dumps(_jsonable(o), indent=2, default=str))
    return path
