"""spark-submit entry point of `sharelake replay-dead-letters`, kept for existing schedules (jobs/main.py runs any
subcommand).

./spark-submit.sh jobs/replay_dlq.py --config conf/local.toml [--set section.key=value ...]
"""

import sys

from sharelake.cli import main

if __name__ == "__main__":
    sys.exit(main(["replay-dead-letters", *sys.argv[1:]]))
