"""Progress and metrics: one log line per micro-batch, and the same counters for Prometheus.

Wired by `app.pipeline`. The counters live where the work happens (members, sink, buffer); this
module only reads them:

- `ProgressListener`, a Spark `StreamingQueryListener`: Spark calls it in the driver after each
  micro-batch has been committed to the streaming checkpoint. It logs what changed since the last
  batch. It is for observing only: acknowledgements never depend on it (the sink decides records
  inside foreachBatch, right after the Delta commit).
- `serve_metrics`: an optional Prometheus endpoint (prometheus_client) whose collector reads the
  same snapshot at every scrape, so a scrape is never stale and never double counts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pyspark.sql.streaming import StreamingQueryListener

from app.sink.delta_sink import PHASES  # Snapshot.<phase>_s

log = logging.getLogger("sharelake.progress")


@dataclass(frozen=True)
class Snapshot:
    """Counters since the run started, and gauges now."""

    records_in: int  # records the sink drained into micro-batches
    polled: int
    accepted: int
    released: int
    rejected: int
    expired_locks: int  # acknowledgements the broker refused (the record lock had expired)
    dedup_hits: int
    dead_lettered: int
    delta_commits: int
    rows_written: int
    late_accepts: int
    members_active: int
    buffer_records: int
    buffer_capacity: int
    # seconds the sink spent per step (app.sink.delta_sink.PHASES), summed since the start
    phase_s: dict[str, float] = field(default_factory=dict)


COUNTERS = {
    "records_in": "records drained from the buffer into micro-batches",
    "polled": "records polled from the share group",
    "accepted": "records ACCEPTed",
    "released": "records RELEASEd (failed writes, stops)",
    "rejected": "records REJECTed (after landing in the dead-letter table)",
    "expired_locks": "acknowledgements refused by the broker (record lock expired)",
    "dedup_hits": "redelivered records already in the table, ACCEPTed without a write",
    "dead_lettered": "records written to the dead-letter table",
    "delta_commits": "Delta commits to the main table",
    "rows_written": "rows written to the main table",
    "late_accepts": "records ACCEPTed after their lock duration",
}
GAUGES = {
    "members_active": "share-group members polling",
    "buffer_records": "records waiting in the buffer",
    "buffer_capacity": "the buffer's bound (pump.buffer_max_records)",
}


# Spark's own steps of a micro-batch (StreamingQueryProgress.durationMs) besides foreachBatch
# (`addBatch`): the trigger clock's offset log (walCommit), its commit log (commitOffsets), ...
SPARK_STEPS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "commitOffsets")


class ProgressListener(StreamingQueryListener):  # type: ignore[misc]
    def __init__(
        self,
        query_name: str,
        snapshot: Callable[[], Snapshot],
        cycle: Callable[[int], dict[str, float] | None] = lambda batch_id: None,
    ):
        self.query_name = query_name
        self._snapshot = snapshot
        self._cycle = cycle  # the sink's seconds per step of a batch id
        self._last = snapshot()

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if progress.name != self.query_name:
            return
        now = self._snapshot()
        d = {k: v - getattr(self._last, k) for k, v in asdict(now).items() if k != "phase_s"}
        self._last = now
        if not d["records_in"] and not d["accepted"] and not d["released"] and not d["rejected"]:
            return  # an empty tick of the trigger clock
        durations = dict(progress.durationMs or {})
        duration = durations.get("triggerExecution", 0)
        fill = 100 * now.buffer_records / max(1, now.buffer_capacity)
        steps = self._cycle(progress.batchId) or {}
        sink_ms = " ".join(f"{k}={1000 * v:.0f}" for k, v in steps.items())
        spark_ms = " ".join(f"{k}={durations.get(k, 0)}" for k in SPARK_STEPS)
        log.info(
            "batch %d: in=%d accepted=%d released=%d rejected=%d dedup_hits=%d expired_locks=%d "
            "duration_ms=%d members=%d buffer=%d (%.0f%%) total_accepted=%d | sink_ms %s | spark_ms %s",
            progress.batchId,
            d["records_in"],
            d["accepted"],
            d["released"],
            d["rejected"],
            d["dedup_hits"],
            d["expired_locks"],
            duration,
            now.members_active,
            now.buffer_records,
            fill,
            now.accepted,
            sink_ms,
            spark_ms,
        )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


class _SnapshotCollector(Collector):
    def __init__(self, snapshot: Callable[[], Snapshot]):
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        for name, doc in COUNTERS.items():
            yield CounterMetricFamily(f"sharelake_{name}", doc, value=getattr(s, name))
        for name, doc in GAUGES.items():
            yield GaugeMetricFamily(f"sharelake_{name}", doc, value=getattr(s, name))
        phases = CounterMetricFamily(
            "sharelake_sink_phase_seconds", "seconds the sink spent per step of its micro-batches", labels=["phase"]
        )
        for phase in PHASES:
            phases.add_metric([phase], s.phase_s.get(phase, 0.0))
        yield phases
        yield GaugeMetricFamily("sharelake_scrape_timestamp_seconds", "when this scrape was taken", value=time.time())


def serve_metrics(port: int, addr: str, snapshot: Callable[[], Snapshot]) -> Callable[[], None]:
    """Serve the snapshot on http://addr:port/metrics; returns the function that stops the server."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snapshot))
    server, thread = start_http_server(port, addr=addr, registry=registry)
    log.info("Prometheus metrics on http://%s:%d/metrics", addr, port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop
