"""A commit to a table on a local disk waits for the table's lock file, which other drivers hold.

Delta serialises the commits to a `file:` table inside one JVM only (its local rename replaces a
commit file that appeared meanwhile), so Sharelake's drivers take turns on
a lock file beside the table (`sharelake.sink.delta.commit_lock`). Here another process, standing in for
another driver, holds the lock: this driver's append writes its files but commits only once the
other lets go. Found by the scale-out bench (`python -m bench scale-out`), where two drivers lost
an ACCEPTed commit without it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from sharelake.sink.delta.checkpointer import Checkpointer
from sharelake.sink.delta.commit_lock import commit_lock, lock_path, on_local_disk
from sharelake.sink.delta.writer import DeltaWriter, writer_session
from sharelake.table.location import TableLocation
from tests.waiting import wait_for

HOLD = """
import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()  # until the test lets go
"""


@pytest.mark.parametrize(
    ("path", "local"),
    [("/data/events", True), ("file:/data/events", True), ("hdfs://nn:8020/events", False),
     ("s3a://lake/events", False), ("abfss://c@a.dfs.core.windows.net/e", False), ("gs://b/e", False)],
)  # fmt: skip
def test_only_tables_on_a_local_disk_take_the_lock(path: str, local: bool) -> None:
    assert on_local_disk(TableLocation.at(path)) is local


def version(spark: SparkSession, table: Path) -> int:
    return int(DeltaTable.forPath(spark, str(table)).history(1).collect()[0]["version"])


def test_an_append_commits_only_after_another_driver_lets_go_of_the_tables_lock(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    session, location = writer_session(spark, 100), TableLocation.at(table)
    checkpointer = Checkpointer(session, location, "t", checkpoint_every=100)
    writer = DeltaWriter(session, location, "t", checkpointer, commit_lock(location))
    try:
        rows = spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string")
        writer.append(rows, "{}", batch_id=0)  # creates the table (a commit holding the lock too)
        lock = lock_path(TableLocation.at(table))
        assert version(spark, table) == 0 and Path(lock).exists() and not (table / Path(lock).name).exists()

        other = subprocess.Popen([sys.executable, "-c", HOLD, lock], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert other.stdout is not None and other.stdout.readline().strip() == b"held"
            appending = threading.Thread(target=writer.append, args=(rows, "{}", 1))
            appending.start()
            time.sleep(3)  # the append's files are written in well under this; its commit waits
            assert appending.is_alive() and version(spark, table) == 0, "committed while another held the lock"
        finally:
            other.communicate(b"go\n", timeout=30)
        wait_for(lambda: not appending.is_alive(), 60, lambda: "the append never committed")
        appending.join()
        assert version(spark, table) == 1
        assert spark.read.format("delta").load(str(table)).count() == 4
    finally:
        writer.close()
        checkpointer.close()
