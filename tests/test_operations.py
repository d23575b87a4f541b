"""Operations: progress lines and Prometheus counters, elastic members, the Spark Connect guard.

Real broker, real Delta. The elastic sizer is tested through its own decisions on a measured
load: it grows under a steady producer and shrinks once the topic goes quiet, and the resizes
mid-stream lose, double and give back nothing.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.sample_data import Produced, produce_json_events
from sharelake.consume.member_pool import MemberPool
from sharelake.run.pipeline import run_ingest
from sharelake.sink.batch.stats import PHASES
from sharelake.testing.kafka_broker import EmbeddedKafka, free_port
from tests.ingest_config import ingest_config
from tests.job_runner import ROOT
from tests.table_checks import assert_exactly_once


def scrape(port: int) -> dict[str, float]:
    """sharelake_<name> -> value; a labelled one as <name>{<label value>} (e.g. sink_phase_seconds{write})."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    line = r'^sharelake_(\w+?)(?:_total)?(?:\{\w+="(\w+)"\})? ([0-9.e+-]+)$'
    return {f"{m[1]}{{{m[2]}}}" if m[2] else m[1]: float(m[3]) for m in re.finditer(line, text, re.M)}


def test_progress_lines_and_prometheus_counters_match_the_table(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic, group = f"metrics-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, topic, 3000)
    port = free_port()
    cfg = ingest_config(broker, topic, group, tmp_path / "t", f"metrics.prometheus_port={port}")
    scrapes: list[dict[str, float]] = []

    def watch(pool: MemberPool) -> None:
        def loop() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    scrapes.append(scrape(port))
                except OSError:
                    return  # the server stopped with the run
                if scrapes[-1].get("accepted") == len(produced):
                    return
                time.sleep(0.5)

        threading.Thread(target=loop, daemon=True).start()

    with caplog.at_level(logging.INFO, logger="sharelake.progress"):
        summary = run_ingest(spark, cfg, on_pool_started=watch)
    assert_exactly_once(spark, tmp_path / "t", produced)

    # Prometheus: the counters reached what the table holds
    final = scrapes[-1]
    assert final["accepted"] == final["rows_written"] == final["polled"] == len(produced), final
    assert final["buffer_capacity"] == cfg.pump.buffer_max_records and final["members_active"] == cfg.pump.members
    # where the sink's time went: every step timed, the write and classify steps took time
    phases = {p: final[f"sink_phase_seconds{{{p}}}"] for p in PHASES}
    assert phases["write"] > 0 and phases["frame"] > 0, phases
    assert phases["write"] == pytest.approx(summary.phase_s["write"], abs=0.5), (phases, summary)
    # the progress lines: one per micro-batch with records, adding up to the run's totals
    lines = [r.getMessage() for r in caplog.records if r.name == "sharelake.progress" and "batch " in r.getMessage()]
    assert lines, "no progress line"
    fields = [dict(kv.split("=") for kv in re.findall(r"(\w+=\d+)", ln)) for ln in lines]
    assert sum(int(f["accepted"]) for f in fields) == summary.accepted == len(produced)
    assert sum(int(f["in"]) for f in fields) == len(produced)
    # a batch with records takes time, and some member polled it
    assert all(int(f["duration_ms"]) > 0 and int(f["members"]) >= 1 for f in fields), lines
    writes = [int(m) for ln in lines for m in re.findall(r"sink_ms .*\bwrite=(\d+)", ln)]
    assert len(writes) == len(lines) and sum(writes) > 0, lines


@pytest.mark.long  # CI time: the sizer's decisions are tested in tests/test_elastic_sizer.py
def test_the_elastic_sizer_grows_under_load_and_shrinks_when_the_topic_goes_quiet(
    broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The sizer's own decisions (`ElasticSizer.tick` on the members' measured busy time and the
    buffer fill), not the test's. A member holds its poll of at most 200 records until the sink
    decides it (a few hundred ms), so 2,000 records/s keep one member busy all the time: it grows.
    Once the producer stops and the backlog is drained, the members wait in poll: it shrinks."""
    topic, group = f"sizer-{unique}", f"g-{unique}"
    broker.create_topic(topic, partitions=4)
    produced: list[Produced] = []
    stopped_at: list[float] = []

    def produce() -> None:
        produced.extend(produce_json_events(broker.bootstrap, topic, 24_000, rate=2_000))
        stopped_at.append(time.monotonic())

    threads: list[threading.Thread] = []

    def start_producing(pool: MemberPool) -> None:  # once the members poll, as a live topic would be
        threads.append(threading.Thread(target=produce))
        threads[0].start()

    caplog.set_level(logging.INFO, logger="sharelake.consume.elastic")
    cfg = ingest_config(
        broker, topic, group, tmp_path / "t", "pump.members=1", "pump.max_members=3", "pump.max_poll_records=200",
        idle_ms=15_000,
    )  # fmt: skip
    summary = run_ingest(spark, cfg, on_pool_started=start_producing)
    threads[0].join()

    decisions = [(r.created, r.getMessage()) for r in caplog.records if r.name == "sharelake.consume.elastic"]
    steps = [(t, int(a), int(b), m) for t, m in decisions for a, b in re.findall(r"members: (\d+) -> (\d+)", m)]
    assert steps and steps[0][1:3] == (1, 2) and "members busy" in steps[0][3], decisions
    quiet = stopped_at[0] - time.monotonic() + time.time()  # the producer's stop, on the log records' clock
    shrinks = [s for s in steps if s[2] < s[1]]
    assert shrinks and all(t > quiet and "idle" in m for t, _, _, m in shrinks), decisions  # only once quiet
    assert_exactly_once(spark, tmp_path / "t", produced)
    assert summary.released == 0 and summary.ack_errors == 0


def test_spark_connect_is_refused_at_start_with_the_supported_modes(tmp_path: Path) -> None:
    env = {**os.environ, "SPARK_REMOTE": "sc://127.0.0.1:15002"}
    job = [str(ROOT / "jobs" / "ingest.py"), "--config", str(ROOT / "conf" / "local.toml")]
    job += ["--set", f"delta.table_path={tmp_path / 't'}"]
    # the job run as a Spark Connect client would be (plain Python with SPARK_REMOTE), and submitted
    for cmd in ([str(ROOT / ".cache" / "venv" / "bin" / "python"), *job], [str(ROOT / "spark-submit.sh"), *job]):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        output = done.stdout + done.stderr
        assert done.returncode == 2, output[-3000:]
        lines = [ln for ln in output.splitlines() if ln.startswith("sharelake:")]
        assert len(lines) == 1 and "Spark Connect" in lines[0], output[-3000:]
        assert "foreachBatch would run on the Spark Connect server" in lines[0]
        assert "Traceback" not in output
    assert "dedicated (single user) access mode" in lines[0] or "standalone, YARN or Kubernetes" in lines[0]
