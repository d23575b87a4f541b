"""spark-submit entry point for every `sharelake` subcommand (the installed package runs it).

    spark-submit ... jobs/sharelake.py ingest --config prod.toml [--set section.key=value ...]
    spark-submit ... jobs/sharelake.py check --config prod.toml

The same as the `sharelake` command (app/cli.py); see `sharelake --help`.
"""

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
