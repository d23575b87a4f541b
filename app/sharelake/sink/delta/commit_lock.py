"""A lock every Sharelake commit to a table on a local or mounted disk holds, across drivers.

A Delta commit is safe only if one writer alone can create `_delta_log/N.json`. For `file:` paths
Delta's log store (HDFSLogStore over Hadoop's local file system) checks that N.json is absent and
then renames its temporary file onto it: the rename replaces a file that appeared meanwhile, so
Delta serialises the two steps with a lock inside its JVM only. Two drivers (two JVMs) committing
to one table on the same disk can both rename onto N.json: the later replaces the earlier, whose
records its driver already ACCEPTed, and the checksum file beside it may be the other's (seen in
`bench.scale_out`: 1,450 ACCEPTed records gone, and the table's version unreadable through Hadoop's
checksummed file system).

So on such a table (`on_local_disk`: a path without a scheme, or `file:`) each commit holds an
exclusive flock(2) on a lock file beside the table, `<parent>/.<table>.sharelake-commit.lock`, from
before Delta checks for N.json until its commit returns. Beside, not inside: a file in the table's
folder before its first commit makes Delta's `createIfNotExists` of a partitioned or clustered
table skip the create, taking the folder for a table. The drivers on one machine (or on one NFS
mount, where Linux maps flock to NFS locks) then commit one at a time, and Delta's own conflict
check sees each other's commits. The kernel releases the lock of a process that dies. The start
creates the lock file (`create_lock_file`, as every commit does, never deleted: a job may hold it), so a
table whose folder is writable but whose parent is not stops the start, not its first commit. HDFS, ADLS
and GCS refuse the second create by themselves: no lock there; S3 has the writer lease
(`sharelake.sink.delta.writer_lease`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from urllib.parse import urlparse

from sharelake.table.location import TableLocation

LOCK_SUFFIX = ".sharelake-commit.lock"

CommitLock = Callable[[], AbstractContextManager[None]]


def on_local_disk(location: TableLocation) -> bool:
    """The table's path is on a disk this machine mounts: no scheme, or `file:`."""
    return urlparse(location.path).scheme in ("", "file")


def local_path(location: TableLocation) -> str:
    parsed = urlparse(location.path)
    return parsed.path if parsed.scheme == "file" else location.path


def lock_path(location: TableLocation) -> str:
    """The lock file of a table on a local disk: hidden, in the folder that holds the table's."""
    folder, name = os.path.split(os.path.abspath(local_path(location)))
    return os.path.join(folder, f".{name}{LOCK_SUFFIX}")


def create_lock_file(location: TableLocation) -> str:
    """The table's lock file, created when absent (its folder too); OSError when it cannot be opened."""
    path = lock_path(location)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a"):
        return path


@contextlib.contextmanager
def _no_lock() -> Iterator[None]:
    yield


def commit_lock(location: TableLocation) -> CommitLock:
    """What a commit to `location` holds: the table's lock file on a local disk, else nothing."""
    if not on_local_disk(location):
        return _no_lock
    path = lock_path(location)

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            f = open(path, "a")
        except OSError as e:
            raise OSError(
                e.errno, f"cannot open the table's commit lock {path} ({e.strerror}): make its folder writable"
            ) from e
        with f:  # its own open file: threads of one driver exclude each other too
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    return held
