"""docs/monitoring/ against a real Prometheus: the alert rules and their unit tests pass promtool, and
every dashboard panel query and every alert expression runs on the series of a real job.

A query over a series the job does not serve parses and returns nothing: that is the defect the
second test catches (each panel query must return a series; each alert's selectors must match one).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from pyspark.sql import SparkSession

from devkit.sample_data import POISON_VALUES, produce_json_events, produce_poison_records
from sharelake.run.pipeline import RunSummary, run_ingest
from sharelake.testing.kafka_broker import EmbeddedKafka, free_port
from tests.ingest_config import ingest_config
from tests.prometheus_server import PROMTOOL, PrometheusServer
from tests.waiting import wait_for

DOCS = Path(__file__).resolve().parent.parent / "docs" / "monitoring"
ALERTS = DOCS / "alerts.yml"
# Grafana's template variables, as Grafana fills them: the scrape job picked, a rate window
TEMPLATE = {"$__rate_interval": "1m", "${job}": "sharelake", "$job": "sharelake"}
JSON = ("payload.format=json", "payload.schema=id long, user string, amount double, kind string")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROMTOOL), *args], cwd=DOCS, capture_output=True, text=True, timeout=60)


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


def test_the_alert_rules_pass_promtool_and_each_fires_and_clears_in_its_unit_tests() -> None:
    checked = promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    example = promtool("check", "config", "prometheus.yml")
    assert example.returncode == 0, example.stdout + example.stderr
    tested = promtool("test", "rules", "alerts_test.yml")
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    # promtool fails a test whose expected alerts do not fire (or fire when none is expected):
    # each alert must have an evaluation expecting it and a later one expecting it gone
    evals: dict[str, list[tuple[str, bool]]] = {}
    for case in yaml.safe_load((DOCS / "alerts_test.yml").read_text())["tests"]:
        for e in case["alert_rule_test"]:
            evals.setdefault(e["alertname"], []).append((e["eval_time"], bool(e["exp_alerts"])))
    for rule in alert_rules():
        seen = evals.get(rule["alert"], [])
        assert any(fires for _, fires in seen), f"{rule['alert']}: no unit test expects it to fire"
        firing_at = min(_minutes(t) for t, fires in seen if fires)
        assert any(not fires and _minutes(t) > firing_at for t, fires in seen), f"{rule['alert']}: never clears"


def _minutes(duration: str) -> int:
    return int(duration.removesuffix("m"))


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory, metrics_port: int) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping the job's endpoint every second and evaluating alerts.yml."""
    server = PrometheusServer(tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{metrics_port}"], (ALERTS,))
    server.start()
    yield server
    server.stop()


MIN_SAMPLES = 'min(count_over_time(sharelake_polled_total{job="sharelake"}[1m]))'


def value(server: PrometheusServer, expr: str) -> float | None:
    result = server.query(expr)
    return float(result[0]["value"][1]) if result else None


def substituted(expr: str) -> str:
    for name, filled in TEMPLATE.items():
        expr = expr.replace(name, filled)
    assert "$" not in expr, f"a template variable the test does not fill: {expr}"
    return expr


def selectors(expr: str) -> list[str]:
    """The vector selectors of a PromQL expression, each as `name{matchers}`."""
    found: list[str] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(f"{node.name or ''}{node.matchers}")

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def test_every_dashboard_query_and_alert_expression_runs_on_a_real_jobs_series(
    broker: EmbeddedKafka,
    spark: SparkSession,
    prometheus: PrometheusServer,
    metrics_port: int,
    tmp_path: Path,
    unique: str,
) -> None:
    topic, group = f"monitoring-{unique}", f"sharelake-{unique}"
    broker.create_topic(topic, partitions=3)
    produce_json_events(broker.bootstrap, topic, 2000)
    produce_poison_records(broker.bootstrap, topic)
    cfg = ingest_config(
        broker,
        topic,
        group,
        tmp_path / "table",
        *JSON,
        "run.mode=continuous",
        f"metrics.prometheus_port={metrics_port}",
        "metrics.prometheus_addr=127.0.0.1",
        "metrics.lag_interval_s=1",
    )
    stop, ran = threading.Event(), list[RunSummary]()
    job = threading.Thread(target=lambda: ran.append(run_ingest(spark, cfg, stop_event=stop)), name="monitored-job")
    job.start()
    try:
        # scraped after every record landed or was dead-lettered, and after the lag reader caught up
        poison = len(POISON_VALUES)
        wait_for(
            lambda: value(prometheus, "sum(sharelake_accepted_total)") == 2000,
            180,
            "timed out waiting for the records in Prometheus",
        )
        wait_for(
            lambda: value(prometheus, "sum(sharelake_rejected_total)") == poison,
            180,
            "timed out waiting for the dead letters",
        )
        wait_for(
            lambda: value(prometheus, "count(sharelake_group_lag)") == 3,
            60,
            "timed out waiting for each partition's lag",
        )
        wait_for(
            lambda: value(prometheus, "sum(sharelake_group_lag)") == 0,
            180,
            "timed out waiting for the group's lag of 0",
        )
        wait_for(
            lambda: value(prometheus, "max(sharelake_group_members)") == 4,
            180,
            "timed out waiting for the group's members",
        )
        assert value(prometheus, 'sum(sharelake_dead_lettered_by_class_total{error_class="malformed_json"})') == 1
        # a rate() needs two samples in its window: a fast drain can land everything within one scrape
        wait_for(
            lambda: (value(prometheus, MIN_SAMPLES) or 0) >= 3, 180, "timed out waiting for three scrapes in a minute"
        )

        dashboard = json.loads((DOCS / "sharelake-dashboard.json").read_text())
        job_values = prometheus.api("label/job/values", **{"match[]": "sharelake_accepted_total"})["data"]
        assert "sharelake" in job_values  # the dashboard's $job variable finds the job
        queries = [(p["title"], substituted(t["expr"])) for p in dashboard["panels"] for t in p["targets"]]
        assert len(queries) >= 9
        for title, expr in queries:
            assert prometheus.query(expr), f"panel {title!r}: no series for {expr}"

        for rule in alert_rules():
            prometheus.query(rule["expr"])  # parses and runs (the `for` is not part of it)
            for selector in selectors(rule["expr"]):
                assert prometheus.series(selector), f"alert {rule['alert']}: no series {selector}"
        # the server loaded alerts.yml itself and evaluates every rule without an error
        loaded = [r for g in prometheus.api("rules")["data"]["groups"] for r in g["rules"]]
        assert {r["name"] for r in loaded} == {r["alert"] for r in alert_rules()}
        wait_for(
            lambda: all(r["health"] == "ok" for r in _rules(prometheus)),
            30,
            "timed out waiting for an evaluation of every rule",
        )
    finally:
        stop.set()
        job.join(120)
    assert not job.is_alive() and ran and ran[0].accepted == 2000


def _rules(server: PrometheusServer) -> list[dict[str, Any]]:
    return [r for g in server.api("rules")["data"]["groups"] for r in g["rules"]]
