"""A commit read back before its proof is minted: the commit file at the version Delta reported holds this write.

A store that lets a second writer replace a commit file (S3 with Delta's default log store; a local
disk outside Sharelake's commit lock) loses the first writer's commit silently: Delta reported our
version written, and the later writer's `N.json` took its place. The S3 writer lease and the local
commit lock keep a second Sharelake writer away; this is the second line of defence behind them.
`CommitReader.check` reads `_delta_log/N.json` through the table's Hadoop FileSystem (one small read
per commit) and finds its commitInfo's `userMetadata` to be the write's own (it carries the write's
`write_id`, a fresh uuid per write), or raises `CommitReplacedError`: the batch is RELEASEd, nothing
of it ACCEPTed, and the job stops (never retried: the store will not gain mutual exclusion). A
replacement after the read goes unseen: the read narrows the window, the lease and the lock close it.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession

from sharelake.table.location import TableLocation


class CommitReplacedError(RuntimeError):
    """The commit file at the version of our commit holds another writer's commit: the store let a
    second writer replace it (no mutual exclusion). Nothing of the batch may be ACCEPTed; the job stops."""


class CommitReader:
    """Reads one table's commit files back (`check`), through the Hadoop FileSystem of its log."""

    def __init__(self, session: SparkSession, location: TableLocation) -> None:
        self.location = location
        self._session = session
        jvm = session.sparkContext._jvm
        assert jvm is not None
        self._jvm = jvm
        self._fs: Any = None  # on first use: made with the session's Hadoop settings (S3A's)

    def check(self, version: int, user_metadata: str) -> None:
        """Raise `CommitReplacedError` unless the commit file of `version` holds `user_metadata` (ours alone)."""
        path = self._jvm.org.apache.hadoop.fs.Path(self.location.delta_log, f"{version:020d}.json")
        stream = self._log_fs().open(path)
        try:
            text = str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()
        infos = (json.loads(line)["commitInfo"] for line in text.splitlines() if line.startswith('{"commitInfo"'))
        info: dict[str, Any] = next(infos, {})
        if info.get("userMetadata") == user_metadata:
            return
        raise CommitReplacedError(
            f"{self.location.path}: version {version} holds another writer's commit ({info.get('operation', '?')}), "
            "not ours: the store gives Delta's commits no mutual exclusion; nothing of the batch is ACCEPTed, the "
            "job stops. Run one writer per table (on S3, Delta's S3DynamoDBLogStore for several)"
        )

    def _log_fs(self) -> Any:
        if self._fs is None:
            path = self._jvm.org.apache.hadoop.fs.Path(self.location.delta_log)
            self._fs = path.getFileSystem(self._session.sparkContext._jsc.hadoopConfiguration())
        return self._fs
