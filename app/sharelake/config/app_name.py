"""The Spark application's name a subcommand runs as: the config's `run.app_name`, and a suffix for
the subcommands that are not the ingest (`<app_name>-check`, `-maintain`, `-replay`, `-status`).

Each subcommand names its SparkSession with `spark_app_name`. spark-submit.sh asks for the same
name before it submits (`python -m sharelake.config.app_name JOB.py <the job's arguments>` prints it) and passes
it as `--name`: in cluster mode YARN and Kubernetes take the application's name from spark-submit
before the driver runs (without one, the entry point's file name, `main.py`). That read is
the TOML file and its `--set` overrides only, no validation (a few milliseconds per submit); a
config it cannot read (a path inside a Kubernetes driver pod) names nothing, and a wrong one is
reported by the job itself as it starts.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

from sharelake.config.overrides import merge_overrides
from sharelake.failures.errors import ConfigError

DEFAULT_APP_NAME = "sharelake-ingest"
# the entry points of jobs/ kept for existing schedules -> the subcommand each runs (jobs/main.py takes it first)
ENTRY_POINTS = {"ingest.py": "ingest", "maintain.py": "maintain", "replay_dlq.py": "replay-dead-letters"}
# subcommand -> the suffix of its application's name (`version` starts no Spark)
SUFFIXES = {
    "ingest": "",
    "replay-dead-letters": "-replay",
    "maintain": "-maintain",
    "check": "-check",
    "status": "-status",
}


def spark_app_name(command: str, app_name: str) -> str:
    """The application's name of `command` run with `run.app_name` = `app_name`."""
    return f"{app_name}{SUFFIXES[command]}"


def configured_app_name(config: Path, overrides: Sequence[str]) -> str:
    """`run.app_name` of the file with its overrides, unvalidated (OSError, TOMLDecodeError,
    ConfigError when it cannot be read)."""
    data = merge_overrides(tomllib.loads(config.read_text()), list(overrides))
    run = data.get("run")
    return str(run.get("app_name", DEFAULT_APP_NAME)) if isinstance(run, dict) else DEFAULT_APP_NAME


def submitted_name(job: str, job_args: Sequence[str]) -> str | None:
    """The application's name of a job (its entry point's file, `jobs/main.py`) and its arguments
    (`ingest --config f.toml --set ...`); None when they name no subcommand with a config, or the
    config cannot be read here."""
    if Path(job).name in ENTRY_POINTS:
        job_args = [ENTRY_POINTS[Path(job).name], *job_args]
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("command", nargs="?")
    parser.add_argument("--config")
    parser.add_argument("--set", action="append", default=[])
    args, _ = parser.parse_known_args(job_args)
    if args.command not in SUFFIXES or args.config is None:
        return None
    try:
        return spark_app_name(args.command, configured_app_name(Path(args.config), args.set))
    except (OSError, tomllib.TOMLDecodeError, ConfigError):
        return None


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m sharelake.config.app_name JOB.py [the job's arguments]")
    name = submitted_name(sys.argv[1], sys.argv[2:])
    if name:
        print(name)
