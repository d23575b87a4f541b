"""The seam every payload format plugs into, and what all formats share.

A format is one module of `sharelake.formats` with two classes:

- its **settings** (a pydantic model, a subclass of `FormatSettings`): the `[payload]` keys it
  reads, validated when the config loads (`sharelake.config.settings`);
- its **reader** (a subclass of `PayloadFormat`): the start-up check (`start`), the driver-side
  verdicts of one batch (`read`), and the Spark parse that runs inside the one write job
  (`BatchRead.parse`), with the class and message of a record it could not read (`BatchRead.errors`)
  and the main table's columns (`BatchRead.main_rows`); its error classes (`error_classes`); the warm-up's
  values (`sample_values`, `warm_up_twin`).

`FormatSettings` holds the `[payload]` keys every format has, `RegistrySettings` the `[payload.registry]`
section. A batch is read in this order: `precheck` (the checks every format shares, on Arrow: no value, too
large, the delivery cap), then the format's `read` on the same rows, then one Spark job that parses, filters the
rows flagged `BAD`, collects them (with their class and message, `BatchRead.bad_row`, while a stream carries
poison) and writes the rest. Every error class is permanent: the record goes to the dead-letter table and is
REJECTed. A format whose dependency is down (a schema registry) raises `DependencyUnavailable` from `read`: never
the record's fault, so the batch is RELEASEd and retried once `probe` passes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as _pc
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from sharelake.secrets import resolve_secret
from sharelake.table.columns import ROW_SCHEMA
from sharelake.table.location import TableLocation

# the Kafka metadata columns every main-table row carries (payload fields must not reuse these names)
METADATA_COLUMNS = tuple(ROW_SCHEMA.names)
# the error classes of the checks every format shares (`precheck`)
SHARED_ERROR_CLASSES = ("null_value", "too_large", "delivery_count_exceeded")
ERROR_CLASS = "_error_class"
ERROR_MESSAGE = "_error_message"
BAD = "_bad"  # true for a record that cannot land (set by BatchRead.parse)
PARSED = "_parsed"  # the value read into a struct by the format (json, avro)
pc: Any = _pc  # pyarrow.compute's kernels are generated at import: untyped
SHOWN_CHARS = 200  # of a bad value, in its error message


class RegistrySettings(BaseModel):
    """`[payload.registry]`: where writer schemas are fetched by id (the Confluent REST API)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(
        description="The registry, e.g. `https://registry:8081`, or Apicurio's `http://host:8080/apis/ccompat/v7`. "
        "Credentials in the URL are refused: no log may show them."
    )
    basic_auth_user: str | None = Field(default=None, description="Basic auth user (with `basic_auth_password`).")
    basic_auth_password: str | None = Field(
        default=None,
        repr=False,
        description="Basic auth password: `env:NAME` or `file:/path`, read at start (never inline, never on a "
        "command line).",
    )
    ca_location: str | None = Field(default=None, description="A CA certificate file for https with a private CA.")
    timeout_s: float = Field(default=10.0, gt=0, description="Per-request timeout, in seconds.")

    @field_validator("url")
    @classmethod
    def _plain_url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"payload.registry.url = {v!r}: write it as http(s)://host:port[/path]")
        if parts.username or parts.password:
            raise ValueError(
                "payload.registry.url holds credentials: move them to payload.registry.basic_auth_user / "
                "basic_auth_password (env: or file:), so no log shows them"
            )
        return v.rstrip("/")

    @field_validator("basic_auth_password")
    @classmethod
    def _secret(cls, v: str | None) -> str | None:
        return None if v is None else resolve_secret("payload.registry.basic_auth_password", v)

    @model_validator(mode="after")
    def _user_with_password(self) -> RegistrySettings:
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            raise ValueError("payload.registry.basic_auth_user and basic_auth_password go together: set both or none")
        return self

    def client_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s, "max.retries": 0}
        if self.basic_auth_user is not None:
            conf["basic.auth.user.info"] = f"{self.basic_auth_user}:{self.basic_auth_password}"
        if self.ca_location:
            conf["ssl.ca.location"] = self.ca_location
        return conf


class FormatSettings(BaseModel):
    """The `[payload]` keys every format has; a format's settings add its own."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    format: str = Field(
        description="How record values are read: `raw` (the value as bytes), `text` (a UTF-8 string), `json` "
        "(parsed with `schema` into columns), or a format whose writer schemas say the columns (`avro`, "
        "`protobuf`, ...). Each is described in `docs/payload-formats.md`. Keys of another format are refused at "
        "start."
    )
    max_value_bytes: int = Field(
        default=1_048_576, ge=1, description="A longer value is dead-lettered (`too_large`), not written."
    )
    allow_null_value: bool = Field(
        default=False,
        description="Keep records without a value (tombstones); false: dead-letter them (`null_value`).",
    )
    key_format: Literal["raw", "text", "avro"] = Field(
        default="raw",
        description="How the record key lands in the `key` column (`sharelake.formats.keys`): `raw` bytes, `text` "
        "(a UTF-8 string, else `key_invalid_utf8`) or `avro` (the Confluent wire format, decoded with `registry` "
        "into a struct; its classes are the value's prefixed `key_`). A table keeps the key format it was first "
        "written with.",
    )
    envelope: Literal["none", "debezium"] = Field(
        default="none",
        description='`"debezium"`: each value is a Debezium change event (`op`, `before`, `after`, `source`), '
        "plain or as the JSON converter writes it with schemas (`{schema, payload}`). With `write.mode = "
        '"upsert"` only: `c`, `r` and `u` upsert `after`, `d` deletes the key of `before`, a tombstone deletes '
        "the record key's; another op is dead-lettered (`unsupported_op`). For `json`, `schema` describes the "
        "row (`after`), not the event (`docs/upserts.md`).",
    )
    registry: RegistrySettings | None = Field(
        default=None,
        description="`[payload.registry]`: the schema registry (Confluent REST API) of values in the Confluent wire "
        "format (`avro` values with a registry; `protobuf` and the other wire formats need it) and of `avro` keys. "
        "Each schema id is fetched once per job; down at start, it is waited for (`run.dependency_wait_s`, then "
        "exit 3; refusing us, exit 2); during a run the batch is RELEASEd and retried, never dead-lettered.",
    )

    @model_validator(mode="after")
    def _avro_keys_need_a_registry(self) -> FormatSettings:
        if self.key_format == "avro" and self.registry is None:
            raise ValueError(
                "payload.key_format = 'avro' reads keys in the Confluent wire format: set payload.registry.url"
            )
        return self

    def registry_note(self) -> str:
        """The registry for the banner ("" without one): its URL, never its credentials."""
        if self.registry is None:
            return ""
        return f"registry {self.registry.url}{' (basic auth)' if self.registry.basic_auth_user else ''}"

    def values_note(self) -> str:
        """How values are read, for the banner: the format's name; a format with schemas says whence."""
        return self.format

    def describe(self) -> str:
        """The payload as the start-up banner shows it (`sharelake.run.pipeline`): values, then keys unless raw."""
        note = self.values_note()
        if self.key_format != "raw":
            note += f", {self.key_format} keys"
            if self.key_format == "avro" and self.format != "avro":
                note += f" (schemas from {self.registry_note()})"
        return note


@dataclass(frozen=True)
class BadRecord:
    index: int  # row of the batch's Arrow table
    error_class: str
    message: str


def precheck(table: pa.Table, cfg: FormatSettings, max_delivery_count: int) -> list[BadRecord]:
    """The rows of `table` (in `sharelake.table.columns.ROW_SCHEMA`) that fail the checks every format shares."""
    value = table.column("value")
    no_value = pc.and_(pc.is_null(value), not cfg.allow_null_value)
    lengths = pc.binary_length(value)
    too_large = pc.fill_null(pc.greater(lengths, cfg.max_value_bytes), False)
    exhausted = pc.fill_null(pc.greater_equal(table.column("delivery_count"), max_delivery_count), False)
    any_bad = pc.or_(pc.or_(no_value, too_large), exhausted)
    bad: list[BadRecord] = []
    if not pc.any(any_bad).as_py():
        return bad
    for i in pc.indices_nonzero(any_bad).to_pylist():  # only builds messages; the test was vectorized
        null, large, spent = no_value[i].as_py(), too_large[i].as_py(), exhausted[i].as_py()
        if null:
            bad.append(BadRecord(i, "null_value", "the record has no value; set payload.allow_null_value to keep them"))
        elif large:
            bad.append(
                BadRecord(
                    i,
                    "too_large",
                    f"value of {lengths[i].as_py()} bytes is over payload.max_value_bytes = {cfg.max_value_bytes}",
                )
            )
        elif spent:
            count = table.column("delivery_count")[i].as_py()
            bad.append(
                BadRecord(
                    i,
                    "delivery_count_exceeded",
                    f"delivered {count} times without landing (dead_letter.max_delivery_count = {max_delivery_count})",
                )
            )
    return bad


class BatchRead(ABC):
    """How one batch's values are read in Spark. Static formats reuse one for every batch."""

    # whether some records can only be judged in Spark (raw is fully checked on the driver)
    needs_spark: bool = True

    @abstractmethod
    def parse(self, df: DataFrame) -> DataFrame:
        """`df` (ROW_SCHEMA) with the parsed value and BAD; a format without a Spark check: `df`."""

    @abstractmethod
    def errors(self) -> tuple[Column, Column]:
        """A bad record's error class and message, over `parse`'s columns (null for a good record)."""

    @abstractmethod
    def main_rows(self, parsed: DataFrame, carry: Sequence[str] = ()) -> DataFrame:
        """The main table's columns of parsed rows: metadata, then the value as the format reads it;
        then `carry`, columns of `parsed` a write mode needs after them (`sharelake.sink.write.write_mode`)."""

    def bad_row(self, row: str) -> Column:
        """Over `parse`'s columns: (`row`, ERROR_CLASS, ERROR_MESSAGE) for a bad record, null for a good one.

        Aggregated in the write's own job (`collect_list` in an observation), Spark evaluates the
        class and message only where BAD holds (as projected columns before the aggregate, they
        would cost every row); the larger plan still costs each batch some planning."""
        error_class, message = self.errors()
        return F.when(F.col(BAD), F.struct(F.col(row), error_class.alias(ERROR_CLASS), message.alias(ERROR_MESSAGE)))


class ColumnRead(BatchRead):
    """A read made of column expressions, built once (each is a few py4j calls) and reused:
    the parse's columns (BAD among them), a bad row's class and message, the main table's columns."""

    def __init__(self, parse: dict[str, Column], error_class: Column, message: Column, main: list[Column]):
        self._parse, self._class, self._message, self._main = parse, error_class, message, main

    def parse(self, df: DataFrame) -> DataFrame:
        return df.withColumns(self._parse)

    def errors(self) -> tuple[Column, Column]:
        return self._class, self._message

    def main_rows(self, parsed: DataFrame, carry: Sequence[str] = ()) -> DataFrame:
        return parsed.select(*self._main, *carry)


def no_errors() -> tuple[Column, Column]:
    """Null class and message: for a read that flags nothing in Spark."""
    return F.lit(None).cast("string"), F.lit(None).cast("string")


class PayloadFormat(ABC):
    """One payload format's reader: built from its settings by `sharelake.formats.payload_format`."""

    name: ClassVar[str]
    settings_model: ClassVar[type[FormatSettings]]  # its `[payload]` keys (`sharelake.formats.PayloadSettings`)
    error_classes: ClassVar[tuple[str, ...]]  # its own classes, beside SHARED_ERROR_CLASSES
    # whether an append may add columns to the main table (formats whose shape can grow)
    merge_schema: bool = False

    def __init__(self, settings: FormatSettings):
        self.settings = settings

    def start(self, spark: SparkSession, location: TableLocation) -> None:  # noqa: B027 - most formats check nothing
        """The start-up check, before the job joins the group: ConfigError (one line) on a problem."""

    def probe(self) -> None:  # noqa: B027 - a format without a dependency is always there
        """After `DependencyUnavailable`: return once the dependency answers again, else raise it again."""

    @abstractmethod
    def read(self, rows: pa.Table) -> tuple[list[BadRecord], BatchRead]:
        """One batch's rows (ROW_SCHEMA): the driver's verdicts and the Spark read of the batch.

        Raises `DependencyUnavailable` when a service the format needs did not answer.
        """

    def columns(self) -> tuple[str, ...] | None:
        """The main table's columns, when the format knows them before the first batch (a write
        mode's start-up check); None when the writer schemas in the registry say them."""
        return None

    def stats_columns(self) -> tuple[str, ...]:
        """The main table's columns Delta keeps file statistics on (data skipping): the record's
        identity, times and counts; never the raw key, value or headers, whose statistics readers
        cannot use and writers pay for. Formats with typed fields add theirs."""
        return tuple(c for c in METADATA_COLUMNS if c not in ("key", "value", "headers"))

    @abstractmethod
    def sample_values(self, count: int) -> Sequence[bytes | None]:
        """`count` values for the warm-up (`sharelake.sink.batch.warm_up`), the last one unreadable."""

    def sample_keys(self, count: int) -> Sequence[bytes | None]:
        """`count` record keys for the warm-up, in the format the topic's keys are read in."""
        return [b"k%d" % i for i in range(count)]

    def warm_up_twin(self) -> PayloadFormat:
        """The reader the warm-up runs on (a format with state returns a fresh one)."""
        return self
