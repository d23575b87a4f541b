"""SASL_SSL with SCRAM-SHA-512, TLS certificates made at test time, and the standard authorizer with ACLs.

One secured embedded broker for the module (`devkit.security`): `admin` is its only super
user; the job's principal gets exactly the ACLs docs/security.md lists (READ on the topic and the share
group, DESCRIBE_CONFIGS and ALTER_CONFIGS on the group because the job sets group configs). The
job reads its password from an environment variable (`env:NAME`), never from the command line, and
the password, a canary, must not appear in any log. A principal without the group ACL, a wrong
password and a certificate the client does not trust each stop the job with one line (exit 2),
the last of a short output (the client's repeated errors are folded).
"""

from __future__ import annotations

import re
import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from devkit.sample_data import produce_json_events
from devkit.security import Security, make_tls
from sharelake.config.loader import load_config
from sharelake.consume.group_admin import GroupAdmin
from sharelake.consume.group_types import group_type
from sharelake.failures.errors import ConfigError, DependencyUnavailable
from sharelake.run import preflight
from sharelake.run.pipeline import run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka, free_port
from tests.job_runner import ROOT, JobSpec, kill_job, run_job, start_failure, start_job
from tests.kafka_helpers import nothing_left
from tests.security_helpers import PASSWORD_ENV, grant, job_security
from tests.table_checks import assert_exactly_once

JOB_USER, INTRUDER = "sharelake-job", "intruder"
CANARY = f"canary-{secrets.token_hex(8)}"  # the job's password: it must never reach a log
# the JVM's start-up note, the client's errors (each kind once) and their "... repeated N times", the cause
MOST_LINES_OF_A_REFUSED_START = 7
BUSY_PORT = re.compile(r"Service 'SparkUI' could not bind on port")  # other Spark apps on this machine


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    folder = tmp_path_factory.mktemp("secure")
    security = Security(make_tls(folder / "tls"), {JOB_USER: CANARY, INTRUDER: secrets.token_hex(8)})
    with EmbeddedKafka(folder / "broker", security=security) as kafka:
        yield kafka


def setup_topic(kafka: EmbeddedKafka, name: str, records: int) -> list:  # type: ignore[type-arg]
    kafka.create_topic(name, partitions=2)
    assert kafka.security is not None
    return produce_json_events(kafka.bootstrap, name, records, client=kafka.security.client())


def logs_hold(text: str, kafka: EmbeddedKafka, *logs: Path) -> list[str]:
    """Which of the job's logs and the broker's logs contain `text`."""
    files = [*logs, kafka.log_file, kafka.stdout_file]
    return [str(f) for f in files if f.exists() and text in f.read_text(errors="replace")]


def test_the_whole_ingest_runs_over_sasl_ssl_with_only_the_acls_it_needs(
    secure: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = JobSpec(secure, f"secure-{unique}", f"g-{unique}", tmp_path / "table")
    produced = setup_topic(secure, spec.topic, 3000)
    grant(secure, JOB_USER, spec.topic, spec.group)
    monkeypatch.setenv(PASSWORD_ENV, CANARY)
    log = tmp_path / "job.log"

    rc = run_job(spec, "run.mode=until-drained", "run.idle_timeout_ms=4000", *job_security(secure, JOB_USER), log=log)

    assert rc == 0, log.read_text(errors="replace")[-3000:]
    assert_exactly_once(spark, spec.table, produced)
    assert nothing_left(secure, spec.topic, spec.group)
    assert logs_hold(CANARY, secure, log) == []  # the password is in no log, the job's or the broker's

    # `sharelake status` reads the group with the job's settings (the Java Admin: SCRAM, the PEM CA)
    # and the same ACLs
    cfg = load_config(ROOT / "conf" / "local.toml", spec.sets(*job_security(secure, JOB_USER)))
    with GroupAdmin(cfg.kafka, spark) as admin:
        state = group_type(cfg.kafka).read_state(admin, cfg.kafka)
    assert [(p.partition, p.lag) for p in state.partitions] == [(0, 0), (1, 0)], state


REFUSALS = {
    "no group ACL": "not authorized",
    "wrong password": "authentication failed",
    "untrusted certificate": "certificate",
}


@dataclass(frozen=True)
class RefusedStart:
    job: subprocess.Popen[bytes]
    log: Path


@pytest.fixture(scope="module")
def refused_starts(
    secure: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, RefusedStart]]:
    """The three refused starts, started beside each other: each is mostly a wait on its client's errors
    and timeouts (one after the other they took 50 s of CI time, together about as long as the slowest).
    Each its own topic, group, table and password (its own environment); the test of each case checks it."""
    started: dict[str, RefusedStart] = {}
    try:
        for case in REFUSALS:
            folder = tmp_path_factory.mktemp("denied")
            name = uuid.uuid4().hex[:8]
            spec = JobSpec(secure, f"denied-{name}", f"g-{name}", folder / "table")
            setup_topic(secure, spec.topic, 10)
            user, ca, password = JOB_USER, None, CANARY
            if case == "no group ACL":
                user = INTRUDER
                assert secure.security is not None
                password = secure.security.users[INTRUDER]
                grant(secure, INTRUDER, spec.topic, spec.group, group_acls=False)
            elif case == "wrong password":
                password = f"not-{CANARY}"
            else:
                ca = make_tls(folder / "other-ca", name="other").ca_pem
            with pytest.MonkeyPatch.context() as env:
                env.setenv(PASSWORD_ENV, password)  # the job's environment is taken when it starts
                log = folder / "job.log"
                started[case] = RefusedStart(
                    start_job(spec, "run.mode=until-drained", *job_security(secure, user, ca), log=log), log
                )
        yield started
    finally:
        for refused in started.values():
            kill_job(refused.job)


@pytest.mark.parametrize(("case", "expect"), list(REFUSALS.items()))
def test_a_security_problem_stops_the_job_at_start_with_one_line(
    case: str, expect: str, secure: EmbeddedKafka, refused_starts: dict[str, RefusedStart]
) -> None:
    job, log = refused_starts[case].job, refused_starts[case].log
    try:
        rc = job.wait(180)
    except subprocess.TimeoutExpired:
        kill_job(job)
        raise

    lines = start_failure(log)
    assert rc == 2, log.read_text(errors="replace")[-3000:]
    assert len(lines) == 1 and expect in lines[0].lower(), lines or log.read_text(errors="replace")[-3000:]
    assert logs_hold(CANARY, secure, log) == []
    # short: the client's repeated errors folded (first line, "... repeated N times"), the cause last
    text = log.read_text(errors="replace")
    printed = [line for line in text.splitlines() if line.strip() and not BUSY_PORT.search(line)]
    assert len(printed) <= MOST_LINES_OF_A_REFUSED_START, "\n".join(printed)
    assert printed[-1] == lines[0], printed[-3:]


def test_a_certificate_that_does_not_verify_stops_the_start_at_once_and_a_silent_broker_is_still_waited_for(
    secure: EmbeddedKafka,
    spark: SparkSession,
    tmp_path: Path,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A certificate that does not verify will not verify later: the start says so at once, not after
    the broker wait (`preflight.BROKER_TIMEOUT_S`, 15 s). In process, for the time of the start alone."""
    spec = JobSpec(secure, f"tls-{unique}", f"g-{unique}", tmp_path / "table")
    setup_topic(secure, spec.topic, 1)
    monkeypatch.setenv(PASSWORD_ENV, CANARY)
    other_ca = make_tls(tmp_path / "other-ca", name="other").ca_pem
    cfg = load_config(ROOT / "conf" / "local.toml", spec.sets(*job_security(secure, JOB_USER, other_ca)))
    started = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        run_ingest(spark, cfg)
    took = time.monotonic() - started
    print(f"the certificate refused after {took:.1f}s")
    line = str(refused.value)
    assert "\n" not in line and line.startswith("kafka.client.ssl.ca.location: the TLS handshake with"), line
    assert "certificate verify failed" in line and CANARY not in line, line
    assert took < preflight.BROKER_TIMEOUT_S / 3, f"the start took {took:.1f}s to refuse the certificate"

    # the same TLS settings against an address where no broker listens yet: an outage, waited for
    monkeypatch.setattr(preflight, "BROKER_TIMEOUT_S", 3.0)
    nowhere = f"kafka.bootstrap_servers=127.0.0.1:{free_port()}"  # the later --set wins
    cfg = load_config(ROOT / "conf" / "local.toml", spec.sets(*job_security(secure, JOB_USER, other_ca), nowhere))
    started = time.monotonic()
    with pytest.raises(DependencyUnavailable, match="no broker answered within 3s"):
        preflight.check_kafka(AdminClient(cfg.kafka.client_config()), cfg, group_type(cfg.kafka))
    assert time.monotonic() - started >= 3.0
