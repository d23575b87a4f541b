"""Progress and metrics: one log line per micro-batch, and the same counters for Prometheus.

The counters are kept where the work happens (members, sink, tables, the pool) and declared once with
`sharelake.observe.counters`; this module reads them through a function that returns their owners (`Owners`), and
`sharelake.observe.counters.collect` / `catalogue`:

- `ProgressListener`, a Spark `StreamingQueryListener`: Spark calls it in the driver after each
  micro-batch has been committed to the streaming checkpoint. It logs what changed since the last
  batch, with that batch's step times (an empty tick of the trigger clock logs nothing). It is for observing
  only: acknowledgements never depend on it (the sink decides records inside foreachBatch, right after the Delta
  commit).
- `serve_metrics`: an optional Prometheus endpoint (prometheus_client) whose collector reads the
  owners at every scrape, so a scrape is never stale and never double counts. Every declared
  counter is `sharelake_<name>_total`, every gauge `sharelake_<name>`, a dict-valued counter (seconds per sink
  step, dead letters per error class) one labelled family; more collectors (the group's lag) are served beside.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pyspark.sql.streaming import StreamingQueryListener

from sharelake.observe.counters import catalogue, collect

Owners = Callable[[], list[Any]]  # the stats objects of the run's members, sink, tables and pool

log = logging.getLogger("sharelake.progress")


# Spark's own steps of a micro-batch (StreamingQueryProgress.durationMs) besides foreachBatch
# (`addBatch`): the trigger clock's offset log (walCommit), its commit log (commitOffsets), ...
SPARK_STEPS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "commitOffsets")


class ProgressListener(StreamingQueryListener):  # type: ignore[misc]
    def __init__(
        self,
        query_name: str,
        owners: Owners,
        batch_report: Callable[[int], tuple[int, dict[str, float]] | None] = lambda batch_id: None,
    ):
        self.query_name = query_name
        self._owners = owners
        self._batch_report = batch_report  # the sink's (records drained, seconds per step) of a batch id
        self._last = collect(owners())
        self._closed = False

    def close(self) -> None:
        """No more lines: Spark's listener bus may still deliver an event it took before the removal."""
        self._closed = True

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if self._closed or progress.name != self.query_name:
            return
        now = collect(self._owners())
        d = {k: v - self._last.get(k, 0) for k, v in now.items() if not isinstance(v, dict)}
        self._last = now
        report = self._batch_report(progress.batchId)
        records_in, steps = report if report is not None else (d["records_in"], {})
        if not records_in and not d["accepted"] and not d["released"] and not d["rejected"]:
            return  # an empty tick of the trigger clock (nothing drained, nothing decided since the last line)
        durations = dict(progress.durationMs or {})
        duration = durations.get("triggerExecution", 0)
        fill = 100 * now["buffer_records"] / max(1, now["buffer_capacity"])
        sink_ms = " ".join(f"{k}={1000 * v:.0f}" for k, v in steps.items())
        spark_ms = " ".join(f"{k}={durations.get(k, 0)}" for k in SPARK_STEPS)
        log.info(
            "batch %d: in=%d accepted=%d released=%d rejected=%d dedup_hits=%d expired_locks=%d "
            "duration_ms=%d members=%d buffer=%d (%.0f%%) total_accepted=%d | sink_ms %s | spark_ms %s",
            progress.batchId,
            records_in,
            d["accepted"],
            d["released"],
            d["rejected"],
            d["dedup_hits"],
            d["ack_errors"],
            duration,
            now["members_active"],
            now["buffer_records"],
            fill,
            now["accepted"],
            sink_ms,
            spark_ms,
        )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


class _CountersCollector(Collector):
    def __init__(self, owners: Owners):
        self._owners = owners

    def collect(self) -> Iterator[Metric]:
        for d in catalogue(self._owners()).values():
            if d.prometheus is None:
                continue
            name = f"sharelake_{d.prometheus}"
            if isinstance(d.value, dict):  # seconds per sink step, dead letters per class: one labelled family
                family = CounterMetricFamily(name, d.doc, labels=[d.label])
                for label, value in d.value.items():
                    family.add_metric([label], value)
                yield family
            elif d.kind == "counter":
                yield CounterMetricFamily(name, d.doc, value=d.value)
            else:
                yield GaugeMetricFamily(name, d.doc, value=d.value)
        yield GaugeMetricFamily("sharelake_scrape_timestamp_seconds", "when this scrape was taken", value=time.time())


def scrape_host(addr: str) -> str:
    """The host a scraper dials for an endpoint listening on `addr`, when it listens on every address:
    in a Kubernetes pod its own address (a pod's name resolves nowhere but inside the pod), else this
    machine's name (a driver in a YARN container is found by its node's name)."""
    if addr not in ("0.0.0.0", "::", ""):
        return addr
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return socket.gethostbyname(socket.gethostname())  # the pod's /etc/hosts maps its name to its IP
    return socket.getfqdn()


def serve_metrics(port: int, addr: str, owners: Owners, *more: Collector) -> Callable[[], None]:
    """Serve the counters (and `more` collectors: the group's lag) on http://addr:port/metrics;
    returns the function that stops the server."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_CountersCollector(owners))
    for collector in more:
        registry.register(collector)
    server, thread = start_http_server(port, addr=addr, registry=registry)
    log.info("Prometheus metrics on http://%s:%d/metrics", scrape_host(addr), port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop
