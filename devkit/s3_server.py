"""An embedded S3 API server: S3Proxy with its in-memory (`transient`) blob store, on a loopback port.

It stands in for a real S3 as the embedded broker does for a real Kafka: Delta tables on `s3a://`
paths go through Hadoop's S3A connector to a real S3 API (v4
signatures, path-style buckets). The jar comes from Maven Central (`make s3`, into
.cache/jars/s3-server/); no Docker, no download at run time.

The blob store is the in-memory one because it keeps S3's semantics where S3A depends on them: its
filesystem backends turn S3A's directory markers (`offsets/`) into folders, so an empty "directory"
lists as missing, or as a file, and Spark's streaming checkpoint cannot start on them. Buckets are
made with the S3 API itself (`bucket()`); the data lives as long as the server.

`spark_conf()` is what a Spark session needs to reach it (endpoint, path style, region); the
credentials go in the job's environment (`credentials_env()`), as S3A's default credential chain
reads them there, never on a command line.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from devkit.network import Host
from devkit.paths import S3_SERVER_JARS
from sharelake.testing.kafka_broker import free_port

T = TypeVar("T")
ACCESS_KEY = "sharelake-test"
SECRET_KEY = "sharelake-test-secret"  # a throwaway credential of a loopback test server
REGION = "us-east-1"
QUIET_LOGBACK = "-Dlogback.statusListenerClass=ch.qos.logback.core.status.NopStatusListener"


def server_jar(folder: Path = S3_SERVER_JARS) -> Path:
    jars = sorted(folder.glob("s3proxy-*.jar"))
    if not jars:
        raise FileNotFoundError(f"no S3Proxy jar in {folder}: run `make s3` (Maven fetches it once)")
    return jars[-1]


HOST_PORT = 9000  # on a host of its own the server has the host's ports to itself


class EmbeddedS3:
    """One S3Proxy JVM on 127.0.0.1 owning `data_dir`; `bucket(name)` creates a bucket.

    With a `host` (`devkit.network`) it runs inside that host, on its address; its own requests
    (the start-up probe, `bucket`) are made from inside the host too."""

    def __init__(self, data_dir: Path, port: int | None = None, host: Host | None = None) -> None:
        self.data_dir = data_dir
        self.port = HOST_PORT if host is not None and port is None else port
        self.host = host
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        if self.port is None:
            raise RuntimeError("the S3 server has no port yet: call start() first")
        return f"http://{self.host.address if self.host else '127.0.0.1'}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "s3proxy.log"

    def start(self, timeout_s: float = 60.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = free_port()
        props = self.data_dir / "s3proxy.properties"
        props.write_text(
            "\n".join(
                [
                    f"s3proxy.endpoint={self.endpoint}",
                    "s3proxy.authorization=aws-v2-or-v4",
                    f"s3proxy.identity={ACCESS_KEY}",
                    f"s3proxy.credential={SECRET_KEY}",
                    "jclouds.provider=transient",
                ]
            )
            + "\n"
        )
        props.chmod(0o600)
        command = [
            "java",
            "-Xmx768m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            QUIET_LOGBACK,
            "-jar",
            str(server_jar()),
        ]
        command += ["--properties", str(props)]
        with self.log_file.open("ab") as out:
            self._proc = subprocess.Popen(
                self.host.command(command) if self.host else command, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"S3Proxy exited at start (code {self._proc.returncode}):\n{self.tail_logs(20)}")
            if self._here(self._answers):
                return
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"S3Proxy did not answer on {self.endpoint} within {timeout_s:.0f}s:\n{self.tail_logs(20)}")

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(self.endpoint, timeout=1).close()
            return True
        except urllib.error.HTTPError:
            return True  # it answers (403 for an anonymous request): up
        except OSError:
            return False

    def _here(self, fn: Callable[[], T]) -> T:
        """`fn()` where the server is reachable: inside its host, when it has one."""
        return self.host.call(fn) if self.host else fn()

    def bucket(self, name: str) -> str:
        """Create bucket `name` (S3's CreateBucket: S3A never creates buckets); its s3a:// URL.

        Signed with AWS signature version 2, which the server accepts beside v4 (what S3A signs
        with): a dozen lines instead of an S3 client for one call."""
        date = email.utils.formatdate(usegmt=True)
        digest = hmac.new(SECRET_KEY.encode(), f"PUT\n\n\n{date}\n/{name}".encode(), hashlib.sha1).digest()
        headers = {"Date": date, "Authorization": f"AWS {ACCESS_KEY}:{base64.b64encode(digest).decode()}"}
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT", headers=headers)

        def create() -> int:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)

        status = self._here(create)
        if status != 200:
            raise RuntimeError(f"S3Proxy refused CreateBucket {name}: HTTP {status}")
        return f"s3a://{name}"

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings that point S3A at this server (no credentials: see `credentials_env`)."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        }

    @staticmethod
    def credentials_env() -> dict[str, str]:
        """The environment S3A's default credential chain reads (EnvironmentVariableCredentialsProvider)."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}

    def tail_logs(self, lines: int = 40) -> str:
        if not self.log_file.exists():
            return "(no S3Proxy log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        self._proc = None

    def __enter__(self) -> EmbeddedS3:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
