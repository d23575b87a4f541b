"""An embedded schema registry: Apicurio Registry 2.6 (in-memory storage) on a loopback port.

A real Confluent-compatible schema registry for tests (the testing kit's `sharelake_registry`, the
project's own tests), as the embedded broker stands in for a real Kafka. It runs the Apicurio
distribution of `schema-registry.lock`, fetched from Maven Central and unpacked on first use, or
the one in `SHARELAKE_REGISTRY_DIR` (a checkout's `make jars` folder): one Quarkus JVM bound to
127.0.0.1 only, logging to a file in its data dir.
`url` is the Confluent-compatible API (`/apis/ccompat/v7`), what confluent-kafka's
`SchemaRegistryClient` takes. `pause()` / `resume()` freeze and thaw the
JVM (SIGSTOP / SIGCONT): while frozen it accepts connections but never answers, as a registry that
hangs would. The storage is in memory: a restart starts empty.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import TracebackType

from sharelake.testing.kafka_broker import free_port
from sharelake.testing.maven_artifacts import unpacked

CCOMPAT_PATH = "/apis/ccompat/v7"

# JVM flags for a quick start on a small machine (2 cores): the C1 compiler alone (the registry
# serves a few test requests, it never runs long enough for C2 to pay off), the serial collector
# (no GC threads to start), and a small heap.
JVM_FLAGS: tuple[str, ...] = (
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xss512k",
    "-Djava.awt.headless=true",
)

# A class-data-sharing archive of the registry's classes, next to its jar: the first clean stop of a
# registry writes it (-XX:ArchiveClassesAtExit), later starts map it (-XX:SharedArchiveFile), which
# halves the start (about 4 s -> 2 s here). `make` re-unpacking the distribution deletes it with the
# rest of the folder; a JDK that does not match it warns in the log and starts without it.
CDS_ARCHIVE = "registry.jsa"

# Quarkus / Apicurio / Narayana settings, as system properties (they override the app's own).
QUARKUS_SETTINGS: dict[str, str] = {
    "quarkus.http.host": "127.0.0.1",  # loopback only (the default 0.0.0.0 listens on every interface)
    "quarkus.console.color": "false",  # the log goes to a file: no ANSI colours
    "quarkus.banner.enabled": "false",
    # Narayana (the app's transaction manager) else takes a unique process id from a server socket
    # it opens on an ephemeral loopback port and never serves: a UUID does that without a port
    "CoreEnvironmentBean.processImplementationClassName": "com.arjuna.ats.internal.arjuna.utils.UuidProcessId",
}


def port_is_free(port: int) -> None:
    """Raise if something listens on 127.0.0.1:`port` (binding as Quarkus does, with SO_REUSEADDR,
    so a port its last run left in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise OSError(e.errno, f"schema registry port 127.0.0.1:{port} is taken ({e.strerror})") from e


DIR_ENV = "SHARELAKE_REGISTRY_DIR"


def registry_dir() -> Path:
    """The unpacked distribution: `SHARELAKE_REGISTRY_DIR`, else the lock's, fetched on first use."""
    given = os.environ.get(DIR_ENV)
    return Path(given) if given else unpacked("schema-registry.lock")


def runner_jar(folder: Path | None = None) -> Path:
    """The Apicurio runner jar in the unpacked distribution; raise with the fix if it is missing."""
    folder = folder or registry_dir()
    jars = sorted(folder.glob("**/apicurio-registry-app-*-runner.jar"))
    if not jars:
        raise FileNotFoundError(
            f"no Apicurio Registry distribution (apicurio-registry-app-*-runner.jar) under {folder}: "
            f"unset {DIR_ENV} to fetch it, or run `make jars` in a checkout (Maven unpacks it into .cache/registry/)"
        )
    return jars[-1]


class EmbeddedSchemaRegistry:
    """One Apicurio Registry JVM on 127.0.0.1, owning `data_dir` (its log, temp files, working dir).

    Use as a context manager, or call `start()` / `stop()`. `port` None picks a free port at the
    first start and keeps it for later starts, so `url` does not change across a restart.
    """

    def __init__(self, data_dir: Path, port: int | None = None, heap: str = "256m") -> None:
        self.data_dir = data_dir
        self.port = port
        self.heap = heap
        self.started_in_s: float | None = None  # how long the last start took, until the API answered
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._cds_dump: Path | None = None  # where this JVM writes the class archive at exit, if it does

    @property
    def url(self) -> str:
        """The Confluent-compatible API's base URL (what `SchemaRegistryClient` takes as `url`)."""
        if self.port is None:
            raise RuntimeError("the schema registry has no port yet: call start() first")
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "registry.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def command(self) -> list[str]:
        """The JVM command line `start()` runs."""
        if self.port is None:
            raise RuntimeError("the schema registry has no port yet: call start() first")
        settings = {**QUARKUS_SETTINGS, "quarkus.http.port": str(self.port)}
        return [
            "java", f"-Xmx{self.heap}", *JVM_FLAGS, *self._cds_flags(),
            f"-Djava.io.tmpdir={self.data_dir / 'tmp'}",
            *(f"-D{k}={v}" for k, v in settings.items()),
            "-jar", str(runner_jar()),
        ]  # fmt: skip

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, timeout_s: float = 90.0) -> EmbeddedSchemaRegistry:
        """Start the JVM and wait until `GET {url}/subjects` answers 200; raise with the log tail if not."""
        if self.is_running():
            return self
        jar = runner_jar()  # fetched, or fail, before anything is created
        (self.data_dir / "tmp").mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = free_port()
        else:  # else the readiness probe would take whatever answers there for this registry
            port_is_free(self.port)
        self._cds_dump = self._new_cds_dump()
        cmd = self.command()
        begun = time.monotonic()
        out = self.log_file.open("ab")
        self._proc = subprocess.Popen(
            cmd,
            cwd=self.data_dir,  # anything the app writes relative to its working dir lands here
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C in the terminal must not kill the registry first
        )
        out.close()
        self._paused = False
        try:
            self._wait_ready(begun + timeout_s, timeout_s, jar)
        except BaseException:
            self.kill()
            raise
        self.started_in_s = time.monotonic() - begun
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the registry this object started (SIGTERM, then SIGKILL after `timeout_s`)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            self._drop_cds_dump()  # it exited by itself: keep no archive of a failed run
            return
        if self._paused:  # a stopped JVM does not act on SIGTERM until it runs again
            proc.send_signal(signal.SIGCONT)
            self._paused = False
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            self._drop_cds_dump()
        self._keep_cds_dump()

    def kill(self) -> None:
        """SIGKILL the JVM (paused or not), as a crashed machine would leave it."""
        proc, self._proc = self._proc, None
        self._paused = False
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        self._drop_cds_dump()  # a killed JVM writes none, or only part of one

    def pause(self, timeout_s: float = 30.0) -> None:
        """Freeze the JVM (SIGSTOP): connections still open (the kernel accepts them) but no request
        is ever answered, so clients time out, as they would on a hung registry.

        Returns once the kernel reports the whole process stopped. The signal stops a JVM's
        threads one by one, each as it next runs: on a busy machine a request sent right after
        the signal could still be answered by a thread not stopped yet."""
        if self._paused:
            return
        self._signal(signal.SIGSTOP)
        self._paused = True
        self._await_stopped(time.monotonic() + timeout_s)

    def resume(self) -> None:
        """Thaw a paused JVM (SIGCONT): requests that waited meanwhile are served now."""
        self._signal(signal.SIGCONT)
        self._paused = False

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused

    def __enter__(self) -> EmbeddedSchemaRegistry:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def tail_logs(self, lines: int = 60) -> str:
        """The last lines of the registry's log, for a failing test or a failed start to show."""
        if not self.log_file.exists():
            return f"--- {self.log_file} (none yet)"
        text = self.log_file.read_text(errors="replace").splitlines()[-lines:]
        return f"--- {self.log_file}\n" + "\n".join(text)

    # -- internals ---------------------------------------------------------------------------------

    def _cds_flags(self) -> list[str]:
        """Map the class archive if there is one; else write one at exit if `start()` chose a file."""
        archive = runner_jar().parent / CDS_ARCHIVE
        if archive.exists():
            return [f"-XX:SharedArchiveFile={archive}"]
        return [f"-XX:ArchiveClassesAtExit={self._cds_dump}"] if self._cds_dump is not None else []

    def _new_cds_dump(self) -> Path | None:
        """Where the JVM about to start writes the class archive, if there is none yet and it may."""
        folder = runner_jar().parent
        if (folder / CDS_ARCHIVE).exists() or not os.access(folder, os.W_OK):
            return None
        # its own file: registries stopping at the same time do not write over each other
        return folder / f"{CDS_ARCHIVE}.{uuid.uuid4().hex[:8]}.tmp"

    def _keep_cds_dump(self) -> None:
        dump, self._cds_dump = self._cds_dump, None
        if dump is not None and dump.exists():
            if dump.stat().st_size > 0:
                dump.replace(dump.with_name(CDS_ARCHIVE))  # atomic: a starting JVM sees all or nothing
            else:
                dump.unlink()

    def _drop_cds_dump(self) -> None:
        dump, self._cds_dump = self._cds_dump, None
        if dump is not None:
            dump.unlink(missing_ok=True)

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError("the schema registry is not running")
        os.kill(self._proc.pid, sig)

    def _await_stopped(self, deadline: float) -> None:
        """Wait for the child's stop report (waitpid's WUNTRACED), sent when its last thread stopped."""
        assert self._proc is not None
        while True:
            pid, status = os.waitpid(self._proc.pid, os.WUNTRACED | os.WNOHANG)
            if pid and os.WIFSTOPPED(status):
                return
            if pid:  # it exited instead: the status is reaped here, so Popen learns it from us
                self._proc.returncode = os.waitstatus_to_exitcode(status)
                raise RuntimeError(f"the schema registry exited while pausing ({self._proc.returncode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the schema registry did not stop on SIGSTOP\n{self.tail_logs()}")
            time.sleep(0.005)

    def _wait_ready(self, deadline: float, timeout_s: float, jar: Path) -> None:
        probe = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never an http_proxy from the env
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                code = self._proc.returncode if self._proc is not None else None
                raise RuntimeError(f"schema registry ({jar.name}) exited during start ({code})\n{self.tail_logs()}")
            try:
                with probe.open(f"{self.url}/subjects", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError) as e:  # refused until Quarkus listens
                last = e
            time.sleep(0.1)
        raise TimeoutError(f"schema registry not ready after {timeout_s}s ({last})\n{self.tail_logs()}")
