"""Data frames of one table writer's session built from Arrow tables, and the broadcasts that carry their rows.

A frame's rows are read by parallel tasks from Spark broadcasts (one Arrow IPC stream per task),
in a Python worker (`mapInArrow`): never a driver-side `LocalRelation`, never the rows inside the
tasks. `createDataFrame` ships each task's Arrow batch in the task itself, and a batch of a few MiB
made Spark warn of a task of very large size on every micro-batch. The broadcasts of a frame live
until the builder's next `frame` (or `release`), one batch at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

ROWS_PER_TASK = 4096  # a data frame's rows are split over at most defaultParallelism tasks of at least this many


class FrameBuilder:
    """Frames of `session` (a table writer's: its conf reads them) from Arrow tables, and their broadcasts."""

    def __init__(self, session: SparkSession):
        self._session = session
        self._parallelism = max(1, int(session.sparkContext.defaultParallelism))
        self._shipped: list[Broadcast[bytes]] = []  # the rows of the frames made since the last release

    def frame(self, rows: pa.Table, release: bool = True) -> DataFrame:
        """`rows` as a data frame of the session, split over parallel tasks.

        A frame's broadcasts live until the next `frame` (one batch at a time: the previous batch's
        append and diagnosis are over by then); `release=False` keeps the earlier frames of the batch
        readable (an upsert's source beside its rows).
        """
        if release:
            self.release()
        n = rows.num_rows
        tasks = max(1, min(self._parallelism, math.ceil(n / ROWS_PER_TASK)))
        per_task = max(1, math.ceil(n / tasks))
        schema = from_arrow_schema(rows.schema)
        rows = rows.cast(to_arrow_schema(schema, timezone="UTC"))  # the types Spark reads back (timestamps in us)
        sc = self._session.sparkContext
        parts = [sc.broadcast(_ipc_stream(rows.slice(start, per_task))) for start in range(0, max(n, 1), per_task)]
        self._shipped.extend(parts)
        return self._session.range(0, len(parts), 1, len(parts)).mapInArrow(_read_parts(parts), schema)

    def release(self) -> None:
        """Destroy the broadcasts of the frames made so far (none of them may be read again)."""
        for part in self._shipped:
            part.destroy(blocking=False)
        self._shipped.clear()


def _ipc_stream(rows: pa.Table) -> bytes:
    """`rows` as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    stream: bytes = sink.getvalue().to_pybytes()  # already bytes (pyarrow is untyped): no second copy
    return stream


def _read_parts(parts: list[Broadcast[bytes]]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function each task runs (in a Python worker): the rows of the parts its ids name."""

    def read(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in ids:
            for part in batch.column(0).to_pylist():
                yield from pa.ipc.open_stream(parts[part].value).read_all().to_batches()

    return read
