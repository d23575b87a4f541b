"""The ingest job as a process: its command line (`ingest_command`), its default dead-letter table, and
stopping the process group it runs in. The bench's contenders and the soak start it this way.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from devkit.paths import PROJECT_ROOT
from devkit.workload import SCHEMA_DDL

DEAD_LETTER_SUFFIX = "_dead_letter"  # the default dead-letter table: the main table's path + this
JSON_PAYLOAD = ("payload.format=json", f"payload.schema={SCHEMA_DDL}")  # the workload's values
IDLE_TIMEOUT_MS = 3000  # run.idle_timeout_ms of an until-drained run, unless a run says otherwise


def ingest_command(
    bootstrap: str,
    topic: str,
    group: str,
    table: Path,
    mode: str,
    *,
    idle_timeout_ms: int = IDLE_TIMEOUT_MS,
    members: int = 0,
    sets: tuple[str, ...] = (),
    payload: tuple[str, ...] = JSON_PAYLOAD,
    destination: tuple[str, ...] | None = None,
    root: Path = PROJECT_ROOT,
) -> list[str]:
    """`spark-submit.sh jobs/ingest.py` with `--set`s for the topic, group, table and mode (members: 0 keeps the
    default), then `payload`, then `sets`; `destination` replaces `kafka.topic` + `delta.table_path`."""
    every = (
        f"kafka.bootstrap_servers={bootstrap}",
        *(destination if destination is not None else (f"kafka.topic={topic}", f"delta.table_path={table}")),
        f"kafka.group_id={group}",
        f"run.mode={mode}",
        f"run.idle_timeout_ms={idle_timeout_ms}",
        *([f"pump.members={members}"] if members > 0 else []),
        *payload,
        *sets,
    )
    cmd = [str(root / "spark-submit.sh"), "jobs/ingest.py", "--config", "conf/local.toml"]
    for s in every:
        cmd += ["--set", s]
    return cmd


def dead_letter_of(table: Path) -> Path:
    """The job's default dead-letter table, beside its `table`."""
    return table.with_name(table.name + DEAD_LETTER_SUFFIX)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM the process group we started, then SIGKILL it if it is still there after `grace_s`."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
