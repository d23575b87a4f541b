"""The config an in-process test run uses: the real job's config, pointed at the test broker."""

from __future__ import annotations

from pathlib import Path

from sharelake.config.loader import load_config
from sharelake.config.settings import SharelakeConfig
from sharelake.testing.kafka_broker import KafkaBrokers


def ingest_config(
    broker: KafkaBrokers, topic: str, group: str, table: Path, *extra: str, idle_ms: int = 4000
) -> SharelakeConfig:
    return load_config(
        None,
        [
            f"kafka.bootstrap_servers={broker.bootstrap}",
            f"kafka.topic={topic}",
            f"kafka.group_id={group}",
            f"delta.table_path={table}",
            "run.mode=until-drained",
            f"run.idle_timeout_ms={idle_ms}",
            *extra,
        ],
    )
