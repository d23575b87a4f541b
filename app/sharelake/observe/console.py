"""The console a person reads: the jobs' log set-up, repeated client lines folded, the demo's progress bar.

`start_logging` sets up the jobs' logging (INFO on stderr, chatty libraries at WARNING, client repeats folded);
`print_cause` prints the one `sharelake:` line that says why a job stopped, last of all.

- **Folding.** librdkafka logs into Python logging (`sharelake.config.settings.KafkaConfig.client_config` gives
  every client the `sharelake.kafka.client` logger). A broker that refuses the TLS handshake makes
  it log the same error again at every reconnect, and each share consumer logs the same "Preview"
  notice when it starts. `RepeatFolder`, a filter on that logger, lets the first line of a kind
  through (a kind: the message with its numbers blanked, so client ids and timings do not count),
  counts the repeats, and says "... repeated N times" at most once a minute per kind, and at
  `flush_folded` (before the cause line of a refused start, after which no client line is
  printed). The Preview notice is shown once per job and never counted.
- **The bar.** `follow_job` runs a job with its output piped (the Python driver's lines and the
  JVM's log4j lines come through the same pipe) and writes every line with `tqdm.write`, above the
  one bar that the per-batch progress lines move; the demo's own Python logging goes above it too
  (`logging_redirect_tqdm`). Where stderr is not a terminal (CI, a pipe, a log file) there is no
  bar at all: every line, the progress lines included, is printed as it came.
"""

from __future__ import annotations

import atexit
import logging
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CLIENT_LOGGER = "sharelake.kafka.client"  # librdkafka's log lines, from every client of the job
REPORT_EVERY_S = 60.0  # a kind of line that keeps coming is counted aloud at most this often
ONCE_PER_JOB = ('share consumer is in "Preview"',)  # notices every client logs once: shown once per job
QUIET_LOGGERS = ("py4j", "httpx", "httpx2", "httpcore", "httpcore2")  # INFO per call or HTTP request
# the ingest job's per-batch progress line (sharelake.observe.metrics): what moves the bar
PROGRESS = re.compile(
    r"sharelake\.progress: batch \d+: .*? accepted=(?P<accepted>\d+) released=\d+ rejected=(?P<rejected>\d+)"
)
_NUMBERS = re.compile(r"\d+")
_SUPPRESSED = re.compile(r", \d+ identical error\(s\) suppressed")  # librdkafka's own count, in some repeats


@dataclass
class _Kind:
    first: str  # the first line of the kind, as logged
    repeats: int = 0  # since the last report
    reported_at: float = 0.0


class RepeatFolder(logging.Filter):
    """Lets the first line of each kind through and counts the rest (see the module doc)."""

    def __init__(self, report_every_s: float = REPORT_EVERY_S) -> None:
        super().__init__()
        self.report_every_s = report_every_s
        self.closed = False  # the job said its last line: no client line may follow it
        self._kinds: dict[tuple[int, str], _Kind] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if self.closed:
            return False
        if getattr(record, "folded", False):
            return True  # our own "... repeated" line
        message = record.getMessage()
        key = (record.levelno, _NUMBERS.sub("#", _SUPPRESSED.sub("", message)))
        kind = self._kinds.get(key)
        now = time.monotonic()
        if kind is None:
            self._kinds[key] = _Kind(message, reported_at=now)
            return True
        if any(notice in message for notice in ONCE_PER_JOB):
            return False
        kind.repeats += 1
        if now - kind.reported_at < self.report_every_s:
            return False
        record.msg, record.args = f"... repeated {kind.repeats} times in {now - kind.reported_at:.0f}s: %s", (message,)
        kind.repeats, kind.reported_at = 0, now
        return True

    def flush(self, logger: logging.Logger) -> None:
        """Say how often each kind was repeated since its last report, through `logger`."""
        now = time.monotonic()
        for (level, _), kind in self._kinds.items():
            if kind.repeats:
                logger.log(
                    level,
                    "... repeated %d times in %.0fs: %s",
                    kind.repeats,
                    now - kind.reported_at,
                    kind.first,
                    extra={"folded": True},
                )
                kind.repeats, kind.reported_at = 0, now


_folder = RepeatFolder()


def start_logging() -> None:
    """The jobs' logging: INFO lines on stderr, chatty libraries at WARNING, client repeats folded."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    client = logging.getLogger(CLIENT_LOGGER)
    if _folder not in client.filters:
        client.addFilter(_folder)
        atexit.register(flush_folded)  # the counts of a run's last repeats (before logging shuts down)


def flush_folded() -> None:
    """Log the counts of the client lines folded since their last report (before a last line)."""
    _folder.flush(logging.getLogger(CLIENT_LOGGER))


def print_cause(line: str) -> None:
    """The one line that says why the job stopped: last, after the folded counts, set apart by a blank
    line (the clients' lines that would come after it, as they close, are dropped)."""
    flush_folded()
    _folder.closed = True
    for handler in logging.getLogger().handlers:
        handler.flush()
    print(f"\nsharelake: {line}", file=sys.stderr, flush=True)


def follow_job(
    cmd: list[str],
    total: int,
    desc: str,
    after_line: Callable[[str], str | None] = lambda line: None,
    close_on: str | None = None,
) -> int:
    """Run `cmd` with its output under one progress bar of `total` records; its exit code.

    `after_line(line)` may return a line to print after a line of the job's; the bar is closed at
    the first line that holds `close_on` (what follows is printed below the finished bar)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    # disable=None: no bar where stderr is not a terminal
    with tqdm(total=total, unit="rec", desc=desc, dynamic_ncols=True, disable=None, file=sys.stderr) as bar:
        with logging_redirect_tqdm():
            for raw in proc.stdout:
                line = raw.rstrip("\n")
                progress = PROGRESS.search(line)
                if progress is not None:
                    bar.update(int(progress["accepted"]) + int(progress["rejected"]))
                if close_on is not None and close_on in line:
                    bar.close()
                if progress is None or bar.disable:  # in a terminal the bar stands for the progress lines
                    _write(bar, line)
                extra = after_line(line)
                if extra is not None:
                    _write(bar, extra)
    return proc.wait()


def _write(bar: tqdm, line: str) -> None:
    """A line above the bar (tqdm clears and redraws it), or plainly where there is none."""
    if bar.disable:
        print(line, flush=True)
    else:
        tqdm.write(line, file=sys.stderr)
