"""`sharelake ingest`: read the share group's topics into their Delta tables (the streaming job).

Exit codes: 0 the run ended as asked (drained, or stopped by SIGTERM/SIGINT after a graceful
drain); 1 the run failed (a member or the streaming query died; nothing undecided was ACCEPTed);
2 the configuration is wrong (one line on stderr names the key and the fix); 143 (or 130 for
SIGINT) under spark-submit when the signal reached the driver JVM: the JVM reports the signal,
after the same graceful drain (app/sharelake/run/shutdown.py).
"""

from __future__ import annotations

import argparse
import logging

from sharelake.commands.config_arguments import add_config_arguments, job_config
from sharelake.config.app_name import spark_app_name
from sharelake.ops.table_summary import print_tables_summary
from sharelake.run.pipeline import IngestError, IngestRun
from sharelake.run.preflight import check_not_spark_connect
from sharelake.run.shutdown import GracefulShutdown
from sharelake.run.spark_session import build_spark

HELP = "ingest the share group's topics into Delta tables (until drained, or until stopped)"
log = logging.getLogger("sharelake.ingest")


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--summary", action="store_true", help="print a summary of the Delta tables at the end")


def run(args: argparse.Namespace) -> int:
    cfg = job_config(args)
    check_not_spark_connect()  # before a session is built: under Spark Connect it would be remote
    spark = build_spark(spark_app_name("ingest", cfg.run.app_name), extra_conf=cfg.spark_conf)
    shutdown = GracefulShutdown(cfg.run.stop_timeout_s)
    shutdown.install(spark)
    run = IngestRun(spark, cfg, shutdown.stop_requested)
    try:
        finished = run.run()
        log.info("run ended: %s", finished.summary.line())
    except IngestError as e:
        log.error("run failed: %s", e)
        return 1
    finally:
        shutdown.done()  # the JVM may be waiting in its shutdown hook: let it go on
    if shutdown.jvm_stopping.is_set():
        log.info("stopped by the driver JVM's shutdown (a signal): drained; the JVM exits with the signal's code")
        shutdown.outlive_jvm()
        return 0
    if shutdown.stop_requested.is_set():
        return 0
    if args.summary:
        routes = finished.opened.routes  # each table located
        dead = routes.dead_letter.path if routes.dead_letter is not None else None
        print_tables_summary(spark, [r.location.path for r in routes.main], dead)
    spark.stop()
    return 0
