"""The driver JVM's class-data-sharing archive: the classes a run loads, mapped at start, not loaded one by one.

`sharelake.run.spark_session` adds `java_options()` to the driver JVM's options (spark-submit.sh's
launch arguments, and a session started from plain Python such as the tests'). They name the
archive in the folder `SHARELAKE_CLASS_ARCHIVES` (spark-submit.sh sets it to the checkout's
`.cache/cds`) when one was built for this JVM: one archive per Java and pyspark install, since
the JVM maps an archive only on the class path it was written on. Without an archive, or with an
archive the JVM cannot map, the driver starts as it would without one (the JVM's own messages
about it are turned off).

`python -m sharelake.run.class_archive_build` builds it (`make setup` runs it, so `make test` too; nothing
to do when it exists): a training run in a child process whose driver JVM writes the classes it loaded
at exit (`-XX:ArchiveClassesAtExit`), after running the write path once as a job's warm-up does
(`sharelake.sink.batch.warm_up`, on temporary tables: Spark SQL, the Arrow frames, Delta's commit, the JSON
parse), and the bad records' path too (the diagnosis, the dead-letter append), which a job's
warm-up leaves out. The archive is written to a temporary name and renamed once complete, so a
JVM starting meanwhile maps all of it or none.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from importlib.metadata import version
from pathlib import Path

ARCHIVES_ENV = "SHARELAKE_CLASS_ARCHIVES"  # the folder of the archives
DUMP_ENV = "SHARELAKE_CLASS_ARCHIVE_DUMP"  # set for the training run only: where its JVM writes at exit
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
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
    folder = os.environ.get(ARCHIVES_ENV)
    if not folder:
        return ""
    archive = archive_path(Path(folder))
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else ""
