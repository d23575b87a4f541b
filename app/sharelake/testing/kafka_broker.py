"""An embedded Apache Kafka node (KRaft, combined broker+controller, share groups on).

Alone it is a single-node broker (the testing kit's `sharelake_broker`, the demo, the project's
tests); `devkit.kafka_cluster` runs several as one replicated cluster. It runs the jars of
`kafka-broker.lock` (fetched from Maven Central on first use, `sharelake.testing.maven_artifacts`), or
those of `SHARELAKE_KAFKA_JARS` (a checkout's `make jars` folder): it formats KRaft storage once
(`--standalone` alone, the cluster's static voters in a cluster), starts `kafka.Kafka` on loopback
ports, waits until the broker answers, and stops (or kills) only the process it started. The ports
are kept in the data dir so a restart on the same data finds its quorum again.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from sharelake.testing.maven_artifacts import fetched

T = TypeVar("T")
JARS_ENV = "SHARELAKE_KAFKA_JARS"


class Host(Protocol):
    """A host of a test network (`devkit.network.Host`): its address, and commands and calls run inside it."""

    @property
    def address(self) -> str: ...

    def command(self, argv: Sequence[str]) -> list[str]: ...

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...


class Security(Protocol):
    """A secured broker's settings (`devkit.security.Security`): SASL_SSL users, certificates, ACLs."""

    def format_args(self) -> list[str]: ...

    def broker_settings(self) -> dict[str, str]: ...

    def client(self) -> dict[str, str]: ...


def broker_jars() -> Path:
    """The jars the broker runs: `SHARELAKE_KAFKA_JARS`, else the lock's, fetched on first use."""
    given = os.environ.get(JARS_ENV)
    return Path(given) if given else fetched("kafka-broker.lock")


def jars_in(folder: Path) -> list[Path]:
    """The jars of one folder, sorted; raise with the fix if there are none."""
    jars = sorted(folder.glob("*.jar"))
    if not jars:
        raise FileNotFoundError(f"no jars in {folder}: run `make jars` (Maven resolves them once)")
    return jars


# Settings every embedded node runs with, alone or in a cluster: quick group joins and the shortest
# lock allowed, so tests can use short record locks on their groups.
COMMON_SETTINGS: dict[str, str] = {
    "offsets.topic.num.partitions": "3",
    "share.coordinator.state.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "group.share.min.record.lock.duration.ms": "1000",
    # members learn their assignment on the heartbeat: 1 s instead of 5 s makes joins quick
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "1000",
    # a killed member leaves the group after 6 s instead of 45 s, so the survivors get its partitions
    "group.share.session.timeout.ms": "6000",
    "group.share.min.session.timeout.ms": "6000",
    # let a group raise share.partition.max.record.locks (default 2000) for throughput on few
    # partitions (kafka.partition_max_record_locks): 10000 is the most the broker accepts (its
    # default bound refused 10000)
    "group.share.max.partition.max.record.locks": "10000",
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    "log.flush.interval.messages": "9223372036854775807",
}

# A single node can only keep one copy of each internal topic.
SINGLE_NODE_SETTINGS: dict[str, str] = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
}


class KafkaBrokers(Protocol):
    """What clients and tests need of a running Kafka, one node or a cluster."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def client_settings(self) -> dict[str, str | int | float | bool]: ...

    def admin(self) -> AdminClient: ...

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None: ...

    def tail_logs(self, lines: int = 40) -> str: ...


@dataclass(frozen=True)
class Quorum:
    """The static KRaft quorum a node of a cluster belongs to: its cluster id and every node's ports.

    `ports` maps node id -> (broker port, controller port); every node is a voter. `addresses`
    maps node id -> its host's address, for nodes on hosts of a `devkit.network` (else loopback).
    """

    cluster_id: str
    ports: dict[int, tuple[int, int]]
    settings: dict[str, str]
    addresses: dict[int, str] = field(default_factory=dict)

    def address(self, node_id: int) -> str:
        return self.addresses.get(node_id, LOOPBACK)

    @property
    def voters(self) -> str:
        return ",".join(f"{n}@{self.address(n)}:{c}" for n, (_, c) in sorted(self.ports.items()))


LOOPBACK = "127.0.0.1"
# a node on a host of its own has that host's ports to itself
HOST_PORTS = (9092, 9093)

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes, URL-safe base64, as Kafka's `Uuid.randomUuid()`.

    Like Kafka, never one that starts with '-': the storage tool's argument parser would read it
    as an option (1 id in 64 did, and failed a CI run).
    """
    while True:
        candidate = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not candidate.startswith("-"):
            return candidate


def create_topic(admin: AdminClient, name: str, partitions: int, replicas: int, config: dict[str, str] | None) -> None:
    """Create one topic and wait until the brokers' metadata serves every partition with a leader
    (`admin` is held here: the futures fail if it is collected). The controller's success comes
    first: a client asking a broker before its metadata caught up would be told there is no such topic."""
    topic = NewTopic(name, num_partitions=partitions, replication_factor=replicas, config=config or {})
    admin.create_topics([topic], operation_timeout=30)[name].result(timeout=60)
    deadline = time.monotonic() + 60
    while True:
        served = admin.list_topics(name, timeout=10).topics.get(name)
        if served is not None and served.error is None and len(served.partitions) == partitions:
            if all(p.leader >= 0 and p.error is None for p in served.partitions.values()):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name} created, but its {partitions} partitions had no leader after 60 s")
        time.sleep(0.1)


@dataclass
class EmbeddedKafka:
    """One broker+controller JVM on loopback, owning `data_dir`.

    Use as a context manager, or call `start()` / `stop()`. `bootstrap` is the address clients use.
    Alone (`quorum` None) it is a single-node cluster; with a `quorum` it is node `node_id` of it.
    With a `host` (`devkit.network`) it runs inside that host, on its address: its clients must be
    made inside a host of the same network too (`admin()` is made in its own).
    """

    data_dir: Path
    extra_settings: dict[str, str] = field(default_factory=dict)
    heap: str = "768m"
    start_timeout_s: float = 90.0
    node_id: int = 1
    quorum: Quorum | None = None
    security: Security | None = None  # a SASL_SSL listener with ACLs instead of PLAINTEXT
    jars: Path = field(default_factory=broker_jars)  # the Kafka release to run (devkit's KAFKA_FLOOR_JARS: the oldest)
    host: Host | None = None  # a host of a devkit.network to run in, instead of the machine's loopback
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    port: int = field(default=0, init=False)
    controller_port: int = field(default=0, init=False)

    @property
    def address(self) -> str:
        return self.host.address if self.host else LOOPBACK

    @property
    def bootstrap(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def replication_factor(self) -> int:
        return 1

    @property
    def listener(self) -> str:
        return "SASL_SSL" if self.security else "PLAINTEXT"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "logs" / "server.log"

    @property
    def stdout_file(self) -> Path:
        return self.data_dir / "logs" / "broker.out"

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> EmbeddedKafka:
        self.launch()
        self.wait_ready()
        return self

    def launch(self) -> None:
        """Format the storage once and start the JVM, without waiting (a cluster starts all first)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        self._choose_ports()
        props = self._write_properties()
        if not (self.data_dir / "kraft" / "meta.properties").exists():
            self._format(props)
        self._launch(props)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the broker this object started (SIGTERM, then SIGKILL after `timeout_s`)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL the JVM, as a crashed machine would leave it: no clean shutdown, no handover."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- client helpers ----------------------------------------------------------------------------

    @property
    def client_settings(self) -> dict[str, str | int | float | bool]:
        """librdkafka settings of a client that may do anything here (the admin user, when secured)."""
        return {"bootstrap.servers": self.bootstrap, **(self.security.client() if self.security else {})}

    def admin(self) -> AdminClient:
        """An admin client; on a host, made inside it (librdkafka's threads, so its sockets, stay there)."""
        settings = dict(self.client_settings)
        return self.host.call(AdminClient, settings) if self.host else AdminClient(settings)

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        create_topic(self.admin(), name, partitions, self.replication_factor, config)

    def tail_logs(self, lines: int = 60) -> str:
        """The last lines of the broker's logs, for a failing test or a failed start to show."""
        out = []
        for f in (self.stdout_file, self.log_file):
            if f.exists():
                text = f.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {f}\n" + "\n".join(text))
        return "\n".join(out)

    # -- internals ---------------------------------------------------------------------------------

    def _choose_ports(self) -> None:
        if self.quorum is not None:
            self.port, self.controller_port = self.quorum.ports[self.node_id]
            return
        if self.host is not None:
            self.port, self.controller_port = HOST_PORTS
            return
        saved = self.data_dir / "ports.json"
        if saved.exists():
            ports = json.loads(saved.read_text())
            self.port, self.controller_port = ports["broker"], ports["controller"]
            return
        self.port, self.controller_port = free_port(), free_port()
        saved.write_text(json.dumps({"broker": self.port, "controller": self.controller_port}))

    def _write_properties(self) -> Path:
        if self.quorum is None:
            quorum = {"controller.quorum.bootstrap.servers": f"{self.address}:{self.controller_port}"}
            quorum |= SINGLE_NODE_SETTINGS
        else:
            quorum = {"controller.quorum.voters": self.quorum.voters, **self.quorum.settings}
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "listeners": f"{self.listener}://{self.address}:{self.port},CONTROLLER://{self.address}:{self.controller_port}",
            "advertised.listeners": f"{self.listener}://{self.address}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": self.listener,
            "listener.security.protocol.map": f"{self.listener}:{self.listener},CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "kraft"),
            **COMMON_SETTINGS,
            **quorum,
            **(self.security.broker_settings() if self.security else {}),
            **self.extra_settings,
        }
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.data_dir / "log4j2.properties").write_text(LOG4J2.format(log_file=self.log_file))
        return path

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        classpath = os.pathsep.join(str(j) for j in jars_in(self.jars))
        return [
            "java", f"-Xmx{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp", classpath, main, *args,
        ]  # fmt: skip

    def _format(self, props: Path) -> None:
        # `--cluster-id=<id>` in one argument: an id is never read as an option, whatever it starts with.
        # A cluster's nodes share its id and name their voters in the properties (a static quorum).
        alone = self.quorum is None
        cid = cluster_id() if self.quorum is None else self.quorum.cluster_id
        args = ("format", f"--cluster-id={cid}", "-c", str(props), *(["--standalone"] if alone else []))
        args += tuple(self.security.format_args()) if self.security else ()
        cmd = self._java("kafka.tools.StorageTool", *args)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        (self.data_dir / "logs" / "format.out").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise RuntimeError(f"kafka storage format failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def _launch(self, props: Path) -> None:
        out = self.stdout_file.open("ab")
        java = self._java("kafka.Kafka", str(props), heap=self.heap)
        self._proc = subprocess.Popen(
            self.host.command(java) if self.host else java,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal must not kill the broker first
        )
        out.close()

    def wait_ready(self) -> None:
        """Wait until this node's broker answers metadata requests; raise with its log tail if not."""
        deadline = time.monotonic() + self.start_timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                raise RuntimeError(f"kafka broker exited during start\n{self.tail_logs()}")
            try:
                if self.host.call(self._answers) if self.host else self._answers():
                    return
            except (OSError, KafkaException) as e:
                last = e
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"kafka broker not ready after {self.start_timeout_s}s ({last})\n{self.tail_logs()}")

    def _answers(self) -> bool:
        # a plain TCP probe first, so the client does not log refused connections
        socket.create_connection((self.address, self.port), timeout=1).close()
        return bool(AdminClient(dict(self.client_settings)).list_topics(timeout=5).brokers)
