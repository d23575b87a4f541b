"""The demo's output as a person reads it when it is not a terminal (CI, a pipe, a log file).

Reads what `make demo` printed in CI's run (.ci/run runs it first, piped into a log it names in
`SHARELAKE_DEMO_OUTPUT`); elsewhere runs the demo (`python -m devkit.demo`) in a subprocess with its
output captured (so no bar), in a work dir of its own. In what it printed: the per-batch progress lines and the table
summary are there; no progress bar (no carriage return, no bar text inside a log line), no Spark
warning of a task of very large size (the record count makes micro-batches big enough that each
task carried over 1000 KiB of rows when the rows travelled inside the tasks), and one share
consumer "Preview" notice for the job's four members; and the demo's own check of its tables passed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devkit.paths import PROJECT_ROOT as ROOT

RECORDS = 20_000  # the demo's default: JSON records (and half as many Avro), micro-batches of up to ~20,000 rows
DEMO_START = "[demo] starting an embedded Kafka broker"  # the demo's first line (make's own lines come before)
BAR_TEXT = ("[demo] decided", "rec/s]", "█")  # tqdm's bar: its description, its rate, its blocks


def demo_output(tmp_path: Path) -> str:
    """What the demo printed, from its first line: CI's `make demo` run, else a run of its own."""
    ci_log = Path(os.environ.get("SHARELAKE_DEMO_OUTPUT", "/nonexistent"))
    if ci_log.is_file():
        out = ci_log.read_text(errors="replace")
        assert DEMO_START in out, out[-3000:]
        return DEMO_START + out.split(DEMO_START, 1)[1]
    demo = subprocess.run(
        [sys.executable, "-m", "devkit.demo", "--records", str(RECORDS), "--work-dir", str(tmp_path)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=300,
        check=False,
    )
    out = demo.stdout.decode(errors="replace")
    assert demo.returncode == 0, out[-3000:]
    return out


def test_the_demo_prints_log_lines_progress_and_summary_and_no_bar(tmp_path: Path) -> None:
    out = demo_output(tmp_path)
    lines = out.splitlines()
    assert any(line.startswith("[demo] checked: every produced record is in its table exactly once") for line in lines)

    progress = [line for line in lines if "sharelake.progress: batch " in line]
    assert progress, out[-3000:]
    assert any(line.startswith("=== Delta table ") and line.endswith("/events") for line in lines), out[-3000:]
    assert f"rows: {RECORDS}   distinct (topic, partition, offset): {RECORDS}   duplicates: 0" in out
    assert any(line.startswith("[demo] ingested ") for line in lines)

    assert "\r" not in out
    assert [line for line in lines if any(text in line for text in BAR_TEXT)] == []
    assert [line for line in lines if "task of very large size" in line] == []
    preview = [line for line in lines if 'share consumer is in "Preview"' in line]
    assert len(preview) == 1, preview  # four members, one notice
