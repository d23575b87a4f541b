"""The group's lag and members for Prometheus: the group's state asked for on a timer, in its own thread.

Runs only when the metrics endpoint is on (`metrics.prometheus_port`), for either group type: every
`metrics.lag_interval_s` it asks a `StateReader` it opens in its own thread (the one place a group's
state is read, `sharelake.consume.group_state.GroupStateReader`: a share group's lag through the Java
Admin, a consumer group's committed offsets against the end offsets through librdkafka's admin), and the endpoint
(`sharelake.observe.metrics`) serves the last answer
(`sharelake_group_lag{topic,partition}`, `sharelake_group_members`, and when it was read). The
broker's lag is the group's, whichever jobs serve it. A failed read (the broker or
the coordinator away) is one log line and the last answer stays, its timestamp telling its age:
an admin outage never stops or slows the job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sharelake.failures.errors import one_line

log = logging.getLogger(__name__)


class PartitionLag(Protocol):
    """One partition's lag as the group type reports it."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def lag(self) -> int | None: ...


class GroupView(Protocol):
    """What the gauge reads of a group's state."""

    @property
    def members(self) -> Sized: ...
    @property
    def partitions(self) -> Sequence[PartitionLag]: ...


class StateReader(Protocol):
    """Reads the group's state; made and closed in the lag thread."""

    def read(self) -> GroupView: ...
    def close(self) -> None: ...


class GroupLag(Collector):
    """A thread that reads the group's state every `interval_s`; a Prometheus collector of the last one."""

    def __init__(self, open_reader: Callable[[], StateReader], topics: Iterable[str], interval_s: float):
        self._open_reader = open_reader
        self._topics = set(topics)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._state: GroupView | None = None
        self._read_at = 0.0
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="group-lag", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        reader = self._open_reader()  # its clients made on first use, in this thread
        try:
            while not self._stop.is_set():
                try:
                    self._state = reader.read()
                    self._read_at = time.time()
                    if self._failing:
                        log.info("the group's lag is read again")
                    self._failing = False
                except Exception as e:  # noqa: BLE001 - an admin outage is a log line, never the job's failure
                    if not self._failing:
                        log.warning("the group's lag could not be read (kept the last): %s", one_line(e))
                    self._failing = True
                self._stop.wait(self._interval_s)
        finally:
            try:
                reader.close()
            except Exception as e:  # noqa: BLE001 - the JVM may be stopping
                log.info("the lag reader's admin client did not close: %s", one_line(e))

    def collect(self) -> Iterator[Metric]:
        state = self._state
        if state is None:
            return
        lag = GaugeMetricFamily(
            "sharelake_group_lag",
            "the group's lag per partition: a share group's records not yet delivered to completion (the "
            "broker's), a consumer group's records after its committed offset (to the end offset)",
            labels=["topic", "partition"],
        )
        for p in state.partitions:
            if p.topic in self._topics and p.lag is not None:
                lag.add_metric([p.topic, str(p.partition)], p.lag)
        yield lag
        yield GaugeMetricFamily("sharelake_group_members", "members of the group (all jobs)", value=len(state.members))
        yield GaugeMetricFamily(
            "sharelake_group_lag_read_timestamp_seconds", "when the group's lag was last read", value=self._read_at
        )
