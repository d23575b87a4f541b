"""Whether a table holds any of an upsert batch's keys: what lets a batch of keys it lacks be appended.

`NewKeys` holds the batch's keys (one row per key: the batch's newest records' key columns, in
Arrow, made a frame only when `held` is asked) and each key column's range in the batch. `held`
answers on the table's rows at the snapshot an append's transaction starts on (the keys of the
append's `Claim`, `sharelake.sink.delta.writer`): the rows pruned to each key column's range
(which skips whole files by their statistics when the keys grow, as ids and timestamps do, or the
table is clustered by key), joined left-semi with the batch's keys (broadcast), and stopped at the
first match. The keys match as the MERGE's `t.k = s.k` does.
`among` compares two batches' keys in the driver (Arrow's semi join), with no Spark job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sharelake.formats.base import pc

ORDERED = (int, float, str, date, datetime, Decimal)  # key values a table's rows can be pruned by range


def key_ranges(source: pa.Table, keys: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """Each key column's (min, max) in `source`, for the columns whose values have an order."""
    ranges: dict[str, tuple[Any, Any]] = {}
    for k in keys:
        low, high = (v.as_py() for v in pc.min_max(source.column(k)).values())
        if isinstance(low, ORDERED) and isinstance(high, ORDERED) and type(low) is type(high):
            ranges[k] = (low, high)
    return ranges


def within(ranges: dict[str, tuple[Any, Any]], prefix: str = "") -> Column:
    """Each key column (of the table aliased `prefix`, if any) within its range."""
    inside = F.lit(True)
    for k, (low, high) in ranges.items():
        inside = inside & F.col(f"{prefix}`{k}`").between(F.lit(low), F.lit(high))
    return inside


@dataclass(frozen=True)
class NewKeys:
    """An upsert batch's keys: `values` one row per key (its columns the key columns), `frame_of` what
    makes them a frame (the table's `FrameBuilder.frame`), `ranges` each key column's."""

    values: pa.Table
    frame_of: Callable[[pa.Table], DataFrame]
    ranges: dict[str, tuple[Any, Any]]

    @property
    def count(self) -> int:
        return int(self.values.num_rows)

    @property
    def names(self) -> list[str]:
        return list(self.values.column_names)

    def held(self, table: DataFrame) -> bool:
        """Whether a row of `table` has one of the keys."""
        rows = table.select(*(F.col(f"`{k}`") for k in self.names)).where(within(self.ranges))
        return not rows.join(F.broadcast(self.frame_of(self.values)), self.names, "left_semi").isEmpty()

    def among(self, earlier: NewKeys) -> bool:
        """Whether one of the keys is among `earlier`'s (another batch's); yes for keys Arrow cannot join
        (a struct): the answer only chooses between a MERGE and a checked append, never what lands."""
        try:
            return bool(self.values.join(earlier.values, self.names, join_type="left semi").num_rows)
        except pa.ArrowException:
            return True
