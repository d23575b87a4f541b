"""`sharelake maintain`: OPTIMIZE, then VACUUM, every table an ingest config writes; then exit.

Schedule it beside the ingest job (hourly or daily; it is safe while the job writes): the ingest
commits once per micro-batch, each with its own small files, and this compacts them and deletes
what no version within `maintenance.vacuum_retain_hours` needs (docs/storage.md, table health). Tables of
the config that do not exist yet are skipped. Exit codes: 0 every table done (one line each), 1 a
table failed (the others were still done), 2 the configuration is wrong (one line on stderr).
"""

from __future__ import annotations

import argparse
import logging

from sharelake.commands.config_arguments import add_config_arguments, job_config
from sharelake.config.app_name import spark_app_name
from sharelake.failures.errors import one_line
from sharelake.ops.maintenance import maintain_table
from sharelake.run.spark_session import build_spark
from sharelake.sink.delta.catalog_tables import located_routes

HELP = "compact (OPTIMIZE) and VACUUM every table the config writes"
log = logging.getLogger("sharelake.maintain")


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    cfg = job_config(args)
    spark = build_spark(spark_app_name("maintain", cfg.run.app_name), extra_conf=cfg.spark_conf)
    routes = located_routes(spark, cfg)
    m, failed = cfg.maintenance, 0
    for location in routes.tables():
        try:
            result = maintain_table(
                spark,
                location.path,
                m.vacuum_retain_hours,
                optimize=m.optimize,
                vacuum=m.vacuum,
                vacuum_mode=m.vacuum_mode,
            )
        except Exception as e:  # noqa: BLE001 - the next table is still maintained; exit 1 at the end
            log.error("%s: maintenance failed: %s", location, one_line(e, 300))
            failed += 1
            continue
        log.info("%s", f"{location}: no table yet, skipped" if result is None else result.line())
    return 1 if failed else 0  # the session is left to the process's end (a scheduler's shared one lives on)
