"""The report of `python -m bench formats`: medians over the rounds, ratios pair by pair, the three targets.

It is rendered once every table is checked; it writes bench/results/<date>-formats.md and a .json
of the raw numbers beside it. A run whose table failed a check has no rate (it is
listed with the check that failed), so a ratio of its round is left out and says so.

The targets, as measured here:
- Avro: Sharelake Avro / Sharelake JSON, run i against run i, median >= 0.9.
- Avro's ratio to its Spark peer no worse than JSON's: per round q = (SL Avro / Spark Avro) /
  (SL JSON / Spark JSON); met when the median q >= 1.
- Routing: per round, cost = 1 - routed records/s / the best of the round's three single-topic
  records/s (each the same window: rows / (last commit - start of run_ingest); the routed run lands
  3N rows, each single run N); met when the median cost <= 10%. Also given: the routed run against
  the three single runs one after the other (3N rows / the sum of their windows), and the same cost
  on the rates after each run's first micro-batch (without the start-up every run pays once, which
  the routed run spreads over three times the rows): a cross-check with its own verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.figures import (
    Spread,
    finite_median,
    finite_or_none,
    finite_values,
    fmt,
    fmt_rate,
    kv_table,
    md_table,
    save_report,
    spread_cell,
)
from bench.formats_outcome import ROUTES, FormatRun, FormatsOutcome

LABELS = {
    "sl-json": "(1) Sharelake, JSON",
    "sl-avro": "(2) Sharelake, Avro (registry)",
    "spark-json": "(3) Spark Kafka source, from_json",
    "spark-avro": "(4) Spark Kafka source, from_avro",
    "sl-routed": f"(5) Sharelake, {ROUTES} topics routed to {ROUTES} tables",
    "sl-single": "(5s) Sharelake, one routing topic alone",
}
AVRO_TARGET = 0.9
ROUTING_COST_TARGET = 0.10
# run summary timings that are not the sink's per-step seconds (summed over the run's batches)
NOT_STEPS = {"seconds", "max_cycle_s", "mean_cycle_s", "last_cycle_s", "start_s", "first_record_s", "ingest_s"}
NOT_STEPS |= {"acks_s", "mean_commit_interval_s"}
WHOLE_RUN = ("start_s", "first_record_s", "ingest_s", "acks_s")  # shown beside the steps


def _runs(o: FormatsOutcome, key: str, i: int) -> list[FormatRun]:
    return [r for r in o.runs if r.key == key and r.round == i]


def _rate(o: FormatsOutcome, key: str, i: int) -> float:
    runs = _runs(o, key, i)
    return runs[0].rate if runs else math.nan


def _div(a: float, b: float) -> float:
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else math.nan


def _spread(values: list[float]) -> Spread:
    s = Spread()
    for v in values:
        if math.isfinite(v):
            s.rates.append(v)
        else:
            s.failures.append("a run of the pair failed or failed its check")
    return s


def _scheduled(o: FormatsOutcome, key: str, i: int) -> float:
    """A run's records / (its process start -> its last commit): the drain as a scheduler sees it."""
    runs = _runs(o, key, i)
    return _div(float(runs[0].result.records), _detail(runs[0], "scheduled_s")) if runs else math.nan


def _detail(run: FormatRun, key: str) -> float:
    v = run.result.details.get(key, math.nan)
    return v if run.ok else math.nan


def per_round(o: FormatsOutcome) -> dict[str, list[float]]:
    """Every pairwise figure, one value per round (NaN where a run of the pair has no rate)."""
    out: dict[str, list[float]] = {}

    def put(name: str, value: float) -> None:
        out.setdefault(name, []).append(value)

    for i in range(o.settings.runs):
        a, b, c, d = (_rate(o, k, i) for k in ("sl-json", "sl-avro", "spark-json", "spark-avro"))
        routed = _runs(o, "sl-routed", i)
        singles = _runs(o, "sl-single", i)
        e = routed[0].rate if routed else math.nan
        rates = [r.rate for r in singles]
        best = max(rates) if rates and all(map(math.isfinite, rates)) else math.nan
        seq_s = sum(r.result.seconds for r in singles) if singles and all(r.ok for r in singles) else math.nan
        seq = _div(float(sum(r.result.records for r in singles)), seq_s)
        put("avro_over_json", _div(b, a))
        put("json_over_spark", _div(a, c))
        put("avro_over_spark", _div(b, d))
        put("avro_gap", _div(_div(b, d), _div(a, c)))
        put("spark_avro_over_json", _div(d, c))
        sa, sb, sc, sd = (_scheduled(o, k, i) for k in ("sl-json", "sl-avro", "spark-json", "spark-avro"))
        put("json_over_spark_scheduled", _div(sa, sc))
        put("avro_over_spark_scheduled", _div(sb, sd))
        put("routed_over_best_single", _div(e, best))
        put("routing_cost", 1 - _div(e, best))
        put("routed_over_sequential", _div(e, seq))
        drains = [_detail(r, "after_first_batch_rate") for r in singles]
        best_drain = max(drains) if drains and all(map(math.isfinite, drains)) else math.nan
        routed_drain = _detail(routed[0], "after_first_batch_rate") if routed else math.nan
        put("routed_over_best_single_drain", _div(routed_drain, best_drain))
        put("routing_cost_drain", 1 - _div(routed_drain, best_drain))
        put("best_single_rate", best)
        put("sequential_rate", seq)
        put("sequential_seconds", seq_s)
    return out


def _ratio_cell(values: list[float], digits: int = 3) -> str:
    s = _spread(values)
    if not s.rates:
        return "n/a"
    cell = f"{s.median:.{digits}g} ({s.low:.{digits}g} - {s.high:.{digits}g})"
    return cell + (f", {len(s.failures)} round(s) left out" if s.failures else "")


def _rate_cell(runs: list[FormatRun]) -> str:
    return spread_cell(_spread([r.rate for r in runs]))


def _drain_cell(values: list[float]) -> str:
    """The median rate after the first batch; n/a when no run had two batches (or a rate)."""
    m = finite_median(values)
    return fmt_rate(m) if math.isfinite(m) else "n/a (a single batch)"


def _contenders(o: FormatsOutcome, md: list[str]) -> None:
    s = o.settings
    md.append(f"## Throughput, {s.runs} round(s)\n")
    md.append("records/s, median of the rounds (min - max); the last column: after the run's first micro-batch.\n")
    rows = []
    for key in ("sl-json", "sl-avro", "spark-json", "spark-avro", "sl-routed"):
        runs = [r for r in o.runs if r.key == key]
        drain = [_detail(r, "after_first_batch_rate") for r in runs]
        records = runs[0].result.expected if runs else 0
        rows.append([LABELS[key], f"{records:,}", _rate_cell(runs), _drain_cell(drain) if key.startswith("sl") else ""])
    for k in range(ROUTES):
        topic = o.topics[f"route-{k}"]
        runs = [r for r in o.runs if r.key == "sl-single" and r.topics == [topic.name]]
        drain = [_detail(r, "after_first_batch_rate") for r in runs]
        rows.append([f"{LABELS['sl-single']}: {topic.name}", f"{topic.count:,}", _rate_cell(runs), _drain_cell(drain)])
    md.append(md_table(["contender", "records", "records/s", "records/s after the first batch"], rows) + "\n")
    fig = {k: finite_median(v) for k, v in per_round(o).items()}
    md.append(
        f"The {ROUTES} single-topic runs one after the other: {fmt_rate(fig['sequential_rate'])} records/s "
        f"(their {sum(t.count for k, t in o.topics.items() if k.startswith('route')):,} rows / the sum of their "
        f"windows, median {fmt(fig['sequential_seconds'])} s); the best of them per round: "
        f"{fmt_rate(fig['best_single_rate'])} records/s (median).\n"
    )


RATIOS = [
    ("avro_over_json", "(2) / (1): Sharelake Avro / Sharelake JSON"),
    ("json_over_spark", "(1) / (3): Sharelake JSON / its Spark peer"),
    ("avro_over_spark", "(2) / (4): Sharelake Avro / its Spark peer"),
    ("avro_gap", "[(2) / (4)] / [(1) / (3)]: Avro's ratio to its peer over JSON's"),
    ("spark_avro_over_json", "(4) / (3): Spark from_avro / Spark from_json"),
    ("json_over_spark_scheduled", "(1) / (3) scheduled: process start -> last commit, JVM included"),
    ("avro_over_spark_scheduled", "(2) / (4) scheduled: process start -> last commit, JVM included"),
    ("routed_over_best_single", "(5) / best (5s) of the round"),
    ("routing_cost", "routing cost: 1 - (5) / best (5s)"),
    ("routed_over_sequential", "(5) / the three (5s) one after the other"),
    ("routed_over_best_single_drain", "(5) / best (5s), both after the first batch"),
    ("routing_cost_drain", "routing cost after the first batch: 1 - (5) / best (5s)"),
]


def _ratios(o: FormatsOutcome, md: list[str]) -> None:
    fig = per_round(o)
    md.append("## Ratios, pair by pair\n")
    md.append(
        "Run i of one against run i of the other (they ran in the same round), median (min - max), and per round:\n"
    )
    header = ["ratio", "median (min - max)", *[f"round {i}" for i in range(o.settings.runs)]]
    rows = [[label, _ratio_cell(fig[name]), *[fmt(v, 3) for v in fig[name]]] for name, label in RATIOS]
    md.append(md_table(header, rows) + "\n")


def _timings(o: FormatsOutcome, a: str, b: str) -> list[tuple[str, float, float]]:
    """(run summary timing or count, median over a's runs, median over b's runs): the whole-run
    timings, then the sink's steps (seconds summed over the run's batches), then the commits."""
    ra = [r for r in o.runs if r.key == a and r.ok]
    rb = [r for r in o.runs if r.key == b and r.ok]
    if not ra or not rb:
        return []
    details = ra[0].result.details
    steps = [k for k in details if k.endswith("_s") and k not in NOT_STEPS]
    out = []
    for k in (*WHOLE_RUN, *steps, "cycles", "data_commits"):
        va = finite_median([r.result.details.get(k, math.nan) for r in ra])
        vb = finite_median([r.result.details.get(k, math.nan) for r in rb])
        out.append((k, va, vb))
    return out


def _grew(timings: list[tuple[str, float, float]], scale: float = 1.0) -> str:
    """The sink steps whose time grew most from a to b (b's divided by `scale`), as text."""
    steps = [(k, va, vb / scale) for k, va, vb in timings if k not in WHOLE_RUN and k.endswith("_s")]
    steps = [t for t in steps if math.isfinite(t[2] - t[1]) and t[2] - t[1] >= 0.05]
    steps.sort(key=lambda t: t[1] - t[2])
    return ", ".join(f"`{k}` {fmt(va, 1)} -> {fmt(vb, 1)} s" for k, va, vb in steps[:3]) or "none"


def _whole(timings: list[tuple[str, float, float]], key: str) -> tuple[float, float]:
    return next(((va, vb) for k, va, vb in timings if k == key), (math.nan, math.nan))


def _targets(o: FormatsOutcome, md: list[str]) -> dict[str, Any]:
    fig = {k: finite_median(v) for k, v in per_round(o).items()}
    avro, gap, cost, cost_drain = fig["avro_over_json"], fig["avro_gap"], fig["routing_cost"], fig["routing_cost_drain"]
    formats = _timings(o, "sl-json", "sl-avro")
    routing = _timings(o, "sl-single", "sl-routed")
    avro_b, json_b = fmt(o.topics["avro"].value_bytes, 0), fmt(o.topics["json"].value_bytes, 0)
    start_j, start_a = _whole(formats, "start_s")
    ingest_j, ingest_a = _whole(formats, "ingest_s")
    avro_cause = (
        f"start-up (start_s, with the warm-up) {fmt(start_j)} -> {fmt(start_a)} s, first record to drained "
        f"(ingest_s) {fmt(ingest_j)} -> {fmt(ingest_a)} s; the sink steps that grew most (seconds per run): "
        f"{_grew(formats)}; Spark's own from_avro / from_json (4)/(3): {fmt(fig['spark_avro_over_json'], 3)}; "
        f"values {avro_b} bytes in Avro, {json_b} in JSON"
    )
    gap_cause = (
        f"median (2)/(4) {fmt(fig['avro_over_spark'], 3)} against "
        f"(1)/(3) {fmt(fig['json_over_spark'], 3)}; (4)/(3) {fmt(fig['spark_avro_over_json'], 3)} "
        f"against (2)/(1) {fmt(avro, 3)} (what each gains or loses from Avro)"
    )
    drain_met = _met(cost_drain, lambda v: v <= ROUTING_COST_TARGET)
    drain_text = (
        f"cost {fmt(100 * cost_drain, 1)}% ({_verdict(drain_met)})"
        if math.isfinite(cost_drain)
        else "n/a (a run had a single batch)"
    )
    start_s, start_r = _whole(routing, "start_s")
    ingest_s, ingest_r = _whole(routing, "ingest_s")
    commits_s, commits_r = _whole(routing, "data_commits")
    route_cause = (
        f"start-up (start_s, with the warm-up of every table) single {fmt(start_s)} s, routed {fmt(start_r)} s; "
        f"first record to drained (ingest_s) single {fmt(ingest_s)} s for N rows, routed {fmt(ingest_r)} s for "
        f"{ROUTES}N ({fmt(ingest_r / ROUTES if math.isfinite(ingest_r) else math.nan)} s per N); Delta commits "
        f"single {fmt(commits_s, 0)}, routed {fmt(commits_r, 0)} over {ROUTES} tables; the sink steps that grew most "
        f"per N rows: {_grew(routing, ROUTES)}; cross-check after the first batch: {drain_text}"
    )
    results = {
        "avro_over_json": (avro, _met(avro, lambda v: v >= AVRO_TARGET)),
        "avro_gap": (gap, _met(gap, lambda v: v >= 1.0)),
        "routing_cost": (cost, _met(cost, lambda v: v <= ROUTING_COST_TARGET)),
        "routing_cost_after_first_batch": (cost_drain, _met(cost_drain, lambda v: v <= ROUTING_COST_TARGET)),
    }
    md.append("## Targets\n")
    rows = [
        [
            "Sharelake Avro >= 0.9 x Sharelake JSON",
            "median of (2)/(1)",
            fmt(avro, 3),
            _verdict(results["avro_over_json"][1]),
            avro_cause,
        ],
        [
            "Avro's ratio to its Spark peer no worse than JSON's",
            "median of [(2)/(4)] / [(1)/(3)] >= 1",
            fmt(gap, 3),
            _verdict(results["avro_gap"][1]),
            gap_cause,
        ],
        [
            f"routing {ROUTES} topics costs <= 10% against the best single-topic run",
            "median of 1 - (5) / best (5s) of the round <= 0.10 (records/s as (1) measures them)",
            f"{fmt(100 * cost, 1)}%",
            _verdict(results["routing_cost"][1]),
            route_cause,
        ],
    ]
    md.append(md_table(["target", "measured as", "value", "", "what the runs show"], rows) + "\n")
    if formats:
        md.append(
            "Sharelake's run summary, JSON against Avro (median per run; steps in seconds summed over batches):\n"
        )
        rows = [[k, fmt(va, 2), fmt(vb, 2), fmt(vb - va, 2)] for k, va, vb in formats]
        md.append(md_table(["timing", "(1) JSON", "(2) Avro", "Avro - JSON"], rows) + "\n")
    if routing:
        md.append(f"Sharelake's run summary, a single topic (N rows) against routing {ROUTES} ({ROUTES}N rows):\n")
        rows = [[k, fmt(va, 2), fmt(vb, 2), fmt(vb / ROUTES, 2)] for k, va, vb in routing]
        md.append(md_table(["timing", "(5s) single", "(5) routed", f"(5) routed / {ROUTES}"], rows) + "\n")
    return {k: {"value": finite_or_none(v), "met": m} for k, (v, m) in results.items()}


def _met(value: float, rule: Callable[[float], bool]) -> bool | None:
    return None if not math.isfinite(value) else rule(value)


def _verdict(ok: bool | None) -> str:
    return "n/a (no complete round)" if ok is None else ("**met**" if ok else "**not met**")


def _runs_table(o: FormatsOutcome, md: list[str]) -> None:
    md.append("## Every run and its tables\n")
    md.append(
        "Each table read back with Spark: rows, duplicate (topic, partition, offset), distinct ids, the id range, "
        "a checksum of the payload columns (sum of xxhash64 over id, user, ts, amount, kind, tags, note) against the "
        "records produced, and Sharelake's dead-letter table (must be empty).\n"
    )
    rows = []
    for r in o.runs:
        res = r.result
        if not res.ok:
            rows.append(
                [
                    str(r.round),
                    LABELS[r.key],
                    ", ".join(r.topics),
                    "",
                    "",
                    "failed",
                    res.error.replace("\n", " / ")[:400],
                ]
            )
            continue
        checks = []
        for c in r.checks:
            if c.ok:
                checks.append(f"ok ({c.rows:,})")
            elif c.error:
                checks.append(f"**check failed**: {c.error}")
            else:
                checks.append(
                    f"**MISMATCH**: {c.rows:,} rows of {c.spec.count:,}, {c.duplicates} dup, {c.distinct_ids:,} ids, "
                    f"range {'ok' if c.ids_in_range else 'wrong'}, checksum {'ok' if c.checksum_ok else 'wrong'}, "
                    f"{c.dead_letter_rows} dead-lettered"
                )
        rows.append(
            [
                str(r.round),
                LABELS[r.key],
                ", ".join(r.topics),
                f"{res.records:,}",
                fmt(res.seconds, 1),
                fmt_rate(r.rate),
                "; ".join(checks) or "not checked",
            ]
        )
    md.append(md_table(["round", "contender", "topic(s)", "rows", "window s", "records/s", "tables"], rows) + "\n")


def render(o: FormatsOutcome) -> tuple[str, dict[str, Any]]:
    s = o.settings
    md = [f"# Sharelake benchmark: formats and routing ({s.size}), {o.started}\n"]
    if s.size == "smoke":
        md.append("> **Smoke size**: this run only checks that the harness works. Its numbers mean nothing.\n")
    md.append(
        "`python -m bench formats`: one embedded single-node Kafka broker and one embedded schema registry "
        f"(Confluent-compatible API; up in {fmt(o.registry_start_s)} s); in each round every contender once, "
        f"in the order (1) (2) (3) (4) (5) (5s) x {ROUTES}, each with a fresh share group or consumer checkpoint and "
        f"fresh tables. Total {o.seconds / 60:.1f} min.\n"
    )
    md.append("## Machine and versions\n")
    machine = {**o.machine, "load average after the runs (1, 5, 15 min)": o.load_after}
    md.append(kv_table(machine) + "\n")
    md.append("## Settings and topics\n")
    md.append(kv_table({k: f"`{v}`" for k, v in s.as_table().items()}, ("setting", "value")) + "\n")
    rows = [
        [
            t.name,
            t.payload,
            f"{t.first_id:,} - {t.first_id + t.count - 1:,}",
            f"{t.count:,}",
            fmt(t.value_bytes, 0),
            fmt_rate(t.produce_rate),
        ]
        for t in o.topics.values()
    ]
    md.append(
        md_table(["topic", "values", "record ids", "records", "mean value bytes", "produced records/s"], rows) + "\n"
    )
    md.append(
        f"The Avro topic holds the JSON topic's records field for field (schema id {o.schema_id}, registered under "
        f"`<topic>-value`; `bench/avro_workload.py`), in the Confluent wire format. The routing topics hold the "
        "JSON topic's N records again, each. (5) reads all three, into one table each; each (5s) reads one.\n"
    )
    md.append("What each number measures (records/s = rows landed / window):\n")
    md += [
        "- (1), (2), (5s): rows written / (last Delta commit - start of run_ingest, once the SparkSession is up): "
        "start-up checks, the warm-up, the group join and the whole drain (`bench/contenders/sharelake.py`).",
        "- (5): the same, the window ending at the last commit of any of its tables (`bench/contenders/routed.py`).",
        "- (3), (4): rows in the table / (last Delta commit - the job's start once the SparkSession is up), "
        "Trigger.AvailableNow (`bench/spark_jobs/kafka_source_to_delta.py`, with `--avro-schema` for Avro).",
        "- after the first batch: rows landed after the run's first micro-batch / (last commit - that batch's "
        "commit): the drain without the start-up and the cold first batch (Sharelake runs only).\n",
    ]
    _contenders(o, md)
    _ratios(o, md)
    targets = _targets(o, md)
    _runs_table(o, md)
    failed = [r for r in o.runs if not r.ok]
    md.append("## Failed runs\n")
    md.append(
        "None.\n"
        if not failed
        else "\n".join(
            f"- round {r.round}, {LABELS[r.key]}: {r.result.error[:1500] or 'a table check failed'}" for r in failed
        )
        + "\n"
    )
    return "\n".join(md), targets


def _jsonable(o: FormatsOutcome, targets: dict[str, Any]) -> dict[str, Any]:
    def run(r: FormatRun) -> dict[str, Any]:
        res = {**asdict(r.result), "details": finite_values(r.result.details)}
        checks = [
            {
                **{k: v for k, v in asdict(c).items() if k != "spec"},
                "table": str(c.spec.path),
                "expected": c.spec.count,
                "ok": c.ok,
            }
            for c in r.checks
        ]
        return {
            "key": r.key,
            "round": r.round,
            "topics": r.topics,
            "ok": r.ok,
            "rate": finite_or_none(r.rate),
            "result": res,
            "checks": checks,
        }

    return {
        "settings": {k: v for k, v in asdict(o.settings).items() if k not in ("work_dir", "results_dir")},
        "machine": o.machine,
        "load_after": o.load_after,
        "topics": {k: asdict(t) for k, t in o.topics.items()},
        "schema_id": o.schema_id,
        "registry_start_s": finite_or_none(o.registry_start_s),
        "runs": [run(r) for r in o.runs],
        "per_round": {k: [finite_or_none(v) for v in vs] for k, vs in per_round(o).items()},
        "targets": targets,
        "seconds": o.seconds,
    }


def write_report(o: FormatsOutcome, results_dir: Path, stem: str) -> Path:
    """Write `<stem>.md` and `<stem>.json` in `results_dir`; the markdown's path."""
    text, targets = render(o)
    return save_report(results_dir, stem, text, _jsonable(o, targets))
