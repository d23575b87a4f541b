"""`payload.format = "text"`: the value as a UTF-8 string.

The Spark check is UTF-8 validity (class `invalid_utf8`). Called through the format seam by the
Delta sink.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa
from pyspark.sql import functions as F

from sharelake.formats.base import (
    BAD,
    METADATA_COLUMNS,
    BadRecord,
    BatchRead,
    ColumnRead,
    FormatSettings,
    PayloadFormat,
)


class TextSettings(FormatSettings):
    format: Literal["text"] = "text"


def _text_read() -> ColumnRead:
    kept_null = F.col("value").isNull()  # only reaches Spark when payload.allow_null_value is set
    return ColumnRead(
        {BAD: ~kept_null & ~F.expr("is_valid_utf8(cast(value as string))")},
        F.when(F.col(BAD), F.lit("invalid_utf8")),
        F.when(F.col(BAD), F.lit("the value is not valid UTF-8")),
        [F.col("value").cast("string").alias("value") if c == "value" else F.col(c) for c in METADATA_COLUMNS],
    )


class TextFormat(PayloadFormat):
    name = "text"
    settings_model = TextSettings
    error_classes = ("invalid_utf8",)

    def __init__(self, settings: TextSettings):
        super().__init__(settings)
        self._read = _text_read()

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], BatchRead]:
        return [], self._read

    def columns(self) -> tuple[str, ...]:
        return METADATA_COLUMNS

    def sample_values(self, count: int) -> Sequence[bytes | None]:
        return [b"warm-up text"] * (count - 1) + [b"\xff\xfe"]
