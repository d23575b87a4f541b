"""`sharelake status`: the group and the tables as they are now, without Kafka's own tools.

The group's members and their partitions, each partition's offset and lag (Kafka's admin API,
through the group type: a share group's start offset and the broker's lag, a consumer group's
committed offset and its lag to the end offset; `sharelake.ops.group_status`), and each table's last
Sharelake commit and its age (the Delta history). `--json` prints the same as one JSON object
for a script. Reads only; exit code 0, or 2 with one line when the config is wrong or the broker
does not answer.
"""

from __future__ import annotations

import argparse
import json

from sharelake.commands.config_arguments import add_config_arguments, job_config
from sharelake.config.app_name import spark_app_name
from sharelake.ops.group_status import read_group_status
from sharelake.run.spark_session import build_spark

HELP = "show the group's members, each partition's lag, and each table's last commit and its age"


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def run(args: argparse.Namespace) -> int:
    cfg = job_config(args)
    spark = build_spark(spark_app_name("status", cfg.run.app_name), extra_conf=cfg.spark_conf)
    status = read_group_status(spark, cfg)
    print(json.dumps(status.as_json(), indent=2) if args.json else "\n".join(status.lines()), flush=True)
    spark.stop()
    return 0
