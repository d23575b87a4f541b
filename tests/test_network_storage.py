"""Exactly once when a job and its table's store are cut apart: the S3 writer lease's own case.

On S3 one job at a time may write a table, guarded by a writer lease the job renews
(`sharelake.sink.delta.writer_lease`). Every process here is a host of its own (`devkit.network`): the broker
(`net_broker`), an S3 API server (S3Proxy, on the `s3` host), two jobs and the test's client. The
table is read back by a reader that is not the job (`tests.table_copy`: a Spark of its own on the
client host, the only side that reaches the S3 server) and compared record by record with what the
topic holds; the group is proven empty with a sentinel.

- A job cut off from S3 while it commits, past its lease's TTL: a second job takes the lease over
  and lands everything. When the network heals, the first job must not commit, whatever it had in
  flight: it stops with the lease's line.
- A job cut off from the broker but not from S3 while it commits: its commit lands, its ACCEPTs
  cannot, and it keeps renewing its lease, so a second job started meanwhile is refused with one
  line (exit 2). Once the network heals the first job finds the committed records in the table
  and lands the rest.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import STDOUT

import pytest
from pyspark.sql import SparkSession

from devkit.network import Host, Network
from devkit.s3_server import EmbeddedS3
from devkit.sample_data import Produced, produce_json_events
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import ROOT, JobSpec, kill_job, run_summary, start_failure, start_job
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

LEASE_S = 6  # the writer lease's TTL: renewed every 2 s, no commit once 4 s old, taken over after 6 s
UNTIL_DRAINED = ("run.mode=until-drained", "run.idle_timeout_ms=6000")


@pytest.fixture(scope="module")
def net_s3(net: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedS3]:
    """An S3 API server on the network's `s3` host: only the network's hosts reach it."""
    server = EmbeddedS3(tmp_path_factory.mktemp("net-s3"), host=net.host("s3"))
    server.start()
    yield server
    server.stop()


def copied(client: Host, s3: EmbeddedS3, table: str, target: Path) -> Path:
    """The S3 table copied to `target` by a Spark of its own on `client` (`tests.table_copy`)."""
    log = target.with_suffix(".log")
    conf = [f"{k}={v}" for k, v in s3.spark_conf().items()]
    with log.open("wb") as out:
        proc = client.popen(
            [sys.executable, "-m", "tests.table_copy", table, str(target), *conf],
            cwd=ROOT, env={**os.environ, **s3.credentials_env()}, stdout=out, stderr=STDOUT,
        )  # fmt: skip
    assert proc.wait(300) == 0, log.read_text(errors="replace")[-3000:]
    return target


@dataclass
class AcrossACut:
    """Two jobs on one S3 table: job 1 cut off from one host while it commits, job 2 started then."""

    spec: JobSpec
    produced: list[Produced]
    logs: list[Path]
    exits: list[int]  # job 1's, job 2's

    def tails(self) -> str:
        return "\n".join(f"--- {p.name}:\n{p.read_text(errors='replace')[-2500:]}" for p in self.logs if p.exists())


def two_jobs_across_a_cut(
    net: Network, broker: EmbeddedKafka, s3: EmbeddedS3, tmp_path: Path, name: str, cut_off_from: Host
) -> AcrossACut:
    """Job 1 drains a backlog into an S3 table and is held at its second append's written files
    (its records acquired, its commit not made, its lease fresh); then it is cut off from
    `cut_off_from` and goes on into its commit, job 2 starts on the same table and runs until it
    ends, the network heals, and job 1 runs until it ends."""
    client, hosts = net.host("client"), [net.host("job1"), net.host("job2")]
    bucket = s3.bucket(name)
    spec = JobSpec(broker, name, f"g-{name}", f"{bucket}/events", s3=s3, settings=(f"delta.writer_lease_s={LEASE_S}",))
    broker.create_topic(spec.topic, partitions=2)
    produced = client.call(produce_json_events, broker.bootstrap, spec.topic, 6000)
    go = tmp_path / "job1-go"
    held = go.with_name(go.name + ".waiting")
    logs = [tmp_path / f"job{i}.log" for i in (1, 2)]
    outcome = AcrossACut(spec, produced, logs, [])
    job1 = start_job(spec, *UNTIL_DRAINED, faults=f"wait@delta_files_written#2={go}", log=logs[0], host=hosts[0])
    jobs = [job1]
    try:
        wait_for(
            held.exists, 240, lambda: f"scenario not provoked: job 1 never reached its commit\n{outcome.tails()}",
            give_up=lambda: job1.poll() is not None,
        )  # fmt: skip
        cut = net.cut(hosts[0], cut_off_from)
        cut.apply()
        try:
            go.touch()  # job 1 goes on into its commit
            jobs.append(start_job(spec, *UNTIL_DRAINED, log=logs[1], host=hosts[1]))
            rc2 = jobs[1].wait(300)
        finally:
            cut.heal()
        outcome.exits = [job1.wait(300), rc2]
    finally:
        go.touch()
        for job in jobs:
            kill_job(job)
    return outcome


# `make chaos` (two job starts and a copy's Spark: about two minutes; CI keeps the lease's read race,
# tests/test_s3_tables.py)
@pytest.mark.long
def test_a_job_cut_off_from_s3_past_its_lease_never_commits_after_another_took_it_over(
    net_faults: Network,
    net_broker: EmbeddedKafka,
    net_s3: EmbeddedS3,
    spark: SparkSession,
    tmp_path: Path,
    unique: str,
) -> None:
    assert net_s3.host is not None
    # job 1's commit cannot reach S3, nor can its lease's renewals: job 2 finds the lease unrenewed
    # for its TTL, takes it over and lands every record; back on the network, job 1 meets job 2's commit
    run = two_jobs_across_a_cut(net_faults, net_broker, net_s3, tmp_path, f"s3cut-{unique}", net_s3.host)
    rc1, rc2 = run.exits
    spec, produced, logs, tails, client = run.spec, run.produced, run.logs, run.tails, net_faults.host("client")
    assert rc2 == 0, tails()
    assert "taking it over" in logs[1].read_text(errors="replace"), tails()
    local = copied(client, net_s3, str(spec.table), tmp_path / "copy")
    assert_exactly_once(spark, local, produced)
    assert client.call(nothing_left, net_broker, spec.topic, spec.group)
    # job 1 knew it had lost the lease once it was back, and committed nothing after job 2 took over:
    # every row was written once, by one job or the other (what it had in flight was job 2's to land)
    text1 = logs[0].read_text(errors="replace")
    assert "no more commits from this job" in text1, tails()
    summaries = [run_summary(p) for p in logs] if rc1 == 0 else [None, run_summary(logs[1])]
    print(f"cut from S3 past the lease: job 1 exit {rc1}; {summaries}")
    if rc1 == 0:  # nothing of its own was left to commit: it drained and ended
        assert summaries[0] is not None and summaries[1] is not None
        assert summaries[0]["rows_written"] + summaries[1]["rows_written"] == len(produced), summaries
        assert summaries[0]["concurrent_claims"] > 0, summaries  # its in-flight records were job 2's
    else:  # a commit it tried was refused by the lease: the one line names it
        assert rc1 == 1 and any("writer lease" in ln for ln in start_failure(logs[0])), tails()


@pytest.mark.long
def test_a_job_cut_off_from_the_broker_but_not_s3_keeps_its_lease_and_lands_the_rest_once_healed(
    net_faults: Network,
    net_broker: EmbeddedKafka,
    net_s3: EmbeddedS3,
    spark: SparkSession,
    tmp_path: Path,
    unique: str,
) -> None:
    assert net_broker.host is not None
    # job 1's commit lands on S3, its ACCEPTs cannot reach the broker; it still renews its lease, so
    # job 2 is refused at start
    run = two_jobs_across_a_cut(net_faults, net_broker, net_s3, tmp_path, f"s3keep-{unique}", net_broker.host)
    rc1, rc2 = run.exits
    spec, produced, logs, tails, client = run.spec, run.produced, run.logs, run.tails, net_faults.host("client")
    assert rc2 == 2, tails()
    refusal = start_failure(logs[1])
    assert len(refusal) == 1 and "is written by another Sharelake job" in refusal[0], tails()
    assert rc1 == 0, tails()
    summary = run_summary(logs[0])
    print(f"cut from the broker, not S3: job 1 {summary}")
    local = copied(client, net_s3, str(spec.table), tmp_path / "copy")
    assert_exactly_once(spark, local, produced)
    assert client.call(nothing_left, net_broker, spec.topic, spec.group)
