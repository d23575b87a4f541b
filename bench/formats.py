"""The formats and routing mode of the benchmark: `python -m bench formats [--smoke] [sizes...]`.

Not a phase of `bench.run` (run it on its own). On one embedded broker and one embedded schema
registry it produces the workload's N records (`devkit.workload`) to a JSON topic, the same records
in Avro (Confluent wire format, `bench.avro_workload`) to an Avro topic, and the same N JSON records
again to each of three routing topics, each topic of P partitions. Then, round by round (all
contenders of round i back to back, so machine drift hits them alike), it runs:

1. `sl-json`: Sharelake on the JSON topic (`bench.contenders.sharelake`, contender (a));
2. `sl-avro`: Sharelake on the Avro topic, writer schemas from the registry (`bench.contenders.avro`);
3. `spark-json`: Spark's Kafka source with from_json on the JSON topic (contender (b));
4. `spark-avro`: Spark's Kafka source with from_avro on the Avro topic, header stripped, schema fixed;
5. `sl-routed`: one Sharelake job on the three routing topics (3N records) into three tables
   (`bench.contenders.routed`), then `sl-single` on each of those topics alone (N each), one after
   the other. N per topic, not N/3: each single run is then the size of (1), and the start-up every
   run pays once weighs on a single run as on (1).

Every run has a fresh share group or consumer checkpoint and fresh tables. Once the broker and the
registry are stopped, one SparkSession checks every table (`bench.verify.check_table`: rows and
duplicate offsets; here also the distinct ids and a checksum of the payload columns against the
records produced) and every dead-letter table (empty). `bench.formats_report` writes
bench/results/<date>-formats.md and .json.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.avro_workload import avro_value_of, produce_avro_backlog
from bench.contenders.avro import run_sharelake_avro, run_spark_kafka_avro
from bench.contenders.base import RunContext, RunResult, attempt
from bench.contenders.routed import after_first_batch, dead_letter_path, routed_tables, run_sharelake_routed
from bench.contenders.sharelake import run_sharelake
from bench.contenders.spark_kafka_source import run_spark_kafka_source
from bench.formats_outcome import ROUTES, FormatRun, FormatsOutcome, FormatsSettings, TableResult, TableSpec, Topic
from bench.formats_report import write_report
from bench.harness import add_places, add_settings, settings_from, stamp, work_folder
from bench.machine import load_average, machine_facts
from bench.settings import BenchSettings
from bench.verify import check_table
from devkit.ingest_job import dead_letter_of
from devkit.spark_check import spark_session
from devkit.workload import SCHEMA_DDL, produce_backlog, record_value
from sharelake.testing.kafka_broker import EmbeddedKafka
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry

HELP = "Sharelake on JSON and on Avro against Spark's Kafka source on each, and one job routing 3 topics"
log = logging.getLogger(__name__)

PAYLOAD_COLUMNS = ("id", "user", "ts", "amount", "kind", "tags", "note")  # SCHEMA_DDL's fields, in order
SIZE_SAMPLE = 1000  # values whose size is measured per topic


SMOKE: dict[str, Any] = {
    "size": "smoke",
    "records": 3000,
    "partitions": 2,
    "runs": 1,
    "idle_timeout_ms": 2000,
    "run_timeout_s": 300.0,
}


def _mean_size(value_of: Callable[[int], bytes], first: int, count: int) -> float:
    step = max(1, count // SIZE_SAMPLE)
    sizes = [len(value_of(i)) for i in range(first, first + count, step)]
    return sum(sizes) / len(sizes) if sizes else math.nan


def make_topics(kafka: EmbeddedKafka, registry_url: str, s: FormatsSettings, out: FormatsOutcome) -> None:
    """Create and fill the JSON topic, the Avro topic and the routing topics."""
    n, p = s.records, s.partitions
    batch = BenchSettings().producer_batch_bytes
    name = f"fmt-json-p{p}-n{n}"
    kafka.create_topic(name, partitions=p)
    stats = produce_backlog(kafka.bootstrap, name, n, batch)
    out.topics["json"] = Topic(name, 0, n, "json", n / stats.seconds, _mean_size(record_value, 0, n))
    log.info("produced %s in %.1fs", name, stats.seconds)
    name = f"fmt-avro-p{p}-n{n}"
    kafka.create_topic(name, partitions=p)
    stats, out.schema_id = produce_avro_backlog(kafka.bootstrap, registry_url, name, n, batch)
    size = _mean_size(avro_value_of(out.schema_id), 0, n)
    out.topics["avro"] = Topic(name, 0, n, "avro", n / stats.seconds, size)
    log.info("produced %s in %.1fs (schema id %d)", name, stats.seconds, out.schema_id)
    for k in range(ROUTES):
        name = f"fmt-route{k}-p{p}-n{n}"
        kafka.create_topic(name, partitions=p)
        stats = produce_backlog(kafka.bootstrap, name, n, batch)
        out.topics[f"route-{k}"] = Topic(name, 0, n, "json", n / stats.seconds, out.topics["json"].value_bytes)
        log.info("produced %s in %.1fs", name, stats.seconds)


def _attempt(i: int, key: str, run: Callable[[RunContext], RunResult], ctx: RunContext) -> RunResult:
    log.info("round %d: %s on %s", i, key, ctx.topic)
    return attempt(key, run, ctx)


def one_round(
    i: int, kafka: EmbeddedKafka, registry_url: str, s: FormatsSettings, out: FormatsOutcome, work: Path
) -> None:
    """Round i: every contender once, in the same order."""
    bs = s.bench_settings()
    json_t, avro_t = out.topics["json"], out.topics["avro"]
    routes = [out.topics[f"route-{k}"] for k in range(ROUTES)]

    def ctx(key: str, topic: Topic | None) -> RunContext:
        name = topic.name if topic else "+".join(t.name for t in routes)
        count = topic.count if topic else sum(t.count for t in routes)
        return RunContext(kafka.bootstrap, name, s.partitions, count, s.members, work / f"r{i}-{key}", bs, "formats")

    def single_table(c: RunContext, t: Topic, sharelake: bool) -> list[TableSpec]:
        dead = dead_letter_of(c.run_dir / "table") if sharelake else None
        return [TableSpec(c.run_dir / "table", t.first_id, t.count, dead)]

    plan: list[tuple[str, Topic | None, Callable[[RunContext], RunResult], bool]] = [
        ("sl-json", json_t, run_sharelake, True),
        ("sl-avro", avro_t, lambda c: run_sharelake_avro(c, registry_url), True),
        ("spark-json", json_t, run_spark_kafka_source, False),
        ("spark-avro", avro_t, run_spark_kafka_avro, False),
    ]
    for key, topic, fn, sharelake in plan:
        assert topic is not None
        c = ctx(key, topic)
        r = _attempt(i, key, fn, c)
        if sharelake and r.ok:
            r.details["after_first_batch_rate"] = after_first_batch([c.run_dir / "table"])
        out.runs.append(FormatRun(key, i, [topic.name], r, single_table(c, topic, sharelake)))
    c = ctx("sl-routed", None)
    names = [t.name for t in routes]
    r = _attempt(i, "sl-routed", lambda rc: run_sharelake_routed(rc, names), c)
    paths = routed_tables(c.run_dir, names)
    specs = [TableSpec(paths[t.name], t.first_id, t.count, None) for t in routes]
    specs[0] = replace(specs[0], dead_letter=dead_letter_path(c.run_dir))  # the one shared dead-letter table
    out.runs.append(FormatRun("sl-routed", i, names, r, specs))
    for k, t in enumerate(routes):
        c = ctx(f"sl-single{k}", t)
        r = _attempt(i, f"sl-single{k}", run_sharelake, c)
        if r.ok:
            r.details["after_first_batch_rate"] = after_first_batch([c.run_dir / "table"])
        out.runs.append(FormatRun("sl-single", i, [t.name], r, single_table(c, t, True)))


# -- the checks ------------------------------------------------------------------------------------------


def _checksum(df: DataFrame) -> DataFrame:
    """Rows' count, distinct ids, id range and the sum of a 64-bit hash of the payload columns."""
    h = F.xxhash64(*(F.col(c) for c in PAYLOAD_COLUMNS)).cast("decimal(38,0)")
    return df.agg(
        F.count_distinct("id").alias("ids"),
        F.min("id").alias("lo"),
        F.max("id").alias("hi"),
        F.sum(h).alias("sum"),
    )


def expected_payload(spark: SparkSession, records: int) -> DataFrame:
    """The records produced (record_value(i) parsed with SCHEMA_DDL), cached: the checksums' reference."""
    values = spark.createDataFrame(
        [(record_value(i).decode(),) for i in range(records)], "value string", verifySchema=False
    )
    parsed = values.select(F.from_json("value", SCHEMA_DDL).alias("v")).select("v.*")
    return parsed.cache()


def check_run_tables(
    spark: SparkSession, run: FormatRun, reference: DataFrame, sums: dict[tuple[int, int], int]
) -> None:
    for spec in run.tables:
        t = TableResult(spec)
        try:
            basic = check_table(spark, spec.path)
            t.rows, t.duplicates = basic.rows, basic.duplicates
            row = _checksum(spark.read.format("delta").load(str(spec.path))).first()
            assert row is not None
            t.distinct_ids = int(row["ids"] or 0)
            last = spec.first_id + spec.count - 1
            t.ids_in_range = row["lo"] == spec.first_id and row["hi"] == last
            span = (spec.first_id, spec.count)
            if span not in sums:
                ref = _checksum(reference.where(F.col("id").between(spec.first_id, last))).first()
                assert ref is not None
                sums[span] = int(ref["sum"])
            t.checksum_ok = row["sum"] is not None and int(row["sum"]) == sums[span]
            if spec.dead_letter is not None and (spec.dead_letter / "_delta_log").is_dir():
                t.dead_letter_rows = spark.read.format("delta").load(str(spec.dead_letter)).count()
        except Exception as e:  # reported in the table checks
            log.exception("checking %s failed", spec.path)
            t.error = f"{type(e).__name__}: {str(e)[:300]}"
        run.checks.append(t)


def verify_runs(out: FormatsOutcome) -> None:
    """Every table of every finished run, with one SparkSession (started once the broker is gone)."""
    with spark_session() as spark:
        reference = expected_payload(spark, out.settings.records)
        sums: dict[tuple[int, int], int] = {}
        for run in out.runs:
            if run.result.ok:
                check_run_tables(spark, run, reference, sums)


# -- the command -----------------------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> None:
    add_settings(p, FormatsSettings(), {
        "records": "records per topic", "partitions": "partitions of every topic",
        "runs": "rounds: runs per contender", "members": "Sharelake pump.members",
        "idle_timeout_ms": "Sharelake run.idle_timeout_ms", "run_timeout_s": "bound of one run",
    })  # fmt: skip
    add_places(p)


def settings(args: argparse.Namespace) -> FormatsSettings:
    s = settings_from(args, FormatsSettings(), SMOKE)
    if s.records < 1 or s.partitions < 1 or s.runs < 1:
        raise SystemExit("bench formats: need --records, --partitions and --runs >= 1")
    return s


def run(args: argparse.Namespace) -> int:
    s = settings(args)
    at = stamp()
    out = FormatsOutcome(s, at.text, machine_facts())
    began = time.monotonic()
    with work_folder(s.work_dir, f"{at.file}-formats", s.keep_work) as work:
        with (
            EmbeddedKafka(work / "broker", heap="1g") as kafka,
            EmbeddedSchemaRegistry(work / "registry") as registry,
        ):
            out.registry_start_s = registry.started_in_s or math.nan
            make_topics(kafka, registry.url, s, out)
            for i in range(s.runs):
                one_round(i, kafka, registry.url, s, out, work / "runs")
        out.load_after = load_average()
        verify_runs(out)
        out.seconds = time.monotonic() - began
        suffix = "formats" if s.size == "formats" else f"formats-{s.size}"
        write_report(out, s.results_dir, f"{at.file}-{suffix}")
    return 0
