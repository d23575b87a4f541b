"""`SyntheticRecord`: a polled record made up in the process instead of polled from a broker.

It has the parts of `confluent_kafka.Message` that Sharelake reads from a polled record: what
becomes a row (`sharelake.bridge.arrow_rows.PolledRecord`: topic, partition, offset, key, value, headers,
timestamp, delivery count), what the record lifecycle names in its errors
(`sharelake.acknowledge.lifecycle`) and `error()`, always None. The write-path warm-up
(`sharelake.sink.batch.warm_up`) runs the real sink on such records, and the tests use them where a test needs
records but no broker (the lifecycle's state machine, two sinks racing on one table). Records for a
broker are produced to it (`devkit.sample_data`).
"""

from __future__ import annotations

from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE


class SyntheticRecord:
    """One record at `topic`/`partition`@`offset`, with its key, value, headers (a list of
    `(key, value)` pairs, or None), create time in epoch milliseconds (None: not available) and
    delivery count, each returned by the method of `confluent_kafka.Message` of the same name."""

    __slots__ = ("_delivery_count", "_headers", "_key", "_offset", "_partition", "_timestamp_ms", "_topic", "_value")

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
        delivery_count: int = 1,
    ):
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value, self._headers = key, value, headers
        self._timestamp_ms, self._delivery_count = timestamp_ms, delivery_count

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        if self._timestamp_ms is None:
            return (TIMESTAMP_NOT_AVAILABLE, -1)
        return (TIMESTAMP_CREATE_TIME, self._timestamp_ms)

    def delivery_count(self) -> int:
        return self._delivery_count

    def error(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"SyntheticRecord({self._topic}/{self._partition}@{self._offset})"
