"""Builds the driver JVM's class archive (`sharelake.run.class_archive`): a training run whose JVM writes it at exit.

`python -m sharelake.run.class_archive_build` with `SHARELAKE_CLASS_ARCHIVES=FOLDER`; nothing to do when
this JVM's archive exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sharelake.formats.json import JsonFormat, JsonSettings
from sharelake.formats.raw import RawFormat, RawSettings
from sharelake.run.class_archive import ARCHIVES_ENV, DUMP_ENV, archive_path
from sharelake.run.spark_session import build_spark
from sharelake.sink.batch.warm_up import warm_up
from sharelake.table.location import TableLocation

MODULE = "sharelake.run.class_archive_build"


def build(folder: Path) -> Path | None:
    """This JVM's archive in `folder`, built by a training run unless it exists; None if the run failed."""
    archive = archive_path(folder)
    if archive.is_file():
        return archive
    folder.mkdir(parents=True, exist_ok=True)
    dump = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    env = {**os.environ, DUMP_ENV: str(dump)}
    env.pop(ARCHIVES_ENV, None)
    done = subprocess.run([sys.executable, "-m", MODULE, "--train"], env=env, check=False)
    if done.returncode != 0 or not dump.is_file():
        dump.unlink(missing_ok=True)
        return None
    dump.replace(archive)
    return archive


def train() -> None:
    """The training run's work (its JVM writes the archive when this process ends)."""
    spark = build_spark("sharelake-class-archive", "local[2]")
    json = JsonFormat(JsonSettings(format="json", schema="id long, user string, amount double, kind string"))
    with tempfile.TemporaryDirectory(prefix="sharelake-class-archive-") as work:
        json.start(spark, TableLocation.at(Path(work) / "t"))
        if not warm_up(spark, [json, RawFormat(RawSettings())], 5, "sharelake-class-archive", bad=True):
            sys.exit(1)
    jvm = spark.sparkContext._gateway.proc  # the driver JVM pyspark launched
    spark.stop()
    jvm.stdin.close()  # the JVM exits when its stdin closes, writing the archive first: wait for it
    jvm.wait(timeout=300)


def main() -> None:
    if sys.argv[1:] == ["--train"]:
        train()
        return
    folder = os.environ.get(ARCHIVES_ENV)
    if sys.argv[1:] or not folder:
        sys.exit(f"usage: {ARCHIVES_ENV}=FOLDER python -m {MODULE}")
    archive = build(Path(folder))
    if archive is None:  # the driver starts without one, only slower: not a reason to stop a setup
        print(f"sharelake: the driver's class archive could not be built in {folder}; jobs start without it")
    else:
        print(f"driver class archive: {archive}")


if __name__ == "__main__":
    main()
