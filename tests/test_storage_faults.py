"""Storage faults under a running job: the table's filesystem turns read-only, or fills up.

The table lives on a small tmpfs mounted for the test (mounting needs root, as CI runs; without
it the test skips and says why). Mid-run the filesystem is remounted read-only, or filled to the
last byte. The job must stop with one clear line naming the cause and exit 1, having ACCEPTed
nothing that is not in the table; once the fault is fixed, a restart lands every record exactly
once.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devkit.delta_log import data_commits, read_commits
from devkit.sample_data import produce_json_events
from sharelake.testing.kafka_broker import EmbeddedKafka
from tests.job_runner import JobSpec, drain_in_process, kill_job, start_job
from tests.kafka_helpers import nothing_left
from tests.table_checks import assert_exactly_once
from tests.waiting import wait_for

CAUSES = {"read-only": "Read-only file system", "disk-full": "No space left on device"}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the table (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def remount(mnt: Path, options: str, timeout_s: float = 30.0) -> None:
    """Remount `mnt`; a read-only remount is refused while a file is open for writing (the job
    mid-write), so it is tried again until the write is over."""
    refused = [""]

    def remounted() -> bool:
        done = subprocess.run(["mount", "-o", f"remount,{options}", str(mnt)], capture_output=True, text=True)
        refused[0] = done.stderr.strip()
        return done.returncode == 0

    wait_for(
        remounted,
        timeout_s,
        lambda: f"remount,{options} of {mnt} refused for {timeout_s} s: {refused[0]}",
        interval_s=0.05,
    )


def fill(mnt: Path) -> Path:
    """Write zeros to a file on `mnt` until the filesystem has no byte left."""
    filler = mnt / "filler"
    chunk = b"\0" * (1 << 20)
    with filler.open("wb") as f:
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass
    try:
        with filler.open("ab") as f:  # the last partial megabyte
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass
    return filler


# CI time: the disk-full run proves the path in CI; the read-only one runs under `make chaos`
@pytest.mark.parametrize("fault", [pytest.param("read-only", marks=pytest.mark.long), "disk-full"])
def test_a_storage_fault_stops_the_job_clearly_and_a_restart_lands_everything_once(
    fault: str, disk: Path, broker: EmbeddedKafka, spark: SparkSession, tmp_path: Path, unique: str
) -> None:
    spec = JobSpec(broker, f"disk-{fault}-{unique}", f"g-{unique}", disk / "table", lock_ms=10_000)
    broker.create_topic(spec.topic, partitions=2)
    produced = produce_json_events(broker.bootstrap, spec.topic, 5000)
    log = tmp_path / "run1.log"
    job = start_job(spec, "run.mode=continuous", "batch.write_attempts=2", log=log)
    try:
        wait_for(
            lambda: data_commits(read_commits(spec.table)), 120, interval_s=0.2, give_up=lambda: job.poll() is not None,
            failure=lambda: f"the job made no data commit in 120 s (exit {job.poll()}):\n"
            + log.read_text(errors="replace")[-3000:],
        )  # fmt: skip
        if fault == "read-only":
            remount(disk, "ro")
        else:
            filler = fill(disk)
        produced += produce_json_events(broker.bootstrap, spec.topic, 5000, start=5000)  # the job must write again
        rc = job.wait(240)
    finally:
        if job.poll() is None:
            kill_job(job)
    text = log.read_text(errors="replace")
    assert rc == 1, text[-3000:]
    failed = [line for line in text.splitlines() if "run failed:" in line]
    assert len(failed) == 1 and CAUSES[fault] in failed[0] and len(failed[0]) < 400, failed or text[-3000:]

    if fault == "read-only":  # the operator fixes the storage ...
        remount(disk, "rw")
    else:
        os.remove(filler)
    assert drain_in_process(spark, spec, tmp_path / "run2.log") == 0, (tmp_path / "run2.log").read_text()[-3000:]
    assert_exactly_once(spark, spec.table, produced)  # ... nothing was ACCEPTed that the table lacked
    assert nothing_left(broker, spec.topic, spec.group)
