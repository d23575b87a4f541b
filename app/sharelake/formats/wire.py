"""The Confluent wire format, read once for every format that uses it: the header of every value.

A value is laid out as the magic byte 0, a 4-byte big-endian schema id, for Protobuf only the
message indexes (a zigzag varint count, then that many zigzag varints: the path to the message type
in the schema's file, e.g. [1] for its second top-level message, [1, 0] for the first message nested
in it; [0] alone is written as the single byte 0), then the body.

`schema_ids` reads each value's magic byte and schema id; `message_headers` the message indexes too (deeper than
`MAX_DEPTH` is refused) and where each body starts. Both need no Spark: they give a batch's verdicts on the
driver, and `message_headers` finds each body in a Python worker too. Everything runs in numpy over the Arrow buffers
of the value column: the loops go over byte positions (at most ten per varint) and index depth, never over
records. A null value counts as framed (it is judged elsewhere). `schema_id_column` and `body_column` read the
same header in Spark, where a format's decode needs it per row; `header` writes one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql import Column
from pyspark.sql import functions as F

MAGIC = 0
ID_BYTES = 5  # magic byte + 4-byte big-endian schema id
MAX_DEPTH = 8  # message indexes deeper than this are refused (bad_message_index)
VARINT_BYTES = 10
NOT_WIRE_FORMAT = "not in the Confluent wire format (shorter than 5 bytes, or magic byte not 0)"


def header(schema_id: int) -> bytes:
    """The wire-format header of a value of `schema_id` (without Protobuf's message indexes)."""
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big")


@dataclass(frozen=True)
class Framing:
    """The magic byte and schema id of each value of a batch (arrays of the batch's length)."""

    framed: npt.NDArray[np.bool_]  # magic byte 0 and a 4-byte id present (null values count as framed)
    ids: npt.NDArray[np.int64]  # the schema id, -1 where not framed or null


@dataclass(frozen=True)
class Headers(Framing):
    """`Framing` plus Protobuf's message indexes and where each body starts."""

    indexes_ok: npt.NDArray[np.bool_]  # the message indexes read (false: truncated, negative, too deep)
    depth: npt.NDArray[np.int64]  # how many message indexes
    indexes: npt.NDArray[np.int64]  # (n, MAX_DEPTH): the indexes, 0 past `depth`
    body_start: npt.NDArray[np.int64]  # offset of the body within the value

    def message_keys(self, rows: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The distinct (schema id, depth, indexes..., body start) of `rows`, each row's position among them.

        Column by column (1-d `np.unique`, then the codes made dense again so they stay below the
        row count): `np.unique(axis=0)` sorts the rows as opaque bytes, a hundred times slower."""
        depth = int(self.depth[rows].max()) if rows.any() else 0
        columns = [self.ids, self.depth, *self.indexes.T[:depth], self.body_start]
        code = np.zeros(int(rows.sum()), dtype=np.int64)
        for column in columns:
            values, of_row = np.unique(column[rows], return_inverse=True)
            code = code * len(values) + of_row.reshape(-1)
            _, code = np.unique(code, return_inverse=True)
            code = code.reshape(-1)
        if code.size == 0:
            return np.zeros((0, 3 + MAX_DEPTH), np.int64), code
        _, first = np.unique(code, return_index=True)
        keys = np.column_stack([self.ids, self.depth, self.indexes, self.body_start])[rows][first]
        return keys, code


def message_path(key: npt.NDArray[np.int64]) -> tuple[int, tuple[int, ...], int]:
    """(schema id, message indexes, body start) of one row of `Headers.message_keys`."""
    depth = int(key[1])
    return int(key[0]), tuple(int(i) for i in key[2 : 2 + depth]), int(key[-1])


@dataclass(frozen=True)
class _Layout:
    """The Arrow buffers of a binary column, with the framing read from them."""

    valid: npt.NDArray[np.bool_]
    starts: npt.NDArray[np.int64]
    ends: npt.NDArray[np.int64]
    data: npt.NDArray[np.uint8]
    framed: npt.NDArray[np.bool_]  # valid values only
    ids: npt.NDArray[np.int64]


def _layout(values: pa.Array | pa.ChunkedArray) -> _Layout:
    """The magic byte and schema id of every value, straight from the Arrow buffers."""
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    n = len(arr)
    valid = arr.is_valid().to_numpy(zero_copy_only=False) if n else np.ones(0, np.bool_)
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32)[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    ids = np.full(n, -1, dtype=np.int64)
    framed = valid & (ends - starts >= ID_BYTES)
    framed[framed] = data[starts[framed]] == MAGIC
    at = starts[framed]
    b = [data[at + k].astype(np.int64) for k in range(1, ID_BYTES)]
    ids[framed] = (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]
    return _Layout(valid, starts, ends, data, framed, ids)


def schema_ids(values: pa.Array | pa.ChunkedArray) -> Framing:
    """Per value: whether it has a wire-format header, and its schema id (-1 if not).

    Null values count as framed (they are judged elsewhere) with id -1."""
    layout = _layout(values)
    return Framing(layout.framed | ~layout.valid, layout.ids)


def message_headers(values: pa.Array | pa.ChunkedArray) -> Headers:
    """The header of every Protobuf value: framing, schema id, message indexes and where the body starts."""
    layout = _layout(values)
    valid, starts, ends, data, framed = layout.valid, layout.starts, layout.ends, layout.data, layout.framed
    n = len(valid)
    count, pos, ok = _varints(data, starts + ID_BYTES, ends, framed)
    ok &= (count >= 0) & (count <= MAX_DEPTH)
    count = np.where(ok, count, 0)
    # the single byte 0 (a count of zero) stands for [0]
    depth = np.where(ok & (count == 0), 1, count)
    indexes = np.zeros((n, MAX_DEPTH), dtype=np.int64)
    for j in range(int(count.max()) if n else 0):
        reading = ok & (count > j)
        index, after, whole = _varints(data, pos, ends, reading)
        bad = reading & (~whole | (index < 0))
        ok &= ~bad
        indexes[reading & ~bad, j] = index[reading & ~bad]
        pos = np.where(reading, after, pos)
    return Headers(framed | ~valid, layout.ids, ok | ~valid, np.where(ok, depth, 0), indexes, pos - starts)


def _varints(
    data: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], end: npt.NDArray[np.int64], active: npt.NDArray[np.bool_]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """One zigzag varint at `at` of each `active` row: (value, offset after it, whether it was whole)."""
    n = len(at)
    value = np.zeros(n, dtype=np.uint64)
    length = np.zeros(n, dtype=np.int64)
    done = ~active
    ok = np.zeros(n, dtype=np.bool_)
    for k in range(VARINT_BYTES):
        reading = ~done & (at + k < end)
        done = done | (~done & ~reading)  # ran out of bytes: not whole
        if not reading.any():
            break
        byte = data[at[reading] + k].astype(np.uint64)
        value[reading] |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
        last = np.zeros(n, dtype=np.bool_)
        last[reading] = byte < 0x80
        ok |= last
        length[last] = k + 1
        done = done | last
    raw = value.astype(np.int64)
    decoded = (value >> np.uint64(1)).astype(np.int64) ^ -(raw & 1)
    return decoded, at + length, ok & active


def schema_id_column(column: str) -> Column:
    """The schema id of a wire-format value of `column`, in Spark (bytes 2-5, big-endian)."""
    return F.conv(F.hex(F.substring(F.col(column), 2, 4)), 16, 10).cast("long")


def body_column(column: str) -> Column:
    """The body of a wire-format value of `column` (no message indexes), in Spark: the bytes after the header."""
    return F.expr(f"substring({column}, {ID_BYTES + 1})")
