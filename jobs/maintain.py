"""spark-submit entry point of `sharelake maintain`, kept for existing schedules (jobs/main.py runs any
subcommand).

./spark-submit.sh jobs/maintain.py --config conf/local.toml [--set section.key=value ...]
"""

import sys

from sharelake.cli import main

if __name__ == "__main__":
    sys.exit(main(["maintain", *sys.argv[1:]]))
