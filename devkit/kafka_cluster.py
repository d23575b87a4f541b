"""An embedded replicated Kafka cluster: 3 KRaft nodes (combined broker+controller) on loopback.

For what a single node cannot show (a node's death, a network fault); otherwise the
single node of `sharelake.testing.kafka_broker` serves. Every node runs the same Maven-resolved jars as the
single node, with a static controller quorum of all nodes, and every topic - the job's, the
consumer offsets and the share-group state - keeps 3 copies with `min.insync.replicas` 2, so one
node can die at any moment without losing an acknowledged write. `kill()` / `restart()` act on
one node, as a crashed machine and its return would. Given `hosts` (`devkit.network`), each node
runs on a host of its own, so a network fault can isolate one from its peers; the cluster's own
admin requests are then made from the `client` host.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

from devkit.network import Host
from sharelake.testing.kafka_broker import HOST_PORTS, EmbeddedKafka, Quorum, cluster_id, create_topic, free_port

# Three copies of everything, two of them needed for a write: what a production cluster runs.
REPLICATED_SETTINGS: dict[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}

# How quickly the cluster notices a dead node. The controller fences a broker whose heartbeats
# stop for `broker.session.timeout.ms` (Kafka's default 9 s); only then do its partitions get new
# leaders and leave the ISRs, and until then every write that needs it hangs: the share-state
# updates, so the acknowledgements of every member whose share partitions' state that node kept,
# whichever node leads their records. When the dead node was also the active KRaft controller,
# the voters notice after `controller.quorum.fetch.timeout.ms` (default 2 s) and elect another (a
# split vote retries after up to `controller.quorum.election.backoff.max.ms`, default 1 s), and the
# new controller starts the dead broker's session afresh. Measured: with the quorum's defaults and
# a 2.5 s session, 2.9 s to a new controller and fenced after 5.4 s; with these, 0.8-1.6 s and
# 2.4-3.1 s (1.3 s when the controller lives). What stays is the broker's share-state persister,
# which retries a write to a dead share coordinator after 1, 2, 4 s (+-20%, fixed in Kafka 4.3's
# PersisterStateManager): an acknowledgement caught by it waited up to 4.4 s past the fence. These
# are broker settings an operator chooses; the README's "Guarantees" section gives the stall each costs.
FAILOVER_SETTINGS: dict[str, str] = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "1500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.election.backoff.max.ms": "200",
}


def group_partition(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition whose leader coordinates `group`: Kafka's
    `Utils.abs(group.hashCode()) % partitions`, with Java's String.hashCode over UTF-16 units."""
    units = group.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


@dataclass
class EmbeddedKafkaCluster:
    """`size` nodes under `data_dir`, each a voter and a broker. A context manager, like one node."""

    data_dir: Path
    size: int = 3
    extra_settings: dict[str, str] = field(default_factory=dict)
    heap: str = "512m"
    start_timeout_s: float = 120.0
    # FAILOVER_SETTINGS (a dead node fenced after 1.5 s); False: Kafka's defaults (9 s), as users run it
    fast_fencing: bool = True
    # one host per node (node i on hosts[i - 1]), and the host its admin requests come from
    hosts: list[Host] | None = None
    client: Host | None = None
    nodes: dict[int, EmbeddedKafka] = field(default_factory=dict, init=False)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    @property
    def replication_factor(self) -> int:
        return min(3, self.size)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> EmbeddedKafkaCluster:
        quorum = self._quorum()
        for node_id in quorum.ports:
            self.nodes.setdefault(
                node_id,
                EmbeddedKafka(
                    self.data_dir / f"node-{node_id}", dict(self.extra_settings), self.heap,
                    self.start_timeout_s, node_id=node_id, quorum=quorum, host=self.host_of(node_id),
                ),
            )  # fmt: skip
        for node in self.nodes.values():  # all at once: no node can finish starting without a quorum
            node.launch()
        for node in self.nodes.values():
            node.wait_ready()
        self.wait_brokers(self.size)
        return self

    def stop(self) -> None:
        """Stop node by node (SIGTERM); the nodes left without a majority of the controller voters are
        killed: their controlled shutdown waits for a quorum that is gone, until the stop's timeout."""
        nodes = list(self.nodes.values())
        majority = len(nodes) // 2 + 1
        for i, node in enumerate(nodes):
            if len(nodes) - i >= majority:
                node.stop()
            else:
                node.kill()

    def kill(self, node_id: int) -> None:
        """SIGKILL one node: its leaderships and coordinators move once the controller fences it."""
        self.nodes[node_id].kill()

    def restart(self, node_id: int) -> None:
        """Start a killed node again on its own data and ports, and wait until it serves."""
        self.nodes[node_id].start()
        self.wait_brokers(self.size)

    def wait_brokers(self, count: int, timeout_s: float = 60.0) -> None:
        """Wait until `count` brokers are registered and unfenced in the cluster's metadata."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            seen = len(self.admin().list_topics(timeout=5).brokers)
            if seen >= count:
                return
            time.sleep(0.2)
        raise TimeoutError(f"{seen} of {count} brokers registered after {timeout_s}s\n{self.tail_logs()}")

    def __enter__(self) -> EmbeddedKafkaCluster:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- client helpers ----------------------------------------------------------------------------

    @property
    def client_settings(self) -> dict[str, str | int | float | bool]:
        return {"bootstrap.servers": self.bootstrap}

    def admin(self) -> AdminClient:
        settings = dict(self.client_settings)
        return self.client.call(AdminClient, settings) if self.client else AdminClient(settings)

    def host_of(self, node_id: int) -> Host | None:
        return self.hosts[node_id - 1] if self.hosts else None

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        create_topic(self.admin(), name, partitions, self.replication_factor, config)

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> the node id that leads it, as the metadata says now (-1: no leader)."""
        meta = self.admin().list_topics(topic, timeout=10).topics[topic]
        return {p: int(m.leader) for p, m in meta.partitions.items()}

    def group_coordinator(self, group: str) -> int:
        """The node that coordinates `group`'s membership: the leader of its offsets partition."""
        offsets = self.leaders("__consumer_offsets")
        return offsets[group_partition(group, len(offsets))]

    def tail_logs(self, lines: int = 40) -> str:
        return "\n".join(f"=== node {i}\n{n.tail_logs(lines)}" for i, n in self.nodes.items())

    # -- internals ---------------------------------------------------------------------------------

    def _quorum(self) -> Quorum:
        """The cluster id and ports, chosen once and kept in the data dir so restarts find them."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        saved = self.data_dir / "cluster.json"
        if saved.exists():
            spec = json.loads(saved.read_text())
        else:
            spec = {
                "cluster_id": cluster_id(),
                "ports": {
                    str(i): list(HOST_PORTS) if self.hosts else [free_port(), free_port()]
                    for i in range(1, self.size + 1)
                },
            }
            saved.write_text(json.dumps(spec))
        ports = {int(i): (int(b), int(c)) for i, (b, c) in spec["ports"].items()}
        addresses = {i: host.address for i in ports if (host := self.host_of(i)) is not None}
        settings = {**REPLICATED_SETTINGS, **(FAILOVER_SETTINGS if self.fast_fencing else {})}
        return Quorum(spec["cluster_id"], ports, settings, addresses)
