"""The driver JVM's class-data-sharing archive: the classes a run loads, mapped at start, not loaded one by one.

`app.run.spark_session` adds `java_options()` to the driver JVM's options (spark-submit.sh's
launch arguments, and a session started from plain Python such as the tests'). They name the
archive in the folder `SHARELAKE_CLASS_ARCHIVES` (spark-submit.sh sets it to the checkout's
`.cache/cds`) when one was built for this JVM: one archive per Java and pyspark install, since
the JVM maps an archive only on the class path it was written on. Without an archive, or with an
archive the JVM cannot map, the driver starts as it would without one (the JVM's own messages
about it are turned off).

`python -m app.run.class_archive` builds it (`make setup` runs it, so `make test` too; nothing to do
when it exists): a training run in a child process whose driver JVM writes the classes it loaded
at exit (`-XX:ArchiveClassesAtExit`), after running the write path once as a job's warm-up does
(`app.sink.warm_up`, on temporary tables: Spark SQL, the Arrow frames, Delta's commit, the JSON
parse), and the bad records' path too (the diagnosis, the dead-letter append), which a job's
warm-up leaves out. The archive is written to a temporary name and renamed once complete, so a
JVM starting meanwhile maps all of it or none.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ARCHIVES_ENV = "SHARELAKE_CLASS_ARCHIVES"  # the folder of the archives
_DUMP_ENV = "SHARELAKE_CLASS_ARCHIVE_DUMP"  # set for the training run only: where its JVM writes at exit
MODULE = "app.run.class_archive"
QUIET = "-Xlog:cds=off,cds+dynamic=off"  # an archive the JVM cannot map is not worth a warning


def archive_path(folder: Path) -> Path:
    """This JVM's archive in `folder`: named by the Java and the pyspark install (their class path)."""
    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = (shutil.which("java", path=os.path.join(home, "bin")) if home else None) or shutil.which("java") or "java"
    jars = Path(pyspark.__file__).parent / "jars"
    key = f"{os.path.realpath(java)}|{jars.resolve()}|{version('pyspark')}"
    return folder / f"driver-{hashlib.sha256(key.encode()).hexdigest()[:12]}.jsa"


def java_options() -> str:
    """The driver JVM's options for the archive: write it (the training run), map it, or none."""
    dump = os.environ.get(_DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
    folder = os.environ.get(ARCHIVES_ENV)
    if not folder:
        return ""
    archive = archive_path(Path(folder))
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else ""


def build(folder: Path) -> Path | None:
    """This JVM's archive in `folder`, built by a training run unless it exists; None if the run failed."""
    archive = archive_path(folder)
    if archive.is_file():
        return archive
    folder.mkdir(parents=True, exist_ok=True)
    dump = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    env = {**os.environ, _DUMP_ENV: str(dump)}
    env.pop(ARCHIVES_ENV, None)
    done = subprocess.run([sys.executable, "-m", MODULE, "--train"], env=env, check=False)
    if done.returncode != 0 or not dump.is_file():
        dump.unlink(missing_ok=True)
        return None
    dump.replace(archive)
    return archive


def train() -> None:
    """The training run's work (its JVM writes the archive when this process ends)."""
    import tempfile

    from app.run.spark_session import build_spark
    from app.sink.formats.json import JsonFormat, JsonSettings
    from app.sink.formats.raw import RawFormat, RawSettings
    from app.sink.table_location import TableLocation
    from app.sink.warm_up import warm_up

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
