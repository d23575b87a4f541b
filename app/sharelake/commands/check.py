"""`sharelake check`: the start-up checks of `sharelake ingest` alone, without ingesting.

Runs the open stage of an ingest run (`sharelake.run.pipeline.IngestRun.open`) and nothing else: validates
the config, reaches the broker (topics, the group's settings and bounds, the broker's dead-letter
topic), each format's schema registry (writer schemas against the table's columns) and the tables
(each path a Delta table or empty, and writable; names in the catalog; their recent commits
read). It changes nothing: the group's settings are read, not applied, a missing broker
dead-letter topic is not created, and no writer lease is taken. Exit code 0 with one line naming
what was checked, or 2 with the one line of the first problem (the same line `ingest` would stop
with).
"""

from __future__ import annotations

import argparse
import logging

from sharelake.commands.config_arguments import add_config_arguments, job_config
from sharelake.config.app_name import spark_app_name
from sharelake.run.pipeline import IngestRun
from sharelake.run.preflight import check_not_spark_connect
from sharelake.run.spark_session import build_spark

HELP = "check a config: reach the broker, the registry and the tables, without ingesting (exit 0, or 2 and one line)"
log = logging.getLogger("sharelake.check")


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    cfg = job_config(args)
    check_not_spark_connect()
    spark = build_spark(spark_app_name("check", cfg.run.app_name), extra_conf=cfg.spark_conf)
    run = IngestRun(spark, cfg)
    try:
        opened = run.open(apply=False)
    finally:
        run.close()
    facts, group = opened.facts, opened.group
    tables = [r.location.name or r.location.path for r in opened.routes.main]
    dead_letters = opened.dead_letters.named()
    print(
        f"sharelake: check passed: {cfg.kafka.bootstrap_servers} ({', '.join(cfg.kafka.subscribed)}: "
        f"{facts.partitions} partitions), {group.noun} {cfg.kafka.group_id}, "
        f"tables {', '.join(tables)} and {dead_letters}",
        flush=True,
    )
    spark.stop()
    return 0
