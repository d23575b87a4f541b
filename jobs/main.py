"""spark-submit entry point for every `sharelake` subcommand (the installed package runs it).

    spark-submit ... jobs/main.py ingest --config prod.toml [--set section.key=value ...]
    spark-submit ... jobs/main.py check --config prod.toml

The same as the `sharelake` command (app/sharelake/cli.py); see `sharelake --help`.
"""

import sys

from sharelake.cli import main

if __name__ == "__main__":
    sys.exit(main())
