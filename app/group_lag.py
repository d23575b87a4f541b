"""The share group's lag and members for Prometheus: read through the Java Admin on a timer, in its own thread.

Started by `app.pipeline` only when the metrics endpoint is on (`metrics.prometheus_port`); it
reads `app.group_status.read_group_state` every `metrics.lag_interval_s` and the endpoint serves
the last answer (`sharelake_group_lag{topic,partition}`, `sharelake_group_members`, and when it
was read). The broker's lag is the group's, whichever jobs serve it. A failed read (the broker or
the coordinator away) is one log line and the last answer stays, its timestamp telling its age:
an admin outage never stops or slows the job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pyspark.sql import SparkSession

from app.error_lines import one_line
from app.group_status import GroupState, read_group_state
from app.java_admin import close_admin, create_admin

log = logging.getLogger(__name__)


class GroupLag(Collector):
    """A thread that reads the group's state every `interval_s`; a Prometheus collector of the last one."""

    def __init__(
        self, spark: SparkSession, client: dict[str, Any], group_id: str, topics: list[str], interval_s: float
    ):
        self._spark = spark
        self._client = client
        self._group_id = group_id
        self._topics = set(topics)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._state: GroupState | None = None
        self._read_at = 0.0
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="group-lag", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        admin = None
        try:
            while not self._stop.is_set():
                try:
                    if admin is None:
                        admin = create_admin(self._spark, self._client)
                    self._state = read_group_state(self._spark, admin, self._group_id)
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
            if admin is not None:
                try:
                    close_admin(self._spark, admin)
                except Exception as e:  # noqa: BLE001 - the JVM may be stopping
                    log.info("the lag reader's admin client did not close: %s", one_line(e))

    def collect(self) -> Iterator[Metric]:
        state = self._state
        if state is None:
            return
        lag = GaugeMetricFamily(
            "sharelake_group_lag",
            "records of the share partition not yet delivered to completion (the broker's lag)",
            labels=["topic", "partition"],
        )
        for p in state.partitions:
            if p.topic in self._topics and p.lag is not None:
                lag.add_metric([p.topic, str(p.partition)], p.lag)
        yield lag
        yield GaugeMetricFamily(
            "sharelake_group_members", "members of the share group (all jobs)", value=len(state.members)
        )
        yield GaugeMetricFamily(
            "sharelake_group_lag_read_timestamp_seconds", "when the group's lag was last read", value=self._read_at
        )
