"""A reader that is not the job: copies a Delta table to a local Delta table with a Spark of its own.

    python -m tests.table_copy SOURCE TARGET [spark.key=value ...]

Run on a host of a `devkit.network` (`Host.popen`) when the table's store is reachable only there
(an S3 server on a host of its own): the test then checks the local copy with its own session
(`tests.table_checks.assert_exactly_once`). Only Sharelake's record columns are copied.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sharelake.run.spark_session import build_spark

COLUMNS = ("topic", "partition", "offset", "key", "value")


def copy_table(source: str, target: Path, conf: dict[str, str]) -> int:
    """Rows copied from the table at `source` into a new Delta table at `target`."""
    spark = build_spark("sharelake-table-copy", "local[1]", {"spark.ui.enabled": "false", **conf})
    try:
        rows = spark.read.format("delta").load(source).select(*COLUMNS)
        rows.write.format("delta").mode("overwrite").save(str(target))
        return int(spark.read.format("delta").load(str(target)).count())
    finally:
        spark.stop()


def main(argv: list[str]) -> int:
    source, target, *settings = argv
    conf = dict(s.split("=", 1) for s in settings)
    print(f"copied {copy_table(source, Path(target), conf)} rows from {source} to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
