"""One Sharelake writer per table on a store that gives Delta no mutual exclusion (S3).

The leases are held (`hold_writer_leases`) before the tables are opened and the members join the
group; each table's `DeltaWriter` is given its lease's `WriterLease.check` when it is built
(`lease_checks` -> `sharelake.sink.write.destinations.open_destinations`) and calls it before every commit.

A Delta commit is safe only if one writer alone can create `_delta_log/N.json`. HDFS, ADLS and GCS
refuse the second create; S3 with Delta's default log store does not (it serialises commits within
one driver only), so two jobs appending to one S3 table can overwrite each other's commit file and
lose records they already ACCEPTed. On such a store (`needs_lease`: s3a://, s3:// or s3n://, unless
`spark.delta.logStore.<scheme>.impl` is Delta's DynamoDB-backed multi-writer store) a job holds a
lease on each table it writes, a small JSON file beside the table's folder,
`<parent>/.<table>.sharelake-writer-lease.json` (`LEASE_SUFFIX`). Beside, not inside: the lease is
written before the table's first commit, and any file in a table's folder then makes Delta's
`createIfNotExists` of a partitioned or clustered table skip the create (the local commit lock,
`sharelake.sink.delta.commit_lock`, sits beside the table for the same reason). Older Sharelake versions
kept it at `<table>/_sharelake/writer-lease.json` (`OLD_LEASE_FILE`): a job still finding one there
waits it out as any other holder's (renewed: another live job, refused at start; unrenewed for its
TTL: a dead one's, deleted) before it takes its own.

- **Taking it.** Absent: write ours, wait `SETTLE_S`, read it back (of two jobs starting together
  the later write wins, and the other sees it). Held by someone else: watch it for the holder's
  TTL. If it is renewed meanwhile, another job is alive: refuse to start (`TableInUseError`, exit 2,
  one line naming the holder and the fix). If it is not, its holder died (a kill -9 of this same
  job, typically): take it over. A job that stops gracefully deletes its lease, so its successor
  starts at once; after a crash the successor waits one TTL.
- **Keeping it.** A thread renews it TTL/3 after the start of the last renewal (the first right
  after taking it, whose read-back took `SETTLE_S`), after reading it: if someone else's lease is
  there, ours is lost. A renewal due more than 2/3 of the TTL after the last one is not made
  (someone may be about to take over): the lease is lost. `check()` refuses a commit when the
  lease was lost or when our last renewal is older than 2/3 of the TTL: a job another one may
  already have taken over from (it watched a full TTL without a renewal) never commits. The Delta
  writer checks before it writes an append's files and again just before it commits them. The
  refused commit's records are RELEASEd, as for any failed write, and the job fails.

The file is a guard, not a lock: S3 (as used here) has no compare-and-set, so it rests on renewals
arriving within the TTL and on a write landing within `SETTLE_S`. docs/storage.md says
what is safe where; a multi-writer log store replaces it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random

from sharelake.failures import faults
from sharelake.failures.errors import ConfigError, TableInUseError, one_line
from sharelake.table.location import TableLocation

if TYPE_CHECKING:
    from sharelake.config.routes import Routes
    from sharelake.config.settings import SharelakeConfig

log = logging.getLogger(__name__)
LeaseCheck = Callable[[], None]  # raises when this job may not commit to the table now

LEASE_SUFFIX = ".sharelake-writer-lease.json"  # `<parent>/.<table>` + this: beside the table's folder
OLD_LEASE_FILE = "_sharelake/writer-lease.json"  # where older versions kept it, inside the table's folder
SETTLE_S = 2.0  # a lease written is read back this long after: the later of two racing writes is then there
WATCH_POLL_S = 1.0  # how often a job waiting on someone else's lease reads it
READ_AGAIN_S = 2.0  # a read the holder's rewrite refused is made again for this long, after a short random pause
READ_AGAIN_PAUSE_S = 0.05  # the longest such pause: reads in step with a rewriter's schedule then drift off it
UNSAFE_SCHEMES = ("s3a", "s3", "s3n")


def _changed_while_read(error: BaseException) -> bool:
    """S3A's change detection refused a read: the object was replaced after the read began."""
    return "Status Code: 412" in str(error)


class LeaseLostError(RuntimeError):
    """Another job took the table's writer lease, or ours went unrenewed too long: no more commits."""


def needs_lease(spark: SparkSession, location: TableLocation) -> bool:
    """Whether `location`'s store lacks mutual exclusion for Delta commits (S3 with Delta's default
    log store)."""
    path = location.path
    scheme = path.split("://", 1)[0].lower() if "://" in path else ""
    if scheme not in UNSAFE_SCHEMES:
        return False
    store = spark.conf.get(f"spark.delta.logStore.{scheme}.impl", None) or spark.conf.get(
        "spark.delta.logStore.class", None
    )
    return not (store and "DynamoDB" in store)


class WriterLease:
    """This job's lease on one table; `acquire()` at start, `release()` at the end."""

    def __init__(self, spark: SparkSession, location: TableLocation, key: str, ttl_s: float, group: str) -> None:
        self.location = location
        self.key = key  # the config key naming the table, for the refusal line
        self.ttl_s = ttl_s
        self.holder = uuid.uuid4().hex
        self._about = {"host": socket.gethostname(), "pid": os.getpid(), "group": group}
        self._renewals = 0
        self._renewed_at: float | None = None  # time.monotonic() when our last renewal began
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        jvm = spark.sparkContext._jvm
        assert jvm is not None and spark.sparkContext._jsc is not None
        self._jvm = jvm
        try:
            beside = location.beside(LEASE_SUFFIX)
        except ValueError:
            raise ConfigError(
                f"{key} = {location.path!r}: a table at the root of a bucket has no folder beside it for its "
                f"S3 writer lease; put the table in a folder ({location.path}/events)"
            ) from None
        self._path = jvm.org.apache.hadoop.fs.Path(beside)
        self._old_path = jvm.org.apache.hadoop.fs.Path(location.file(OLD_LEASE_FILE))
        self._fs = self._path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    # -- the file ---------------------------------------------------------------------------------------

    def _read(self, path: Any = None) -> dict[str, Any] | None:
        """The lease as it stands (at `path`: the one an older version kept). Its holder may rewrite it
        while we read it (a renewal): S3A then refuses the rest of the read (HTTP 412, the object's
        ETag changed), and it is read again: for a while, not a number of times, since a busy machine
        slows each read and so widens its overlap with the next rewrite."""
        reading = Retrying(
            retry=retry_if_exception(_changed_while_read),
            wait=wait_random(0, READ_AGAIN_PAUSE_S),
            stop=stop_after_delay(READ_AGAIN_S),
            reraise=True,
        )
        return reading(self._read_once, path)

    def _read_once(self, path: Any = None) -> dict[str, Any] | None:
        path = self._path if path is None else path
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            text = str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()
        try:
            data = json.loads(text)
        except ValueError:
            return {"holder": "?", "renewals": text}  # torn or foreign: someone else's, as it stands
        return data if isinstance(data, dict) else {"holder": "?", "renewals": text}

    def _write(self) -> None:
        self._renewals += 1
        body = {"holder": self.holder, "renewals": self._renewals, "ttl_s": self.ttl_s, **self._about}
        began = time.monotonic()
        stream = self._fs.create(self._path, True)
        try:
            stream.write(bytearray(json.dumps(body).encode()))
        finally:
            stream.close()
        self._renewed_at = began

    # -- start -------------------------------------------------------------------------------------------

    def acquire(self) -> None:
        """Hold the lease, after waiting out a dead holder's; TableInUseError if a live job holds it."""
        old = self._read(self._old_path)
        if old is not None:  # an older Sharelake's lease, inside the table's folder
            self._wait_out(old, self._old_path)
            self._drop_old()
        while True:
            current = self._read()
            if current is not None and current.get("holder") != self.holder:
                self._wait_out(current)
            self._write()
            time.sleep(SETTLE_S)
            now = self._read()
            if now is not None and now.get("holder") == self.holder:
                break
            log.info("%s: another job wrote the writer lease at the same moment; looking again", self.location)
        self._thread = threading.Thread(target=self._renew_loop, name=f"writer-lease-{self.key}", daemon=True)
        self._thread.start()
        log.info(
            "%s: writer lease held (renewed every %.0fs)",
            self.location,
            self.ttl_s / 3,
        )

    def _drop_old(self) -> None:
        """Delete an older version's lease once its holder is gone, and its folder if that is empty
        now: a table not created yet must hold nothing of ours (see the module doc)."""
        self._fs.delete(self._old_path, False)
        folder = self._old_path.getParent()
        try:
            if self._fs.exists(folder) and not self._fs.listStatus(folder):
                self._fs.delete(folder, False)
        except Exception as e:  # noqa: BLE001 - an existing table is not troubled by an empty folder
            log.warning("%s: removing %s failed: %s", self.location, folder.toString(), one_line(e, 200))
        log.info("%s: an older Sharelake's writer lease inside the table's folder was removed", self.location)

    def _wait_out(self, seen: dict[str, Any], path: Any = None) -> None:
        ttl = float(seen.get("ttl_s") or self.ttl_s)
        log.info(
            "%s: the writer lease is held by %s (pid %s, group %s); waiting up to %.0fs for it to be renewed "
            "(a live job: this one stops) or not (a dead one: this one takes over)",
            self.location,
            seen.get("host", "?"),
            seen.get("pid", "?"),
            seen.get("group", "?"),
            ttl,
        )
        deadline = time.monotonic() + ttl
        while time.monotonic() < deadline:
            time.sleep(WATCH_POLL_S)
            now = self._read(path)
            if now is None:
                return  # released: its holder stopped gracefully
            if now != seen:
                raise TableInUseError(
                    f"{self.key} = {self.location.path!r} is written by another Sharelake job "
                    f"({now.get('host', '?')}, pid {now.get('pid', '?')}, group {now.get('group', '?')}): "
                    "S3 gives Delta no mutual exclusion, so a second writer could overwrite its commits; run one "
                    "job per S3 table, or set Delta's S3DynamoDBLogStore (docs/storage.md)"
                )
        log.info(
            "%s: the writer lease was not renewed for %.0fs: its holder is gone; taking it over", self.location, ttl
        )

    # -- run -----------------------------------------------------------------------------------------------

    def _renew_loop(self) -> None:
        # on a schedule from the last renewal's start, not a fixed pause after it: the read-back
        # that took the lease, and each renewal's own read and write, would otherwise age it
        pause = 0.0  # after a failed renewal: try again this soon
        while not self._stop.wait(max(pause, self.ttl_s / 3 - self._age())):
            pause = 0.0
            faults.hit("before_lease_renewal")  # a test stalls the renewals here
            if self._age() > self.ttl_s * 2 / 3:
                self._lost = (
                    f"the writer lease of {self.location} went {self._age():.0f}s without a renewal "
                    f"(TTL {self.ttl_s:.0f}s: the store refused the renewals, or this job stalled)"
                )
                log.error("%s: no more commits from this job", self._lost)
                return
            try:
                current = self._read()
                if current is None or current.get("holder") != self.holder:
                    who = (
                        "deleted"
                        if current is None
                        else f"taken by {current.get('host', '?')} pid {current.get('pid', '?')}"
                    )
                    self._lost = f"the writer lease of {self.location} was {who}"
                    log.error("%s: no more commits from this job", self._lost)
                    return
                self._write()
            except Exception as e:  # noqa: BLE001 - a store hiccup: check() refuses commits once the lease ages
                log.warning("%s: renewing the writer lease failed: %s", self.location, one_line(e, 200))
                pause = WATCH_POLL_S

    def check(self) -> None:
        """Before a commit: raise LeaseLostError unless the lease is ours and fresh."""
        if self._lost is not None:
            raise LeaseLostError(f"{self._lost}: another job writes the table (or it was released by hand)")
        age = self._age()
        if age > self.ttl_s * 2 / 3:
            raise LeaseLostError(
                f"the writer lease of {self.location} was last renewed {age:.0f}s ago (TTL {self.ttl_s:.0f}s): "
                "another job may have taken over, so this one does not commit"
            )

    def _age(self) -> float:
        """Seconds since our last renewal began (since the epoch of the monotonic clock before the first)."""
        return time.monotonic() - (self._renewed_at or 0.0)

    def release(self) -> None:
        """Stop renewing; delete the lease if it is still ours (the next job then starts at once)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.ttl_s)
        try:
            current = self._read()
            if current is not None and current.get("holder") == self.holder:
                self._fs.delete(self._path, False)
        except Exception as e:  # noqa: BLE001 - the lease then expires after its TTL
            log.warning("%s: releasing the writer lease failed: %s", self.location, one_line(e, 200))


def hold_leases(
    spark: SparkSession, tables: Iterable[tuple[TableLocation, str]], ttl_s: float, group: str
) -> list[WriterLease]:
    """A held lease for each (location, config key) on a store that needs one, taken side by side
    (a dead job's leases are waited out once, not once per table); TableInUseError if a live job
    holds one (then none is kept)."""
    leases = [WriterLease(spark, loc, key, ttl_s, group) for loc, key in tables if needs_lease(spark, loc)]
    if not leases:
        return []
    with ThreadPoolExecutor(len(leases), thread_name_prefix="writer-lease") as pool:
        outcomes = [pool.submit(lease.acquire) for lease in leases]
        errors = [e for e in (f.exception() for f in outcomes) if e is not None]
    if errors:
        for lease in leases:
            lease.release()  # deletes only what is ours
        raise errors[0]
    return leases


def hold_writer_leases(spark: SparkSession, cfg: SharelakeConfig, routes: Routes) -> list[WriterLease]:
    """The writer lease of each of the job's tables on a store without mutual exclusion (S3): every
    route's table and the dead-letter table; TableInUseError when another live job holds one."""
    return hold_leases(spark, routes.keyed_tables(), cfg.delta.writer_lease_s, cfg.kafka.group_id)


def lease_checks(leases: Iterable[WriterLease]) -> dict[TableLocation, LeaseCheck]:
    """Each leased table's check, for its writer to run before every commit (`open_destinations`)."""
    return {lease.location: lease.check for lease in leases}
