"""SASL_SSL across hosts: a job on a host of its own reaches a secured broker on another, verifying
the broker's certificate names the address it dialled.

Owns the TLS scenario of the network tests (`devkit.network`, the session's `net`): one secured
broker for the module on a host of its own (`tlskafka`; the plain `net_broker` is not used), with
a certificate made at test time naming that host's address (`make_tls(addresses=...)`), SCRAM users
and the job principal's ACLs only (tests/security_helpers.py). The test's client (topics, records,
the checks) runs on the `client` host; the backlog job and the cut-off job run on `job1`, one after
the other, and the refused job on `job2`, started beside the first (it mostly waits); nothing
reaches the broker from the machine's own namespace. No job sets
`ssl.endpoint.identification.algorithm`: librdkafka's default (`https`) verifies the certificate's
names against the broker's address.

- a job lands a backlog exactly once over SASL_SSL, its client checking the broker's name;
- the same broker presenting a trusted certificate that names another address (127.0.0.1 and
  localhost, on a second listener) is refused at start with one line (exit 2) naming the cause;
- a job that starts while the broker is cut off waits for it (an outage, not a TLS error), then,
  once the network heals, makes its TLS handshakes and lands every record once.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from devkit.network import Host, Network
from devkit.sample_data import Produced, produce_json_events
from devkit.security import MECHANISM, Security, Tls, make_tls
from sharelake.testing.kafka_broker import HOST_PORTS, EmbeddedKafka
from tests.job_runner import JobSpec, kill_job, start_failure, start_job
from tests.kafka_helpers import nothing_left
from tests.security_helpers import PASSWORD_ENV, grant, job_security
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

JOB_USER = "sharelake-job"
PASSWORD = secrets.token_hex(12)
# a second SASL_SSL listener of the same broker, presenting a certificate that names other addresses
ELSEWHERE, ELSEWHERE_PORT = "ELSEWHERE", 9094
JOB_TIMEOUT_S = 240
# no lock expires on a loaded machine (a redelivery would be found in the table, but costs time)
LOCK_MS = 15000


@dataclass(frozen=True)
class TlsBroker:
    kafka: EmbeddedKafka  # its SASL_SSL listener's certificate names its host's address
    elsewhere: Tls  # the certificate of its ELSEWHERE listener: 127.0.0.1 and localhost only

    @property
    def security(self) -> Security:
        assert self.kafka.security is not None
        return self.kafka.security

    @property
    def elsewhere_bootstrap(self) -> str:
        return f"{self.kafka.address}:{ELSEWHERE_PORT}"

    def produce(self, client: Host, topic: str, records: int) -> list[Produced]:
        """`records` sample events, produced from the `client` host as the admin user."""
        return client.call(produce_json_events, self.kafka.bootstrap, topic, records, client=self.security.client())


def elsewhere_listener(host: Host, security: Security, tls: Tls) -> dict[str, str]:
    """Broker settings adding the ELSEWHERE listener (SASL_SSL, SCRAM) with `tls`'s certificate:
    EmbeddedKafka's listeners on a host (HOST_PORTS), and this one."""
    port, controller_port = HOST_PORTS
    a, name = host.address, ELSEWHERE.lower()
    jaas = security.broker_settings()[f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config"]
    return {
        "listeners": f"SASL_SSL://{a}:{port},CONTROLLER://{a}:{controller_port},{ELSEWHERE}://{a}:{ELSEWHERE_PORT}",
        "advertised.listeners": f"SASL_SSL://{a}:{port},{ELSEWHERE}://{a}:{ELSEWHERE_PORT}",
        "listener.security.protocol.map": f"SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT,{ELSEWHERE}:SASL_SSL",
        f"listener.name.{name}.{MECHANISM.lower()}.sasl.jaas.config": jaas,
        f"listener.name.{name}.ssl.keystore.location": str(tls.keystore),
        f"listener.name.{name}.ssl.keystore.password": tls.password,
        f"listener.name.{name}.ssl.key.password": tls.password,
    }


@pytest.fixture(scope="module")
def tls_broker(net: Network, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    host = net.host("tlskafka")
    folder = tmp_path_factory.mktemp("net-tls")
    security = Security(make_tls(folder / "tls", addresses=[host.address]), {JOB_USER: PASSWORD})
    elsewhere = make_tls(folder / "elsewhere", name="elsewhere")  # today's default: 127.0.0.1, localhost
    kafka = EmbeddedKafka(
        folder / "broker", security=security, host=host, extra_settings=elsewhere_listener(host, security, elsewhere)
    )
    # Kafka's SASL server looks up a name for each connection's address: the host's own hosts file
    # answers it (devkit.network), as a cluster's name service would
    kafka.start()  # ready: a SASL_SSL client verifying the certificate names the host's address
    try:
        yield TlsBroker(kafka, elsewhere)
    finally:
        kafka.stop()


@pytest.fixture(scope="module")
def job_password() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(PASSWORD_ENV, PASSWORD)  # the jobs read it from their environment (env:NAME)
        yield


@dataclass(frozen=True)
class StartedJob:
    job: subprocess.Popen[bytes]
    log: Path


@pytest.fixture(scope="module")
def wrong_name_job(
    tls_broker: TlsBroker, net: Network, job_password: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartedJob]:
    """A job on `job2` dialling the ELSEWHERE listener, trusting its certificate (which names only
    127.0.0.1 and localhost). Its start is mostly waiting (its JVM, then up to 15 s for the broker to
    answer), so the first test starts it beside its own job: the file's wall time."""
    folder = tmp_path_factory.mktemp("wrong-name")
    spec = JobSpec(tls_broker.kafka, "tls-name", "g-tls-name", folder / "table")
    sets = [
        *job_sets(tls_broker, ca_pem=tls_broker.elsewhere.ca_pem),
        f"kafka.bootstrap_servers={tls_broker.elsewhere_bootstrap}",
    ]
    log = folder / "job.log"
    job = start_job(spec, "run.mode=until-drained", *sets, log=log, host=net.host("job2"))
    try:
        yield StartedJob(job, log)
    finally:
        kill_job(job)


def job_sets(broker: TlsBroker, ca_pem: Path | None = None) -> list[str]:
    sets = job_security(broker.kafka, JOB_USER, ca_pem)
    # hostname verification is librdkafka's default (https): nothing turns it off
    assert not [s for s in sets if "endpoint.identification" in s or "certificate.verification" in s], sets
    return sets


def finish(job: subprocess.Popen[bytes]) -> int:
    """The job's exit code; killed if it is still running after JOB_TIMEOUT_S (or the test failed)."""
    try:
        return job.wait(JOB_TIMEOUT_S)
    finally:
        kill_job(job)


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


# `make chaos`, with the job across a cut below (CI: the refusal of a certificate for another address)
@pytest.mark.long
@pytest.mark.usefixtures("job_password", "wrong_name_job")  # the next test's job starts beside this one's
def test_a_job_on_another_host_lands_a_backlog_exactly_once_over_sasl_ssl_verifying_the_broker_name(
    tls_broker: TlsBroker, net: Network, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    client, host, kafka = net.host("client"), net.host("job1"), tls_broker.kafka
    spec = JobSpec(kafka, f"tls-{unique}", f"g-{unique}", tmp_path / "table", lock_ms=LOCK_MS)
    kafka.create_topic(spec.topic, partitions=2)
    grant(kafka, JOB_USER, spec.topic, spec.group)
    produced = tls_broker.produce(client, spec.topic, 3000)
    log = tmp_path / "job.log"

    job = start_job(
        spec, "run.mode=until-drained", "run.idle_timeout_ms=4000", *job_sets(tls_broker), log=log, host=host
    )
    rc = finish(job)

    assert rc == 0, tail(log)
    assert start_failure(log) == [], tail(log)
    assert_exactly_once(spark, spec.table, produced)
    assert client.call(nothing_left, kafka, spec.topic, spec.group)


def test_a_trusted_certificate_naming_another_address_is_refused_at_start_with_one_line(
    tls_broker: TlsBroker, wrong_name_job: StartedJob, net: Network
) -> None:
    client, other = net.host("client"), tls_broker.elsewhere_bootstrap
    # the certificate is trusted and only its names are wrong: without the name check a client gets in
    unchecked = {
        **tls_broker.security.client(ca_pem=tls_broker.elsewhere.ca_pem),
        "bootstrap.servers": other,
        "ssl.endpoint.identification.algorithm": "none",
    }
    assert client.call(lambda: AdminClient(unchecked).list_topics(timeout=20).brokers)

    rc, log = finish(wrong_name_job.job), wrong_name_job.log

    lines = start_failure(log)
    print(f"a certificate naming another address: {lines}")
    assert rc == 2, tail(log)
    assert len(lines) == 1, lines or tail(log)
    # the cause named: the address, not the CA (the certificate is trusted)
    address = tls_broker.kafka.address
    assert lines[0].startswith(f"sharelake: kafka.bootstrap_servers = '{other}': the TLS handshake failed"), lines
    reason = f"does not name the address dialled (IP address mismatch, certificate is not valid for '{address}'"
    assert reason in lines[0], lines


# `make chaos` (CI's start-up waits: a hung registry, a broker not answering through the entry point)
@pytest.mark.long
def test_a_job_started_while_the_secured_broker_is_cut_off_waits_then_lands_every_record_once(
    tls_broker: TlsBroker,
    net_faults: Network,
    spark: SparkSession,
    tmp_path: Path,
    unique: str,
    job_password: None,
) -> None:
    client, host, kafka = net_faults.host("client"), net_faults.host("job1"), tls_broker.kafka
    assert kafka.host is not None
    spec = JobSpec(kafka, f"tls-cut-{unique}", f"g-{unique}", tmp_path / "table", lock_ms=LOCK_MS)
    log = tmp_path / "job.log"
    cut = net_faults.cut(host, kafka.host)
    job: subprocess.Popen[bytes] | None = None
    try:
        cut.apply()  # before the job starts: its first connection, and so its first handshake, go nowhere
        job = start_job(
            spec, "run.mode=until-drained", "run.idle_timeout_ms=4000", *job_sets(tls_broker), log=log, host=host
        )
        # the topic, the ACLs and the backlog while the job starts: it gets past its checks only after the heal
        kafka.create_topic(spec.topic, partitions=2)
        grant(kafka, JOB_USER, spec.topic, spec.group)
        produced = tls_broker.produce(client, spec.topic, 2000)
        wait_for(
            lambda: "waiting for a dependency: kafka.bootstrap_servers" in log.read_text(errors="replace"),
            JOB_TIMEOUT_S,
            lambda: f"the start did not wait for the broker:\n{tail(log)}",
            give_up=lambda: job is not None and job.poll() is not None,
        )
        cut.heal()
        healed_at = time.monotonic()
        rc = job.wait(JOB_TIMEOUT_S)
        done_s = time.monotonic() - healed_at
    finally:
        cut.heal()
        if job is not None:
            kill_job(job)

    assert rc == 0, tail(log)
    assert start_failure(log) == [], tail(log)  # an outage waited out, not a TLS or config error
    print(f"secured broker cut off at start: the job ended {done_s:.1f} s after the heal")
    assert_exactly_once(spark, spec.table, produced)
    assert client.call(nothing_left, kafka, spec.topic, spec.group)
