"""Property-based fuzzing of every payload format's decode path (bad input, at scale).

Owns the fuzzing of what a record's bytes meet on their way into a table: the Confluent wire header
(`sharelake.formats.wire`, against a reference parser), the Protobuf decode of Spark's workers
(`protobuf_decode`, on the driver), and every format end to end as the table writer drives it
(`precheck`, the format's `read`, then one Spark job over the real frame: `BatchRead.parse`, the bad
rows collected with their class and message, the rest read into the main table's columns): raw,
text, json (plain and in a Debezium envelope), json_schema, avro, protobuf, and text and Avro record
keys, the registry formats against the session's real registry.

Inputs are random and mutated bytes: valid records with bytes flipped, cut, inserted, spliced;
truncated wire headers, unknown and out-of-range schema ids, huge declared lengths, bad varints,
Protobuf unknown fields and wire types, deeply nested JSON, invalid UTF-8, tombstones, oversized
values, exhausted delivery counts. Hypothesis draws a batch's steering inputs and the seed of a bulk
mutator, so each example is one batch of thousands of records and costs one Spark job. Every input
must end exactly once, as a row or as a dead letter whose class the format declares; the untouched
valid records must land; nothing may raise out of the batch or outlive the test's timeout; the
driver's memory stays within the bounds below.
"""

from __future__ import annotations

import functools
import json
import random
import resource
import struct
import sys
import tracemalloc
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import timestamp_pb2
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_type

from devkit.sample_data import EVENT_AVRO_SCHEMA, EVENT_AVRO_SCHEMA_V2, EVENT_SCHEMA, avro_values, event_record
from sharelake.bridge.arrow_rows import poll_rows
from sharelake.bridge.synthetic_record import SyntheticRecord
from sharelake.formats import payload_format
from sharelake.formats.avro import AvroSettings
from sharelake.formats.base import (
    BAD,
    ERROR_CLASS,
    ERROR_MESSAGE,
    PARSED,
    SHARED_ERROR_CLASSES,
    FormatSettings,
    PayloadFormat,
    RegistrySettings,
    precheck,
)
from sharelake.formats.json import JsonSettings
from sharelake.formats.json_schema import JsonSchemaSettings
from sharelake.formats.keys import KeyedFormat
from sharelake.formats.protobuf import ProtobufFormat, ProtobufSettings
from sharelake.formats.protobuf import spark_type as protobuf_spark_type
from sharelake.formats.protobuf_decode import DecodePlan, Writer, decode_values
from sharelake.formats.protobuf_schemas import writer_schema
from sharelake.formats.raw import RawSettings
from sharelake.formats.schema_registry_client import WARM_UP_ID
from sharelake.formats.shape import Shape
from sharelake.formats.text import TextSettings
from sharelake.formats.wire import MAX_DEPTH, header, message_headers, schema_ids
from sharelake.sink.batch.table_writer import ROW
from sharelake.sink.write.destinations import main_table
from sharelake.table.columns import stamped
from sharelake.table.location import TableLocation
from sharelake.testing.schema_registry import EmbeddedSchemaRegistry
from tests.test_json_schema import EVENT_SCHEMA as EVENT_JSON_SCHEMA
from tests.test_json_schema import json_values
from tests.test_protobuf import FIELD, event, event_class, serialized
from tests.test_record_keys import KEY_SCHEMA, avro_keys

TOPIC = "fuzz"
BULK_INPUTS = 2500  # records the bulk mutator adds to each batch, beside the drawn ones and the seeds
MAX_VALUE_BYTES = 256 * 1024  # payload.max_value_bytes of every fuzzed format: larger values are `too_large`
MAX_DELIVERY_COUNT = 5  # dead_letter.max_delivery_count: a record delivered this often is parked
# memory bounds of the driver: the Python heap's peak while one batch is judged on the driver
# (`precheck` and the format's `read`: numpy over the Arrow buffers, registry lookups), and the
# growth of the driver process's peak resident set over one format's whole fuzz (every batch:
# records, Arrow rows, frames, verdicts, collected rows)
DRIVER_PEAK_BYTES = 8 * 1024 * 1024
RSS_GROWTH_BYTES = 256 * 1024 * 1024
# a batch's Spark job and verdicts, each example one batch: a few examples of thousands of inputs.
# No shrinking (each step would run Spark jobs again): a failure names the offending inputs itself.
BATCHES = settings(
    max_examples=2,
    deadline=None,
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
# driver-only properties (no Spark): many examples, still a fixed sequence
DRIVER_ONLY = settings(max_examples=300, deadline=None, derandomize=True, database=None)
UNKNOWN_IDS = (0, 987_654, WARM_UP_ID, 2**31, 2**32 - 1)  # ids no registry of the session hands out


# -- bytes ---------------------------------------------------------------------------------------------


def varint(n: int) -> bytes:
    """`n` (>= 0, below 2**64) as a base-128 varint."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def zigzag(n: int) -> bytes:
    """`n` as a zigzag varint (Avro's ints and longs, the wire format's message indexes)."""
    return varint(((n << 1) ^ (n >> 63)) & (2**64 - 1))


# byte sequences no strict UTF-8 decoder accepts
INVALID_UTF8 = (
    b"\xff",
    b"\xfe\xff",
    b"\x80",  # a lone continuation byte
    b"\xc0\xaf",  # an overlong "/"
    b"\xe0\x80\xaf",  # an overlong "/" in three bytes
    b"\xed\xa0\x80",  # a UTF-16 surrogate
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xe2\x82",  # a sequence cut short
    b"\xf8\x88\x80\x80\x80",  # a five-byte form
)
BAD_VARINTS = (b"\x80", b"\xff" * 10 + b"\x01", b"\xff" * 11, b"\x80" * 12)  # cut, overlong
# JSON values that are not objects, and what a dead letter's message calls each
NOT_OBJECTS = {b"[1, 2, 3]": "an array", b'"s"': "a string", b" 1.5": "a number", b"true": "a boolean", b"null": "null"}


def mutated(rng: random.Random, value: bytes, others: Sequence[bytes]) -> bytes:
    """`value` broken the ways producers, proxies and disks break bytes."""
    data = bytearray(value)
    for _ in range(1 + rng.randrange(3)):
        op = rng.randrange(9)
        at = rng.randrange(len(data) + 1)
        if op == 0 and data:  # flip a bit
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif op == 1 and data:  # a byte replaced
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op == 2:  # cut short
            del data[at:]
        elif op == 3:  # random bytes inserted
            data[at:at] = rng.randbytes(rng.randrange(1, 9))
        elif op == 4:  # a slice dropped
            del data[at : at + rng.randrange(1, 9)]
        elif op == 5 and others:  # spliced with another record
            other = rng.choice(others)
            data = data[:at] + other[rng.randrange(len(other) + 1) :]
        elif op == 6:  # a bad or huge varint inserted (lengths, counts, ids)
            data[at:at] = rng.choice((*BAD_VARINTS, varint(2**62), zigzag(-(2**40)), zigzag(2**31)))
        elif op == 7:  # invalid UTF-8 inserted
            data[at:at] = rng.choice(INVALID_UTF8)
        elif op == 8 and data:  # a slice repeated
            end = min(len(data), at + rng.randrange(1, 17))
            data[at:at] = data[at:end] * rng.randrange(2, 5)
    return bytes(data)


def random_bytes(rng: random.Random) -> bytes:
    """Noise: mostly short, sometimes empty, now and then longer than any value should be."""
    size = rng.choice((0, 1, 4, 5, 6, rng.randrange(64), rng.randrange(2048)))
    if rng.random() < 0.005:
        size = MAX_VALUE_BYTES + rng.randrange(1, 1024)  # too_large
    return rng.randbytes(size)


def wire_value(rng: random.Random, known: Sequence[int], body: bytes) -> bytes:
    """`body` behind a wire header: mostly a `known` schema id, else an unknown one, a header cut
    short or a wrong magic byte."""
    roll = rng.random()
    if roll < 0.05:
        return b"\x00" + rng.randbytes(rng.randrange(4))  # the header cut short
    if roll < 0.08:
        return bytes([rng.randrange(1, 256)]) + header(rng.choice(known))[1:] + body  # a wrong magic byte
    return header(rng.choice(UNKNOWN_IDS) if roll < 0.2 else rng.choice(known)) + body


def text_like(rng: random.Random) -> bytes:
    """Text in UTF-8, now and then broken by a sequence no decoder accepts."""
    alphabet = "aé€😀\u0000\u200b\ufeff\U0010ffff"
    text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40))).encode()
    if rng.random() < 0.5:
        at = rng.randrange(len(text) + 1)
        text = text[:at] + rng.choice(INVALID_UTF8) + text[at:]
    return text


def json_like(rng: random.Random, events: Sequence[bytes]) -> bytes:
    """JSON that is nearly an event: deep nesting, wrong types, not an object, odd numbers and text."""
    kind = rng.randrange(10)
    event = rng.choice(events)
    if kind == 0:  # nesting far deeper than any parser's limit, closed or not
        depth = rng.choice((64, 1000, 1001, 5000, 50_000, 120_000))
        opener, closer = rng.choice(((b"[", b"]"), (b'{"a":', b"}")))
        inner = opener * depth + b"1" + closer * (depth if rng.random() < 0.7 else rng.randrange(depth))
        if rng.random() < 0.5:  # inside a field the schema skips, or one it reads (a string, a number)
            return b'{"kind": "k", "' + rng.choice((b"nested", b"user", b"id")) + b'": ' + inner + b"}"
        return inner
    if kind == 1:  # a field of the wrong type
        field = rng.choice(("id", "user", "amount", "kind"))
        wrong = rng.choice(('"seven"', "[1]", "{}", "true", "1.5", "null", "-0", "1e999"))
        return json.dumps({**json.loads(event), field: "@"}).replace('"@"', wrong).encode()
    if kind == 2:  # not an object
        return rng.choice((b"1", b"[]", b"", b"   ", b"{}", *NOT_OBJECTS))
    if kind == 3:  # numbers past every type
        return b'{"id": 1' + b"0" * rng.randrange(1, 400) + b', "amount": ' + rng.choice((b"1e999", b"-1e-999", b"NaN"))
    if kind == 4:  # invalid UTF-8 inside a string
        at = event.index(b'"') + 1
        return event[:at] + rng.choice(INVALID_UTF8) + event[at:]
    if kind == 5:  # a lone surrogate escape, an escaped NUL
        at = event.index(b'"') + 1
        return event[:at] + rng.choice((b"\\ud800", b"\\u0000", b"\\udfff\\ud800")) + event[at:]
    if kind == 6:  # a key twice
        return event[:-1] + b',"id":"twice"}'
    if kind == 7:  # a byte-order mark, trailing text
        return rng.choice((b"\xef\xbb\xbf" + event, event + b" trailing", event + event))
    if kind == 8:  # an object of many keys
        return json.dumps({f"k{i}": i for i in range(rng.randrange(2000))}).encode()
    return mutated(rng, event, events)


def unknown_field(rng: random.Random) -> bytes:
    """A field no Event has, of a valid wire type: a reader skips it."""
    number, wire = rng.choice((8, 99, 2**29 - 1)), rng.choice((0, 1, 2, 5))
    payload = {0: varint(rng.randrange(2**64)), 1: rng.randbytes(8), 5: rng.randbytes(4)}
    payload[2] = varint(size := rng.randrange(30)) + rng.randbytes(size)
    return varint(number << 3 | wire) + payload[wire]


def protobuf_body(rng: random.Random, valid: Sequence[bytes]) -> bytes:
    """An Event body with unknown fields, wrong or reserved wire types, bad varints, huge lengths."""
    body = bytearray(rng.choice(valid))
    for _ in range(1 + rng.randrange(3)):
        kind = rng.randrange(9)
        number = rng.choice((1, 2, 3, 5, 6, 8, 15, 16, 2047, 2**29 - 1, 0, 2**29))
        if kind == 0:
            body += unknown_field(rng)
        elif kind == 1:  # a reserved wire type (6, 7), or a group never ended / never begun
            body += varint(number << 3 | rng.choice((3, 4, 6, 7))) + rng.randbytes(rng.randrange(4))
        elif kind == 2:  # a length far past the body
            body += varint(number << 3 | 2) + rng.choice((varint(2**62), varint(2**31), varint(2**32 - 1), b"\x7f"))
        elif kind == 3:  # a varint too long or cut short
            body += varint(number << 3) + rng.choice(BAD_VARINTS)
        elif kind == 4:  # a known field with another wire type
            body += varint(rng.choice((1, 2, 5)) << 3 | rng.choice((0, 1, 2, 5))) + rng.randbytes(rng.randrange(9))
        elif kind == 5:  # a string field that is not UTF-8
            text = rng.choice(INVALID_UTF8)
            body += varint(2 << 3 | 2) + varint(len(text)) + text
        elif kind == 6:  # nested groups, deeper than any recursion limit
            depth = rng.choice((10, 100, 1000, 20_000))
            body += varint(99 << 3 | 3) * depth + varint(99 << 3 | 4) * depth
        elif kind == 7:  # a field key whose varint never ends
            body += b"\xff" * rng.randrange(1, 12)
        else:
            body = bytearray(mutated(rng, bytes(body), valid))
    return bytes(body)


def message_indexes(rng: random.Random) -> bytes:
    """The Protobuf message indexes after the schema id: right, wrong, cut, negative, too deep, huge."""
    return rng.choice(
        (
            b"\x00",  # [0]: the file's first message (Header)
            b"\x02\x02",  # [1]: Event
            b"\x02\x04",  # [2]: no such message
            b"\x04\x02\x00",  # [1, 0]: Event has no nested message
            b"\x02\x01",  # [-1]
            b"\x01",  # a negative count
            b"\x02",  # a count, no index
            zigzag(MAX_DEPTH + 1) + b"\x00" * (MAX_DEPTH + 1),  # too deep
            varint(2**63),  # a count past any depth
            rng.choice(BAD_VARINTS),
            b"",
        )
    )


# -- one batch, as the table writer runs it ---------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One fuzzed Kafka record: its value, key and delivery count."""

    value: bytes | None
    key: bytes | None = None
    deliveries: int = 1


@dataclass(frozen=True)
class LandedRow:
    """One row of the main table's columns, each read into Python only when asked for."""

    rows: pa.Table
    at: int

    def __getitem__(self, column: str) -> Any:
        return self.rows.column(column)[self.at].as_py()


@dataclass
class Outcome:
    """Where a batch's records ended: the rows landed, each dead letter's class and message, by index."""

    landed: dict[int, LandedRow]
    parked: dict[int, tuple[str, str]]


class FuzzedFormat:
    """One started format (it keeps its registry answers and shape across batches, as in a job) and
    a table's writer for its frames; `land` runs one batch the way `TableWriter._write` does."""

    def __init__(self, spark: SparkSession, fmt: PayloadFormat, where: Path):
        self.spark, self.fmt = spark, fmt
        location = TableLocation.at(where)
        fmt.start(spark, location)
        opened = main_table(spark, location, fmt, checkpoint_every=100, lookback_commits=None)
        self.table, self.frames = opened.table, opened.frames
        self.declared = {*SHARED_ERROR_CLASSES, *fmt.error_classes}
        if isinstance(fmt, KeyedFormat):  # a keyed format's own classes are the key's; the value's are its reader's
            self.declared |= set(fmt.values.error_classes)
        self.inputs = 0
        self.outcomes: Counter[str] = Counter()
        self.rss_start, self.rss_growth, self.driver_peak = peak_rss_bytes(), 0, 0

    def close(self) -> None:
        self.table.close()

    def land(self, records: Sequence[Record]) -> Outcome:
        polled: Any = [
            SyntheticRecord(TOPIC, 0, i, key=r.key, value=r.value, delivery_count=r.deliveries, timestamp_ms=1)
            for i, r in enumerate(records)
        ]
        rows = poll_rows(polled)
        tracemalloc.start()
        try:
            bad = {b.index: b for b in precheck(rows, self.fmt.settings, MAX_DELIVERY_COUNT)}
            found, read = self.fmt.read(rows)
            bad = {**{b.index: b for b in found}, **bad}  # a shared check's class wins
            driver_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        self.driver_peak = max(self.driver_peak, driver_peak)
        assert driver_peak < DRIVER_PEAK_BYTES, f"the driver's verdicts peaked at {driver_peak >> 10} KiB"
        parked = {i: (b.error_class, b.message) for i, b in bad.items()}
        keep = np.ones(rows.num_rows, dtype=np.bool_)
        keep[list(bad)] = False
        kept = np.flatnonzero(keep)
        to_write = stamped(
            rows.filter(pa.array(keep)).append_column(ROW, pa.array(kept, pa.int64())), 0, datetime.now(UTC)
        )
        landed: dict[int, LandedRow] = {}
        if to_write.num_rows:
            frame = self.frames.frame(to_write)
            observed = Observation() if read.needs_spark else None
            if observed is None:
                rows_out = read.main_rows(read.parse(frame), carry=(ROW,))
            else:  # the write's job: bad rows filtered out and named, the rest read into the table's columns
                parsed = read.parse(frame).observe(observed, F.collect_list(read.bad_row(ROW)).alias("bad"))
                rows_out = read.main_rows(parsed.where(~F.col(BAD)), carry=(ROW,))
            main_rows = rows_out.toArrow()  # every column of every landed row evaluated
            for at, index in enumerate(main_rows.column(ROW).to_pylist()):
                assert index not in landed, f"record {index} landed twice"
                landed[index] = LandedRow(main_rows, at)
            for verdict in observed.get["bad"] if observed is not None else ():
                index, error_class, message = verdict[0], verdict[1], verdict[2]
                assert index not in parked, f"record {index} judged twice"
                parked[index] = (error_class, message)
        self.record(records, landed, parked)
        return Outcome(landed, parked)

    def record(
        self, records: Sequence[Record], landed: dict[int, LandedRow], parked: dict[int, tuple[str, str]]
    ) -> None:
        """Each record ended once, as a row or a dead letter of a declared class with a message."""
        both = landed.keys() & parked.keys()
        assert not both, f"landed and dead-lettered: {shown(records, both)}"
        lost = set(range(len(records))) - landed.keys() - parked.keys()
        assert not lost, f"neither landed nor dead-lettered: {shown(records, lost)}"
        assert len(landed) + len(parked) == len(records)
        undeclared = {i: c for i, (c, _) in parked.items() if c not in self.declared}
        assert not undeclared, f"classes {self.fmt.name} does not declare: {shown(records, undeclared)}"
        unexplained = [i for i, (_, message) in parked.items() if not message]
        assert not unexplained, f"dead letters without a message: {shown(records, unexplained)}"
        self.inputs += len(records)
        self.rss_growth = max(self.rss_growth, peak_rss_bytes() - self.rss_start)
        self.outcomes["row"] += len(landed)
        self.outcomes.update(c for c, _ in parked.values())
        assert self.rss_growth < RSS_GROWTH_BYTES, f"the driver's peak RSS grew {self.rss_growth >> 20} MiB"

    def summary(self) -> str:
        memory = f"driver peak {self.driver_peak >> 10} KiB, peak RSS +{self.rss_growth >> 20} MiB"
        return f"{self.inputs} inputs ({memory}), " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))


def shown(records: Sequence[Record], indexes: Any) -> str:
    """The first few of `records` at `indexes`, for a failure's message."""
    picked = sorted(indexes)[:5]
    return "; ".join(f"#{i} {records[i]!r}"[:300] for i in picked) + (" ..." if len(indexes) > 5 else "")


def peak_rss_bytes() -> int:
    """The driver process's peak resident set (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


@contextmanager
def fuzzed(
    spark: SparkSession, settings_: FormatSettings, tmp_path_factory: pytest.TempPathFactory, label: str
) -> Iterator[FuzzedFormat]:
    """The format of `settings_`, started on a table that is never written (only frames are made of it)."""
    target = FuzzedFormat(spark, payload_format(settings_), tmp_path_factory.mktemp(label) / "t")
    try:
        yield target
    finally:
        target.close()
        print(f"{label}: {target.summary()}")  # the counts, shown with `pytest -s`


@dataclass(frozen=True)
class Draw:
    """One example: the records Hypothesis drew, and the seed of the bulk mutator."""

    drawn: list[Record]
    seed: int
    bulk: int = BULK_INPUTS  # records the bulk mutator adds (an explicit example may want none)


def draws(values: st.SearchStrategy[bytes | None], keys: st.SearchStrategy[bytes | None] | None = None) -> Any:
    """Examples of `Draw`: up to 60 records of `values` and `keys` (none: no key), then a seed."""
    record = st.builds(
        Record, values, keys if keys is not None else st.none(), st.sampled_from((1, 1, 1, 2, MAX_DELIVERY_COUNT))
    )
    return st.builds(Draw, st.lists(record, max_size=60), st.integers(0, 2**32 - 1))


def batch_of(
    draw: Draw,
    seeds: Sequence[Record],
    value_of: Callable[[random.Random], bytes | None],
    key_of: Callable[[random.Random], bytes | None] = lambda rng: None,
) -> list[Record]:
    """The seeds untouched (they must land), the drawn records, then the bulk: `value_of` and `key_of`
    give each bulk record's value and key; now and then a tombstone or an exhausted delivery count."""
    rng = random.Random(draw.seed)
    records = [*seeds, *draw.drawn]
    for _ in range(draw.bulk):
        value = None if rng.random() < 0.01 else value_of(rng)
        deliveries = MAX_DELIVERY_COUNT if rng.random() < 0.01 else 1
        records.append(Record(value, key_of(rng), deliveries))
    return records


def assert_seeds_landed(outcome: Outcome, seeds: Sequence[Record]) -> None:
    missing = {i: outcome.parked.get(i) for i in range(len(seeds)) if i not in outcome.landed}
    assert not missing, f"valid records did not land: {missing}"


def decodes_as_utf8(data: bytes) -> bool:
    """Python's strict decoder as the oracle of valid UTF-8."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def framed(value: bytes | None) -> bool:
    """Whether `value` has a wire header (a tombstone counts as framed: it is judged elsewhere)."""
    return value is None or (len(value) >= 5 and value[0] == 0)


def judged_by_precheck(record: Record) -> bool:
    """Whether a check every format shares parks `record` before its format sees it."""
    return record.value is None or len(record.value) > MAX_VALUE_BYTES or record.deliveries >= MAX_DELIVERY_COUNT


# -- the wire header and the Protobuf decode, on the driver ------------------------------------------------


def reference_varint(data: bytes, at: int) -> tuple[int, int] | None:
    """A zigzag varint at `at` as the wire format reads it (at most ten bytes, 64 bits): (value, next)."""
    value = 0
    for k in range(10):
        if at + k >= len(data):
            return None
        byte = data[at + k]
        value |= (byte & 0x7F) << (7 * k)
        if byte < 0x80:
            value &= 2**64 - 1
            return (value >> 1) ^ -(value & 1), at + k + 1
    return None


def reference_header(value: bytes) -> tuple[bool, int, tuple[int, ...] | None, int]:
    """(framed, schema id, message indexes or None when unreadable, body start) of one value."""
    if len(value) < 5 or value[0] != 0:
        return False, -1, None, 0
    sid = int.from_bytes(value[1:5], "big")
    found = reference_varint(value, 5)
    if found is None or not 0 <= found[0] <= MAX_DEPTH:
        return True, sid, None, 0
    count, at = found
    indexes: list[int] = []
    for _ in range(count):
        index = reference_varint(value, at)
        if index is None or index[0] < 0:
            return True, sid, None, 0
        indexes.append(index[0])
        at = index[1]
    return True, sid, tuple(indexes) or (0,), at


def framed_header(sid: int, indexes: list[bytes], miscount: int, body: bytes) -> bytes:
    """A wire header of `indexes` (zigzag varints, or broken ones), its count off by `miscount`."""
    return header(sid) + zigzag(len(indexes) + miscount) + b"".join(indexes) + body


POSITION = st.integers(0, 20).map(zigzag)  # a message's position in its file
INDEX = st.one_of(POSITION, st.integers(-(2**63), 2**63 - 1).map(zigzag), st.sampled_from(BAD_VARINTS))
HEADER_LIKE = st.one_of(
    st.binary(max_size=24),
    st.binary(max_size=24).map(lambda rest: b"\x00" + rest),
    st.builds(
        framed_header,
        st.integers(0, 2**32 - 1),
        st.lists(POSITION, max_size=MAX_DEPTH + 2) | st.lists(INDEX, max_size=MAX_DEPTH + 2),
        st.sampled_from((0, 0, 0, 0, 1, -1, 2**40)),
        st.binary(max_size=8),
    ),
)


@DRIVER_ONLY
@given(values=st.lists(st.one_of(st.none(), HEADER_LIKE), min_size=20, max_size=100), cut=st.integers(0, 3))
def test_the_wire_header_reads_every_value_as_a_reference_parser_does(values: list[bytes | None], cut: int) -> None:
    """Framing, schema id, message indexes and body start of any bytes, also in a sliced and a chunked column."""
    column = pa.array([b"pad"] * cut + values, pa.binary()).slice(cut)  # an Arrow offset, as a filtered batch has
    chunked = pa.chunked_array([column.slice(0, len(values) // 2), column.slice(len(values) // 2)], pa.binary())
    for array in (column, chunked):
        headers, framing = message_headers(array), schema_ids(array)
        assert (framing.framed == headers.framed).all() and (framing.ids == headers.ids).all()
        for i, value in enumerate(values):
            if value is None:
                assert headers.framed[i] and headers.ids[i] == -1 and headers.indexes_ok[i]
                continue
            is_framed, sid, indexes, body_start = reference_header(value)
            assert (bool(headers.framed[i]), int(headers.ids[i])) == (is_framed, sid), value
            if not is_framed:
                continue
            assert bool(headers.indexes_ok[i]) == (indexes is not None), value
            if indexes is not None:
                depth = int(headers.depth[i])
                assert tuple(int(x) for x in headers.indexes[i, :depth]) == indexes, value
                assert int(headers.body_start[i]) == body_start, value
    readable = headers.framed & headers.indexes_ok
    keys, group_of = headers.message_keys(readable)
    assert len(group_of) == int(readable.sum()) and (len(keys) == 0 or group_of.max() < len(keys))


def event_writer() -> Writer:
    """shop.Event (tests.test_protobuf) as the decode's writer: its file after the Timestamp's."""
    file = event_class(1).DESCRIPTOR.file
    return Writer((timestamp_pb2.DESCRIPTOR.serialized_pb, file.serialized_pb), "shop.Event")


@DRIVER_ONLY
@given(
    draw=st.builds(Draw, st.lists(st.builds(Record, st.binary(max_size=40)), max_size=40), st.integers(0, 2**32 - 1))
)
def test_the_protobuf_decode_names_every_body_it_cannot_read(draw: Draw) -> None:
    """The Spark workers' decode (`decode_values`) on the driver: every value parsed or named, never raised."""
    writer = event_writer()
    shape = Shape({})
    assert shape.admit("shop.Event", [(c.name, c.type) for c in writer_schema(writer)], protobuf_spark_type) is None
    plan = DecodePlan({(7, (1,)): writer}, to_arrow_type(shape.spark_type(), timezone="UTC"))
    events = event_class(1)
    valid = [event(events, i).SerializeToString() for i in range(5)]
    rng = random.Random(draw.seed)
    values = [r.value for r in draw.drawn] + [
        header(7) + (b"\x02\x02" if rng.random() < 0.7 else message_indexes(rng)) + protobuf_body(rng, valid)
        for _ in range(40)
    ]
    values += [header(7) + b"\x02\x02" + v for v in valid]
    decoded = decode_values(plan, pa.array(values, pa.binary()))
    bad = decoded.field(BAD).to_pylist()
    classes = decoded.field(ERROR_CLASS).to_pylist()
    messages = decoded.field(ERROR_MESSAGE).to_pylist()
    parsed = decoded.field(PARSED)
    for i, value in enumerate(values):
        if bad[i]:
            assert classes[i] in ProtobufFormat.error_classes and messages[i], (value, classes[i])
        else:
            assert classes[i] is None and parsed[i].is_valid, value
    assert not any(bad[-len(valid) :]) and [p["id"] for p in parsed.to_pylist()[-len(valid) :]] == list(range(5))


# -- every format, one Spark job per batch -----------------------------------------------------------------


@pytest.mark.timeout(300)
def test_raw_values_all_land_as_they_were(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> None:
    seeds = [Record(b"raw value"), Record(b"")]
    with fuzzed(spark, RawSettings(max_value_bytes=MAX_VALUE_BYTES), tmp_path_factory, "raw") as target:

        @BATCHES
        @given(draw=draws(st.binary(max_size=128)))
        def batch(draw: Draw) -> None:
            records = batch_of(draw, seeds, random_bytes)
            outcome = target.land(records)
            assert_seeds_landed(outcome, seeds)
            for i, record in enumerate(records):
                if not judged_by_precheck(record):
                    assert outcome.landed[i]["value"] == record.value, record

        batch()


@pytest.mark.timeout(300)
def test_text_lands_exactly_the_valid_utf8(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> None:
    seeds = [Record("text é€😀".encode()), Record(b"")]
    with fuzzed(spark, TextSettings(max_value_bytes=MAX_VALUE_BYTES), tmp_path_factory, "text") as target:

        @BATCHES
        @given(draw=draws(st.one_of(st.binary(max_size=64), st.text().map(str.encode))))
        def batch(draw: Draw) -> None:
            records = batch_of(draw, seeds, lambda rng: text_like(rng) if rng.random() < 0.7 else random_bytes(rng))
            outcome = target.land(records)
            assert_seeds_landed(outcome, seeds)
            for i, record in enumerate(records):
                if judged_by_precheck(record):
                    continue
                assert record.value is not None
                if decodes_as_utf8(record.value):
                    assert outcome.landed[i]["value"] == record.value.decode(), record
                else:
                    assert outcome.parked[i][0] == "invalid_utf8", record

        batch()


def json_strategy() -> st.SearchStrategy[bytes]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    documents = st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    )
    objects = st.fixed_dictionaries(
        {}, optional={"id": documents, "user": documents, "amount": documents, "kind": documents}
    )
    return st.one_of(
        documents.map(lambda d: json.dumps(d).encode()),
        objects.map(lambda d: json.dumps(d).encode()),
        st.integers(1, 30_000).map(lambda depth: b"[" * depth + b"]" * depth),
        st.binary(max_size=64),
    )


# an object nested 999 deep (6 KB; the variant parse reads up to 1000): its diagnosis once overflowed
# the task thread's stack (`schema_of_variant`), which killed the JVM
DEEP_OBJECT = b'{"a":' * 999 + b"1" + b"}" * 999
JSON_EVENTS = [json.dumps(event_record(i), separators=(",", ":")).encode() for i in range(20)]


@pytest.mark.timeout(300)
def test_json_values_land_or_are_named(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> None:
    seeds = [Record(v) for v in JSON_EVENTS]
    fmt = JsonSettings(schema=EVENT_SCHEMA, required_fields=["id"], max_value_bytes=MAX_VALUE_BYTES)
    with fuzzed(spark, fmt, tmp_path_factory, "json") as target:

        @BATCHES
        @given(draw=draws(json_strategy()))
        @example(draw=Draw([Record(v) for v in (DEEP_OBJECT, b"[" * 999 + b"]" * 999, *NOT_OBJECTS)], 0, bulk=0))
        def batch(draw: Draw) -> None:
            records = batch_of(
                draw, seeds, lambda rng: json_like(rng, JSON_EVENTS) if rng.random() < 0.8 else rng.choice(JSON_EVENTS)
            )
            outcome = target.land(records)
            assert_seeds_landed(outcome, seeds)
            assert [outcome.landed[i]["id"] for i in range(len(seeds))] == list(range(20))
            for i, record in enumerate(records):
                if judged_by_precheck(record) or record.value is None:
                    continue
                if not decodes_as_utf8(record.value):
                    assert outcome.parked[i][0] == "invalid_utf8", record
                elif record.value in NOT_OBJECTS:
                    error_class, message = outcome.parked[i]
                    assert error_class == "schema_mismatch", record
                    assert message.startswith(f"the JSON value is {NOT_OBJECTS[record.value]}, "), message

        batch()


def debezium_events() -> list[bytes]:
    """Change events of the sample rows, plain and as the JSON converter wraps them ({schema, payload})."""
    out = []
    for i in range(10):
        change = {"before": None, "after": event_record(i), "op": "c", "source": {"table": "events"}, "ts_ms": 1}
        if i % 3 == 1:
            change = {"before": event_record(i), "after": None, "op": "d"}
        out.append(json.dumps({"schema": {"type": "struct"}, "payload": change} if i % 2 else change).encode())
    return out


@pytest.mark.timeout(300)
def test_debezium_events_land_or_are_named(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> None:
    events = debezium_events()
    seeds = [Record(v) for v in events]
    fmt = JsonSettings(schema=EVENT_SCHEMA, envelope="debezium", max_value_bytes=MAX_VALUE_BYTES)
    with fuzzed(spark, fmt, tmp_path_factory, "debezium") as target:

        @BATCHES
        @given(draw=draws(json_strategy()))
        def batch(draw: Draw) -> None:
            outcome = target.land(batch_of(draw, seeds, lambda rng: json_like(rng, events)))
            assert_seeds_landed(outcome, seeds)
            assert [outcome.landed[i]["op"] for i in range(len(seeds))] == [
                json.loads(e).get("payload", json.loads(e))["op"] for e in events
            ]

        batch()


# an Avro event body whose `user` declares 2 GB - 1 bytes: Avro's decoder once allocated that much
# before reading it, and the OutOfMemoryError killed the JVM
HUGE_STRING = zigzag(1) + zigzag(2**31 - 1) + b"u"


def registry_settings(registry: EmbeddedSchemaRegistry) -> RegistrySettings:
    return RegistrySettings(url=registry.url)


@functools.cache
def registered(url: str, schema_id: int) -> bool:
    """Whether the registry at `url` knows the schema id (asked once per id)."""
    try:
        with urllib.request.urlopen(f"{url}/schemas/ids/{schema_id}", timeout=10):
            return True
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise


def wire_draws(known: Sequence[int], body: st.SearchStrategy[bytes]) -> Any:
    """Drawn values around the wire header: known and unknown ids, headers cut short, noise."""
    ids = st.one_of(st.sampled_from([*known, *UNKNOWN_IDS]), st.integers(0, 2**32 - 1))
    return st.one_of(
        st.builds(lambda sid, b: header(sid) + b, ids, body),
        st.binary(max_size=5).map(lambda b: b"\x00" + b[:3]),
        st.binary(max_size=32),
    )


def mixed(rng: random.Random, good: Sequence[bytes], roll: float) -> bytes | None:
    """A wire format's stream: random bytes, a good value mutated (its header too), or a good value
    as it is (most of a stream is fine), by `roll`; None above 0.4: the format's own mutations."""
    if roll < 0.1:
        return random_bytes(rng)
    if roll < 0.2:
        return mutated(rng, rng.choice(good), good)
    if roll < 0.4:
        return rng.choice(good)
    return None


def assert_unframed_not_wire_format(records: Sequence[Record], outcome: Outcome) -> None:
    """A value without a Confluent header (the shared checks aside) is parked as `not_wire_format`."""
    for i, record in enumerate(records):
        if not judged_by_precheck(record) and not framed(record.value):
            assert outcome.parked[i][0] == "not_wire_format", record


def not_utf8_string(rng: random.Random, body: bytes, at: int) -> bytes | None:
    """`body` with the Avro string at `at` (its length, then its bytes) holding as many bytes that are
    not UTF-8: the body still decodes, its string is not UTF-8. None for an empty string."""
    found = reference_varint(body, at)
    assert found is not None
    length, start = found
    if length <= 0:
        return None
    broken = (rng.choice(INVALID_UTF8) * length)[:length]  # every prefix of each is invalid too
    return body[:start] + broken + body[start + length :]


def assert_landed_strings_are_utf8(outcome: Outcome) -> None:
    """Every string the batch landed is UTF-8 (Arrow's full validation checks each)."""
    for rows in {id(r.rows): r.rows for r in outcome.landed.values()}.values():
        for name in rows.column_names:
            if pa.types.is_string(rows.schema.field(name).type) or pa.types.is_struct(rows.schema.field(name).type):
                rows.column(name).validate(full=True)


@pytest.mark.timeout(300)
def test_avro_values_land_or_are_named(
    spark: SparkSession, registry: EmbeddedSchemaRegistry, tmp_path_factory: pytest.TempPathFactory
) -> None:
    subject = f"fuzz-avro-{random.Random().getrandbits(32):08x}"
    good = list(avro_values(registry.url, subject, EVENT_AVRO_SCHEMA, (event_record(i) for i in range(10))))
    good += list(
        avro_values(registry.url, subject, EVENT_AVRO_SCHEMA_V2, (event_record(i, region=True) for i in range(10, 20)))
    )
    changed = json.loads(EVENT_AVRO_SCHEMA)
    changed["fields"][2] = {"name": "amount", "type": "string"}  # the table's double turned string
    (incompatible,) = avro_values(
        registry.url, f"{subject}-changed", json.dumps(changed), [{**event_record(1), "amount": "1"}]
    )
    ids = sorted({struct.unpack(">I", v[1:5])[0] for v in [*good, incompatible]})
    assert len(ids) == 3
    bodies = [v[5:] for v in good]
    seeds = [Record(v) for v in good]
    not_utf8: set[bytes] = set()  # good values whose `user` string was given bytes that are not UTF-8
    fmt = AvroSettings(registry=registry_settings(registry), max_value_bytes=MAX_VALUE_BYTES)
    with fuzzed(spark, fmt, tmp_path_factory, "avro") as target:

        def value_of(rng: random.Random) -> bytes:
            roll = rng.random()
            if (value := mixed(rng, good, roll)) is not None:
                return value
            if roll < 0.45:  # a good value whose `user` (after the long `id`) is not UTF-8
                value = rng.choice(good)
                id_end = reference_varint(value, 5)
                assert id_end is not None
                broken = not_utf8_string(rng, value, id_end[1])
                if broken is not None:
                    not_utf8.add(broken)
                    return broken
            body = rng.choice(bodies)
            if roll < 0.5:  # a string's length huge, negative, or a varint that never ends
                body = zigzag(1) + rng.choice((zigzag(2**62), zigzag(-7), zigzag(2**31 - 1), *BAD_VARINTS)) + b"u"
            else:
                body = mutated(rng, body, bodies)
            return wire_value(rng, ids, body)

        @BATCHES
        @given(draw=draws(wire_draws(ids, st.binary(max_size=48))))
        @example(draw=Draw([Record(header(ids[0]) + HUGE_STRING), Record(header(ids[1]) + HUGE_STRING)], 0, bulk=0))
        def batch(draw: Draw) -> None:
            records = batch_of(draw, seeds, value_of)
            outcome = target.land(records)
            assert_seeds_landed(outcome, seeds)
            assert sorted(outcome.landed[i]["id"] for i in range(len(seeds))) == list(range(20))
            assert_unframed_not_wire_format(records, outcome)
            for i, record in enumerate(records):
                if judged_by_precheck(record) or not framed(record.value) or record.value is None:
                    continue
                # the session's registry holds other tests' schemas (and gives a schema it has seen its
                # old id), so only the registry can say an id is no one's
                if not registered(registry.url, struct.unpack(">I", record.value[1:5])[0]):
                    assert outcome.parked[i][0] == "unknown_schema_id", record
                if record.value in not_utf8:
                    assert outcome.parked[i] == ("invalid_utf8", "not valid UTF-8 in field user"), record
            assert_landed_strings_are_utf8(outcome)

        batch()


@pytest.mark.timeout(300)
def test_json_schema_values_land_or_are_named(
    spark: SparkSession, registry: EmbeddedSchemaRegistry, tmp_path_factory: pytest.TempPathFactory
) -> None:
    subject = f"fuzz-json-schema-{random.Random().getrandbits(32):08x}"
    good = list(json_values(registry.url, subject, EVENT_JSON_SCHEMA, (event_record(i) for i in range(20))))
    (avro_id_value,) = avro_values(registry.url, f"{subject}-avro", EVENT_AVRO_SCHEMA, [event_record(1)])
    ids = sorted({struct.unpack(">I", v[1:5])[0] for v in [*good, avro_id_value]})  # an Avro id: schema_incompatible
    assert len(ids) == 2
    documents = [v[5:] for v in good]
    seeds = [Record(v) for v in good]
    fmt = JsonSchemaSettings(registry=registry_settings(registry), max_value_bytes=MAX_VALUE_BYTES)
    with fuzzed(spark, fmt, tmp_path_factory, "json_schema") as target:

        def value_of(rng: random.Random) -> bytes:
            value = mixed(rng, good, rng.random())
            return value if value is not None else wire_value(rng, ids, json_like(rng, documents))

        @BATCHES
        @given(draw=draws(wire_draws(ids, json_strategy())))
        def batch(draw: Draw) -> None:
            records = batch_of(draw, seeds, value_of)
            outcome = target.land(records)
            assert_seeds_landed(outcome, seeds)
            assert_unframed_not_wire_format(records, outcome)

        batch()


@pytest.mark.timeout(300)
def test_protobuf_values_land_or_are_named(
    spark: SparkSession, registry: EmbeddedSchemaRegistry, tmp_path_factory: pytest.TempPathFactory
) -> None:
    subject = f"fuzz-protobuf-{random.Random().getrandbits(32):08x}"
    events = event_class(1)
    good = serialized(registry, subject, (event(events, i) for i in range(20)))
    (incompatible,) = serialized(registry, f"{subject}-changed", [event_class(1, FIELD.TYPE_STRING)(amount="1")])
    ids = sorted({struct.unpack(">I", v[1:5])[0] for v in [*good, incompatible]})
    assert len(ids) == 2
    bodies = [v[7:] for v in good]  # after the header and the indexes [1] (two bytes)
    assert all(v[5:7] == b"\x02\x02" for v in good)
    seeds = [Record(v) for v in good]
    fmt = ProtobufSettings(registry=registry_settings(registry), max_value_bytes=MAX_VALUE_BYTES)
    with fuzzed(spark, fmt, tmp_path_factory, "protobuf") as target:

        def value_of(rng: random.Random) -> bytes:
            roll = rng.random()
            if roll < 0.1:
                return random_bytes(rng)
            if roll < 0.2:
                return mutated(rng, rng.choice(good), good)
            if roll < 0.4:  # fine, or with fields a newer writer added
                return rng.choice(good) + (unknown_field(rng) if roll < 0.3 else b"")
            indexes = b"\x02\x02" if roll < 0.7 else message_indexes(rng)
            return wire_value(rng, ids, indexes + protobuf_body(rng, bodies))

        @BATCHES
        @given(draw=draws(wire_draws(ids, st.binary(max_size=48).map(lambda b: b"\x02\x02" + b))))
        def batch(draw: Draw) -> None:
            records = batch_of(draw, seeds, value_of)
            outcome = target.land(records)
            assert_seeds_landed(outcome, seeds)
            assert sorted(outcome.landed[i]["id"] for i in range(len(seeds))) == list(range(20))
            assert_unframed_not_wire_format(records, outcome)

        batch()


@pytest.mark.timeout(300)
def test_text_keys_land_or_are_named(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> None:
    seeds = [Record(b"v", key=b"key"), Record(b"v", key=None), Record(b"v", key="ключ".encode())]
    fmt = RawSettings(key_format="text", max_value_bytes=MAX_VALUE_BYTES)
    with fuzzed(spark, fmt, tmp_path_factory, "text_keys") as target:

        @BATCHES
        @given(draw=draws(st.binary(max_size=8), st.none() | st.binary(max_size=32)))
        def batch(draw: Draw) -> None:
            records = batch_of(
                draw, seeds, lambda rng: b"value", lambda rng: None if rng.random() < 0.05 else text_like(rng)
            )
            outcome = target.land(records)
            assert_seeds_landed(outcome, seeds)
            for i, record in enumerate(records):
                if judged_by_precheck(record):
                    continue
                if record.key is None or decodes_as_utf8(record.key):
                    expected = None if record.key is None else record.key.decode()
                    assert outcome.landed[i]["key"] == expected, record
                else:
                    assert outcome.parked[i][0] == "key_invalid_utf8", record

        batch()


@pytest.mark.timeout(300)
def test_avro_keys_land_or_are_named(
    spark: SparkSession, registry: EmbeddedSchemaRegistry, tmp_path_factory: pytest.TempPathFactory
) -> None:
    subject = f"fuzz-avro-keys-{random.Random().getrandbits(32):08x}"
    values = list(avro_values(registry.url, subject, EVENT_AVRO_SCHEMA, (event_record(i) for i in range(10))))
    keys = list(avro_keys(registry.url, subject, KEY_SCHEMA, ({"customer": f"c{i}"} for i in range(10))))
    key_ids = sorted({struct.unpack(">I", k[1:5])[0] for k in keys})
    key_bodies = [k[5:] for k in keys]
    seeds = [Record(v, key=k) for v, k in zip(values, keys, strict=True)] + [Record(values[0], key=None)]
    not_utf8: set[bytes] = set()  # good keys whose `customer` string was given bytes that are not UTF-8
    fmt = AvroSettings(registry=registry_settings(registry), key_format="avro", max_value_bytes=MAX_VALUE_BYTES)
    with fuzzed(spark, fmt, tmp_path_factory, "avro_keys") as target:

        def key_of(rng: random.Random) -> bytes | None:
            roll = rng.random()
            if roll < 0.05:
                return None
            if roll < 0.15:
                return random_bytes(rng)
            if roll < 0.25:  # a good key whose `customer` string is not UTF-8
                broken = not_utf8_string(rng, rng.choice(keys), 5)
                assert broken is not None
                not_utf8.add(broken)
                return broken
            return wire_value(rng, key_ids, mutated(rng, rng.choice(key_bodies), key_bodies))

        def value_of(rng: random.Random) -> bytes:
            return rng.choice(values) if rng.random() < 0.9 else mutated(rng, rng.choice(values), values)

        @BATCHES
        @given(draw=draws(st.sampled_from(values), wire_draws(key_ids, st.binary(max_size=24))))
        def batch(draw: Draw) -> None:
            records = batch_of(draw, seeds, value_of, key_of)
            outcome = target.land(records)
            assert_seeds_landed(outcome, seeds)
            landed_keys = [outcome.landed[i]["key"] for i in range(len(seeds))]
            assert landed_keys == [{"customer": f"c{i}"} for i in range(10)] + [None]
            for i, record in enumerate(records):
                if judged_by_precheck(record) or record.value not in values:
                    continue
                if not framed(record.key):
                    assert outcome.parked[i][0] == "key_not_wire_format", record
                if record.key in not_utf8:
                    assert outcome.parked[i] == ("key_invalid_utf8", "the key: not valid UTF-8 in field customer")
            assert_landed_strings_are_utf8(outcome)

        batch()
