"""What every spark-submit entry point in `jobs/` starts with: its arguments, logging and config.

Used by `jobs/ingest.py` and `jobs/replay_dlq.py`. A bad config (or any other `ConfigError`)
ends the job with one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse

from app import console
from app.config import ConfigError, SharelakeConfig, load_config

CONFIG_ERROR_EXIT = 2


def job_parser(doc: str) -> argparse.ArgumentParser:
    """A parser with `--config` and `--set`; its description is the first paragraph of `doc`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="TOML config file (see conf/local.toml)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a key")
    return parser


def start_logging() -> None:
    console.start_logging()  # INFO on stderr, repeated librdkafka lines folded


def config_failure(e: ConfigError) -> int:
    """Report a ConfigError as the one line the user reads (the last line); the exit code to return."""
    console.print_cause(str(e))
    return CONFIG_ERROR_EXIT


def job_config(args: argparse.Namespace) -> SharelakeConfig:
    """The config named by `--config`, with the `--set` overrides (ConfigError when it is wrong)."""
    return load_config(args.config, args.set)
