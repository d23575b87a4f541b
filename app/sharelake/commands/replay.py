"""`sharelake replay-dead-letters`: re-publish dead-letter records to Kafka after a fix.

Reads the dead-letter table of the config (`dead_letter.table_path`, default the main table's path
+ "_dead_letter"), re-publishes the rows not replayed yet that match `--where` (a Spark SQL filter
on its columns) to their original topic or `--to-topic`, then marks them replayed; safe to run
twice. With `--from-broker-topic` it reads the share group's broker-side dead-letter topic
(`kafka.broker_dead_letter_topic`, Kafka 4.4) instead, sends each record the broker archived back
to its source topic, and commits how far it got; safe to run twice too. Exit codes: 0 done (the
count is logged), 1 publishing failed (nothing marked), 2 the configuration or the filter is wrong
(one line on stderr).
"""

from __future__ import annotations

import argparse
import logging

from sharelake.commands.config_arguments import add_config_arguments, job_config
from sharelake.config.app_name import spark_app_name
from sharelake.failures.errors import ConfigError
from sharelake.ops.replay import ReplayError, replay_dead_letters
from sharelake.ops.replay_broker_topic import replay_broker_dead_letters
from sharelake.run.spark_session import build_spark

HELP = "re-publish dead-letter records (the dead-letter table, or the broker's dead-letter topic) to Kafka"
log = logging.getLogger("sharelake.replay")


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--where", help="Spark SQL filter on the dead-letter table's columns")
    parser.add_argument("--to-topic", help="publish here instead of each record's original topic")
    parser.add_argument(
        "--from-broker-topic",
        action="store_true",
        help="replay kafka.broker_dead_letter_topic (the broker's copies, KIP-1191) instead of the dead-letter table",
    )


def run(args: argparse.Namespace) -> int:
    cfg = job_config(args)
    if args.from_broker_topic and args.where:
        raise ConfigError("--where filters the dead-letter table: drop it with --from-broker-topic")
    name = spark_app_name("replay-dead-letters", cfg.run.app_name)
    spark = None if args.from_broker_topic else build_spark(name, extra_conf=cfg.spark_conf)
    try:
        if spark is None:
            result = replay_broker_dead_letters(cfg, args.to_topic)
        else:
            result = replay_dead_letters(spark, cfg, args.where, args.to_topic)
    except ReplayError as e:
        log.error("replay failed: %s", e)
        return 1
    log.info("replay ended: published=%d topics=%s", result.published, ",".join(result.topics) or "-")
    if spark is not None:
        spark.stop()
    return 0
