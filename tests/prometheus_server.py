"""A real Prometheus server for the monitoring tests: Debian's package, unpacked by `make prometheus`.

Used by tests/test_monitoring.py: started once per test module in its own temp dir, scraping the
given targets every second under the scrape job "sharelake" (the name docs/monitoring/alerts.yml
selects), evaluating the given rule files, and queried through its HTTP API.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import requests

from devkit.paths import CACHE_DIR
from sharelake.testing.kafka_broker import free_port
from tests.waiting import wait_for

PROMETHEUS_BIN = CACHE_DIR / "prometheus" / "usr" / "bin"
PROMTOOL = PROMETHEUS_BIN / "promtool"


class PrometheusServer:
    def __init__(
        self, data_dir: Path, targets: list[str], rule_files: tuple[Path, ...] = (), scrape_interval: str = "1s"
    ):
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = data_dir / "prometheus.yml"
        listed = ", ".join(f'"{t}"' for t in targets)
        rules = "".join(f'  - "{r}"\n' for r in rule_files)
        self.config.write_text(
            f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n"
            + (f"rule_files:\n{rules}" if rules else "")
            + f"scrape_configs:\n  - job_name: sharelake\n    static_configs:\n      - targets: [{listed}]\n"
        )
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60) -> None:
        binary = PROMETHEUS_BIN / "prometheus"
        if not binary.exists():
            raise FileNotFoundError(f"no {binary}: run `make prometheus` (Debian's package, unpacked)")
        log = (self.data_dir / "prometheus.log").open("wb")
        self._proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.data_dir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        proc = self._proc
        wait_for(
            self._ready,
            timeout_s,
            lambda: f"Prometheus did not start (exit code {proc.poll()}):\n{self.tail_logs(30)}",
            interval_s=0.2,
            give_up=lambda: proc.poll() is not None,
        )

    def _ready(self) -> bool:
        try:
            return requests.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)

    def tail_logs(self, lines: int) -> str:
        log = self.data_dir / "prometheus.log"
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else ""

    def api(self, path: str, **params: Any) -> dict[str, Any]:
        """GET /api/v1/<path>: the whole answer (status, data or errorType and error)."""
        answer: dict[str, Any] = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        return answer

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's series; AssertionError with Prometheus's message when it does not run."""
        answer = self.api("query", query=expr)
        assert answer["status"] == "success", f"{expr}: {answer.get('errorType')}: {answer.get('error')}"
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def series(self, selector: str) -> list[dict[str, Any]]:
        """The series a selector matches (any time in the last hour)."""
        answer = self.api("series", **{"match[]": selector, "start": str(time.time() - 3600)})
        assert answer["status"] == "success", f"{selector}: {answer.get('error')}"
        result: list[dict[str, Any]] = answer["data"]
        return result
