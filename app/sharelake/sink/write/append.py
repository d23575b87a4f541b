"""`write.mode = "append"`, the default write mode: every record is a row, one append per batch
(`DedupTable.append`). A `WriteMode` (`sharelake.sink.write.write_mode`) that declares nothing beyond
the seam's defaults.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from sharelake.config.routes import Route
from sharelake.sink.dedup.dedup_table import DedupTable
from sharelake.sink.write.write_mode import Batch, ModeWrite, WriteMode


class Append(WriteMode):
    name = "append"

    @classmethod
    def of_route(cls, route: Route, others: Sequence[type[WriteMode]]) -> Self:
        return cls(others)

    def write(self, table: DedupTable, batch: Batch) -> ModeWrite:
        rows = batch.read.main_rows(batch.kept)
        return ModeWrite(table.append(rows, batch.claim, batch.batch_id, batch.stamp, merge_schema=batch.merge_schema))
