"""A real YARN cluster and HDFS on this machine: Hadoop's own mini clusters in one JVM.

`org.apache.hadoop.mapreduce.MiniHadoopClusterManager` (the test jar of hadoop-mapreduce-client-
jobclient) starts a MiniDFSCluster (a NameNode and DataNodes) and a MiniYARNCluster (a
ResourceManager, NodeManagers, a job history server): the clusters Hadoop's and Spark's own YARN
suites run on. `make yarn` resolves its class path from Maven Central into .cache/jars/yarn/.

The NodeManagers launch real containers (separate processes, each in a session of its own) from
a local folder under `work_dir`; each offers 4 GB to containers (MiniMRYarnCluster sets that,
whatever `-D` says). `conf_dir` is what a client points `HADOOP_CONF_DIR` at: only
`fs.defaultFS` and the ResourceManager's addresses, as a user's edge node would have (the cluster's
own written configuration names test-only classes a client cannot load). `cli()` asks what a user
asks `yarn application`: the applications and their attempts.

Every port is chosen here (the mini cluster's defaults are fixed ports such as 8088), so several
sessions never collide; `stop()` kills the containers the cluster left, by process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from devkit.paths import YARN_JARS
from sharelake.testing.kafka_broker import free_port

# Java 17 closes the JDK internals the mini clusters' Guice and Hadoop's RPC reflect into
ADD_OPENS = [
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in ("java.lang", "java.util", "java.lang.reflect", "java.net", "java.nio", "sun.nio.ch")
]


class YarnCluster:
    """One JVM holding HDFS and YARN, its working files under `work_dir`.

    `hdfs_url` is the file system's root (`hdfs://127.0.0.1:port`); `conf_dir` the client
    configuration; `applications()` and `attempts(app_id)` ask the ResourceManager."""

    def __init__(self, work_dir: Path, nodemanagers: int = 1) -> None:
        self.work_dir = work_dir
        self.nodemanagers = nodemanagers
        self.conf_dir = work_dir / "client-conf"
        self._ports: dict[str, int] = {}
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.work_dir / "yarn-cluster.log"

    @property
    def hdfs_url(self) -> str:
        return f"hdfs://127.0.0.1:{self._port('nn')}"

    def _port(self, name: str) -> int:
        if name not in self._ports:
            raise RuntimeError("the YARN cluster has no ports yet: call start() first")
        return self._ports[name]

    def start(self, timeout_s: float = 180.0) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        names = (
            "nn",
            "nn_web",
            "rm",
            "rm_scheduler",
            "rm_tracker",
            "rm_admin",
            "rm_web",
            "jhs",
            "jhs_web",
            "jhs_admin",
        )
        self._ports = {name: free_port() for name in names}
        address = {name: f"127.0.0.1:{port}" for name, port in self._ports.items()}
        settings = {
            "yarn.resourcemanager.hostname": "127.0.0.1",
            "yarn.resourcemanager.scheduler.address": address["rm_scheduler"],
            "yarn.resourcemanager.resource-tracker.address": address["rm_tracker"],
            "yarn.resourcemanager.admin.address": address["rm_admin"],
            "yarn.resourcemanager.webapp.address": address["rm_web"],
            "mapreduce.jobhistory.address": address["jhs"],
            "mapreduce.jobhistory.webapp.address": address["jhs_web"],
            "mapreduce.jobhistory.admin.address": address["jhs_admin"],
            "hadoop.tmp.dir": str(self.work_dir / "tmp"),
            "yarn.nodemanager.resource.cpu-vcores": "8",
            "yarn.scheduler.minimum-allocation-mb": "256",
            # a JVM's and a Python worker's virtual memory is far above their use; most clusters turn this off
            "yarn.nodemanager.vmem-check-enabled": "false",
            # a shared CI disk may be fuller than the default 90%: the node must not turn unhealthy
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99.5",
            # two jobs at once: the default lets application masters take 10% of the cluster, one AM
            "yarn.scheduler.capacity.maximum-am-resource-percent": "0.5",
            # a killed driver gets another attempt (Spark's spark.yarn.maxAppAttempts is capped by this)
            "yarn.resourcemanager.am.max-attempts": "4",
            # YARN waits this long for a lost container's node before it counts the loss; seconds, not 10 minutes
            "yarn.nm.liveness-monitor.expiry-interval-ms": "30000",
        }
        command = ["java", "-Xmx1g", "-XX:+UseSerialGC", *ADD_OPENS, "-cp", f"{YARN_JARS}/*"]
        command += ["org.apache.hadoop.mapreduce.MiniHadoopClusterManager", "-format"]
        command += ["-nnport", str(self._ports["nn"]), "-nnhttpport", str(self._ports["nn_web"])]
        command += ["-rmport", str(self._ports["rm"]), "-jhsport", str(self._ports["jhs"])]
        command += ["-nodemanagers", str(self.nodemanagers), "-writeConfig", str(self.work_dir / "cluster-conf.xml")]
        for key, value in settings.items():
            command += ["-D", f"{key}={value}"]
        if not list(YARN_JARS.glob("hadoop-minicluster-*.jar")):
            raise FileNotFoundError(
                f"no Hadoop mini cluster jars in {YARN_JARS}: run `make yarn` (Maven fetches them once)"
            )
        with self.log_file.open("ab") as out:
            # its own session: stop() signals the JVM's whole group
            self._proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, cwd=self.work_dir, start_new_session=True
            )
        self._write_client_conf()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"the YARN cluster exited at start (code {self._proc.returncode}):\n{self.tail_logs()}"
                )
            if self._ready():
                return
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"the YARN cluster was not ready within {timeout_s:.0f}s:\n{self.tail_logs()}")

    def _ready(self) -> bool:
        """The manager writes the configuration once HDFS is up and every NodeManager has registered."""
        written = self.work_dir / "cluster-conf.xml"
        return written.exists() and written.read_text(errors="replace").rstrip().endswith("</configuration>")

    def _write_client_conf(self) -> None:
        """What a client needs: the file system and the ResourceManager's addresses (`HADOOP_CONF_DIR`)."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        core = {"fs.defaultFS": self.hdfs_url}
        yarn = {
            "yarn.resourcemanager.hostname": "127.0.0.1",
            "yarn.resourcemanager.address": f"127.0.0.1:{self._ports['rm']}",
            "yarn.resourcemanager.scheduler.address": f"127.0.0.1:{self._ports['rm_scheduler']}",
            "yarn.resourcemanager.webapp.address": f"127.0.0.1:{self._ports['rm_web']}",
        }
        for name, props in (("core-site.xml", core), ("yarn-site.xml", yarn)):
            body = "".join(f"  <property><name>{k}</name><value>{v}</value></property>\n" for k, v in props.items())
            (self.conf_dir / name).write_text(f"<configuration>\n{body}</configuration>\n")

    def fs(self, *args: str) -> str:
        """What `hdfs dfs ARGS` prints (Hadoop's FsShell against this cluster's HDFS)."""
        return self._client("org.apache.hadoop.fs.FsShell", *args)

    def cli(self, *args: str) -> str:
        """What `yarn ARGS` prints on a client of this cluster (Hadoop's ApplicationCLI from the same jars).

        The mini cluster's ResourceManager serves no REST API (its web application starts without
        its routes), so its state is read as a user's shell reads it."""
        return self._client("org.apache.hadoop.yarn.client.cli.ApplicationCLI", *args)

    def _client(self, main: str, *args: str) -> str:
        command = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp", f"{self.conf_dir}:{YARN_JARS}/*", main]
        done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise RuntimeError(f"{main} {' '.join(args)} failed (exit {done.returncode}): {done.stderr[-2000:]}")
        return done.stdout

    def applications(self) -> list[dict[str, str]]:
        """Every application (`yarn application -list -appStates ALL`): id, name, state, final state."""
        rows = _table(self.cli("application", "-list", "-appStates", "ALL"), "Application-Id")
        return [{"id": r[0], "name": r[1], "state": r[5], "final_state": r[6]} for r in rows if len(r) >= 7]

    def application(self, name: str) -> dict[str, str] | None:
        """The newest application named `name`, or None (ids grow with submission)."""
        named = [app for app in self.applications() if app["name"] == name]
        return max(named, key=lambda app: app["id"]) if named else None

    def attempts(self, app_id: str) -> list[dict[str, str]]:
        """An application's attempts, oldest first (`yarn applicationattempt -list APP`): id, state, container."""
        rows = _table(self.cli("applicationattempt", "-list", app_id), "ApplicationAttempt-Id")
        return sorted(
            ({"id": r[0], "state": r[1], "container": r[2]} for r in rows if len(r) >= 3), key=lambda a: a["id"]
        )

    def container_pids(self, app_id: str) -> list[int]:
        """The processes of an application's running containers (their launch command names the app)."""
        return _pids_naming(app_id.encode(), str(self.work_dir).encode())

    def kill_containers(self, app_id: str, main_class: str) -> list[int]:
        """SIGKILL the containers of an application whose JVM runs `main_class` (each container's
        whole process group: its JVM and its Python), as a lost node or an OOM kill would; their pids."""
        pids = [
            pid
            for pid in self.container_pids(app_id)
            if main_class.encode() in _cmdline(pid) and b"bash" not in _cmdline(pid).split(b"\0")[0]
        ]
        if not pids:
            raise RuntimeError(f"no running container of {app_id} runs {main_class}")
        for pid in pids:
            _kill_group(pid)
        return pids

    def kill_driver(self, app_id: str) -> int:
        """Kill the application master's container (in cluster mode: the driver); its JVM's pid."""
        return self.kill_containers(app_id, "ApplicationMaster")[0]

    def tail_logs(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return ""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def container_logs(self, app_id: str) -> dict[str, str]:
        """Every container's stdout and stderr of an application (the NodeManagers' log folders: log
        aggregation is off, as `yarn logs` would read them from the nodes), by relative path.

        Only the log folders are walked: the local folders hold archives YARN is unpacking, whose
        temporary folders vanish under a walk."""
        logs = {}
        for log_dir in self.work_dir.glob("target/test/data/*/*/*-logDir-nm-*"):
            for path in sorted(log_dir.glob(f"{app_id}/container_*/std*")):
                try:
                    logs[str(path.relative_to(self.work_dir))] = path.read_text(errors="replace")
                except FileNotFoundError:
                    continue
        return logs

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(10)
        # containers live in sessions of their own: whatever the NodeManagers left is killed by group
        for pid in _pids_naming(str(self.work_dir).encode()):
            _kill_group(pid)


def _table(printed: str, first_header: str) -> list[list[str]]:
    """The rows of a table the YARN CLI printed (tab-separated, after the header row naming `first_header`)."""
    lines = printed.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith(first_header)), len(lines))
    return [[cell.strip() for cell in line.split("\t")] for line in lines[start + 1 :] if line.strip()]


def _pids_naming(*needles: bytes) -> list[int]:
    """The processes whose command line holds every one of `needles`."""
    return [
        int(proc.name)
        for proc in Path("/proc").iterdir()
        if proc.name.isdigit() and all(needle in _cmdline(int(proc.name)) for needle in needles)
    ]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _kill_group(pid: int) -> None:
    """SIGKILL `pid`'s process group, never this process's own."""
    try:
        group = os.getpgid(pid)
        if group != os.getpgid(0):
            os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def wait_for_application(cluster: YarnCluster, name: str, timeout_s: float = 120.0) -> dict[str, str]:
    """The application named `name` once the ResourceManager lists it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if (app := cluster.application(name)) is not None:
                return app
        except RuntimeError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"no YARN application named {name} within {timeout_s:.0f}s")
