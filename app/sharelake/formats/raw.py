"""`payload.format = "raw"`: the value as bytes, as Kafka holds it.

No Spark check: the shared driver checks (`sharelake.formats.base.precheck`) are all a raw value
can fail. The main table's columns are the record's and the write's (`METADATA_COLUMNS`), known before the
first batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sharelake.formats.base import METADATA_COLUMNS, BadRecord, BatchRead, FormatSettings, PayloadFormat, no_errors


class RawSettings(FormatSettings):
    format: Literal["raw"] = "raw"


class _RawRead(BatchRead):
    needs_spark = False

    def parse(self, df: DataFrame) -> DataFrame:
        return df

    def errors(self) -> tuple[Column, Column]:
        return no_errors()

    def main_rows(self, parsed: DataFrame, carry: Sequence[str] = ()) -> DataFrame:
        return parsed.select(*(F.col(c) for c in METADATA_COLUMNS), *carry)


class RawFormat(PayloadFormat):
    name = "raw"
    settings_model = RawSettings
    error_classes = ()

    def __init__(self, settings: RawSettings):
        super().__init__(settings)
        self._read = _RawRead()

    def read(self, rows: pa.Table) -> tuple[list[BadRecord], BatchRead]:
        return [], self._read

    def columns(self) -> tuple[str, ...]:
        return METADATA_COLUMNS

    def sample_values(self, count: int) -> Sequence[bytes | None]:
        return [b"warm-up value"] * (count - 1) + [None]
