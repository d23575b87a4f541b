"""Warms the write path at start, before the job joins the share group.

Called once by `app.pipeline.run_ingest`, after the start-up checks and before any member polls.
The first Delta append of a fresh JVM took 10-11 s (class loading, JIT, whole-stage codegen of the
payload parse, Delta's commit path); records polled before it would wait that long with their
locks held. So a throwaway sink runs the real path once on synthetic records, on temporary tables
that are deleted afterwards: Arrow rows with headers, the plan, the frame, the one-job parse and
append, and, through one unreadable record, the diagnosis and the dead-letter append. Spark keeps
the generated code (its cache is keyed by the code, which the same schema and expressions
reproduce) and the JVM stays warm. Fault points are suspended meanwhile, and a failure here only
logs a warning: the real path then warms itself on the first batch, as before.
"""

from __future__ import annotations

import logging
import queue
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from app import faults
from app.acknowledge.lifecycle import AckCommand, PollBatch
from app.bridge.record_buffer import RecordBuffer
from app.config import BatchConfig
from app.sink.dead_letter import STAMP_COLUMN as DEAD_LETTER_STAMP
from app.sink.dead_letter import STATS_COLUMNS as DEAD_LETTER_STATS
from app.sink.dedup_cache import DedupCache
from app.sink.dedup_table import DedupTable
from app.sink.delta_sink import DeltaSink
from app.sink.delta_writer import ROWS_PER_TASK, DeltaWriter
from app.sink.formats.base import PayloadFormat

log = logging.getLogger(__name__)

TOPIC = "sharelake-warm-up"


@dataclass
class _Record:
    """A synthetic polled record (the parts of confluent_kafka.Message a row needs)."""

    off: int
    payload: bytes | None

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self.off % 2

    def offset(self) -> int:
        return self.off

    def key(self) -> bytes:
        return b"k%d" % self.off

    def value(self) -> bytes | None:
        return self.payload

    def headers(self) -> list[tuple[str, bytes]] | None:
        return [("warm", b"up")] if self.off % 3 == 0 else None

    def timestamp(self) -> tuple[int, int]:
        return (1, int(time.time() * 1000))

    def delivery_count(self) -> int:
        return 1


def warm_up(spark: SparkSession, fmt: PayloadFormat, max_delivery_count: int, job_name: str) -> float:
    """Run the write path once on temporary tables; the seconds it took (0 if it failed)."""
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="sharelake-warm-up-"))
    tables: list[DedupTable] = []
    sink_log = logging.getLogger(DeltaSink.__module__)
    sink_level = sink_log.level
    sink_log.setLevel(logging.ERROR)  # its dead-lettered sample record is not news
    try:
        with faults.suspended():
            twin = fmt.warm_up_twin()  # the format's reader, on a schema of its own where it keeps state
            for name, stamp, stats in (
                ("warm_up", "ingested_at", twin.stats_columns()),
                ("warm_up_dead_letter", DEAD_LETTER_STAMP, DEAD_LETTER_STATS),
            ):
                writer = DeltaWriter(spark, str(work / name), name, checkpoint_every=1_000_000, stats_columns=stats)
                tables.append(DedupTable(writer, DedupCache(None), stamp))
            buffer = RecordBuffer(1_000_000)
            batch = BatchConfig(max_records=1_000_000, max_wait_ms=0, write_attempts=1)
            sink = DeltaSink(buffer, tables[0], tables[1], batch, twin, max_delivery_count, 3600.0, job_name)
            values = twin.sample_values(2 * ROWS_PER_TASK)
            records: Any = [_Record(i, v) for i, v in enumerate(values)]
            commands: queue.Queue[AckCommand] = queue.Queue()
            buffer.put(PollBatch(-1, records, commands), timeout_s=1)
            sink(spark.range(0), -1)  # batch -1: its jobs are told apart from the real batch 0
            sink.finish()
        seconds = time.monotonic() - started
        log.info("write path warmed up in %.1fs (Spark, Delta, the payload parse), before joining the group", seconds)
        return seconds
    except Exception as e:  # noqa: BLE001 - best effort: the first real batch warms the path instead
        log.warning("warm-up failed, the first batch will be slower: %s", str(e).splitlines()[0] if str(e) else e)
        return 0.0
    finally:
        sink_log.setLevel(sink_level)
        for t in tables:
            t.writer.close()
        shutil.rmtree(work, ignore_errors=True)
