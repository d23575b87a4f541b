"""The demo: embedded Kafka broker -> sample JSON records -> the real ingest job -> table summary.

    make demo        (sets everything up first; or: .cache/venv/bin/python jobs/demo.py [--records N])

Starts a fresh single-node broker under .cache/demo/, creates a 3-partition topic, produces sample
JSON events with a few poison records in the middle, runs `./spark-submit.sh jobs/ingest.py` in
until-drained mode with `--summary` (the same entry point users submit; values parsed as JSON,
poison records to the dead-letter table), then stops the broker. Exits with the ingest job's exit
code.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tqdm import tqdm  # noqa: E402

from app.embedded.kafka_broker import EmbeddedKafka  # noqa: E402
from app.embedded.sample_data import EVENT_SCHEMA, produce_json_events, produce_poison_records  # noqa: E402
from app.paths import CACHE_DIR  # noqa: E402

TOPIC = "demo-events"


def main() -> int:
    parser = argparse.ArgumentParser(description="Sharelake demo")
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args()
    demo_dir = CACHE_DIR / "demo"
    shutil.rmtree(demo_dir, ignore_errors=True)
    table = demo_dir / "table"

    print(f"[demo] starting an embedded Kafka broker (KRaft, share groups) under {demo_dir}/broker")
    with EmbeddedKafka(demo_dir / "broker") as broker:
        broker.create_topic(TOPIC, partitions=3)
        t0 = time.monotonic()
        half = args.records // 2
        produced = produce_json_events(broker.bootstrap, TOPIC, half)
        poison = produce_poison_records(broker.bootstrap, TOPIC)  # in the middle of the stream
        produced += produce_json_events(broker.bootstrap, TOPIC, args.records - half, start=half)
        print(
            f"[demo] produced {len(produced)} JSON records and {len(poison)} poison records to {TOPIC} "
            f"in {time.monotonic() - t0:.1f}s"
        )
        cmd = [
            str(ROOT / "spark-submit.sh"), str(ROOT / "jobs" / "ingest.py"),
            "--config", str(ROOT / "conf" / "local.toml"),
            "--set", f"kafka.bootstrap_servers={broker.bootstrap}",
            "--set", f"kafka.topic={TOPIC}",
            "--set", "kafka.group_id=sharelake-demo",
            "--set", f"delta.table_path={table}",
            "--set", "payload.format=json",
            "--set", f"payload.schema={EVENT_SCHEMA}",
            "--set", "run.mode=until-drained",
            "--set", "run.idle_timeout_ms=3000",
            "--summary",
        ]  # fmt: skip
        print("[demo] running the ingest job until the backlog is drained:")
        print("       " + " ".join(cmd[:4]) + " ...")
        t0 = time.monotonic()
        rc = run_with_progress(cmd, total=len(produced) + len(poison))
        print(f"[demo] ingest job exited with {rc} after {time.monotonic() - t0:.1f}s; stopping the broker")
    return rc


def run_with_progress(cmd: list[str], total: int) -> int:
    """Run the job, showing its per-batch progress lines as a bar and every other line as is."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert proc.stdout is not None
    bar = tqdm(total=total, unit="rec", desc="[demo] decided", dynamic_ncols=True)
    for line in proc.stdout:
        m = PROGRESS.search(line)
        if m and not bar.disable:
            bar.update(int(m["accepted"]) + int(m["rejected"]))
        elif "run ended:" in line and not bar.disable:
            bar.close()  # the table summary follows: print it below the finished bar
            print(line, end="")
            print(rate_line(line))
        elif not bar.disable:
            bar.write(line.rstrip("\n"))
        else:
            print(line, end="")
            if "run ended:" in line:
                print(rate_line(line))
    bar.close()
    return proc.wait()


def rate_line(run_ended: str) -> str:
    """The ingest rate from the job's `run ended:` counters: records decided / (first poll -> last commit)."""
    f = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", run_ended.split("run ended:", 1)[1])}
    decided = f.get("accepted", 0) + f.get("rejected", 0)
    ingest = f.get("ingest_s", 0.0)
    rate = f"{decided / ingest:,.0f} records/s" if ingest > 0 else "n/a"
    return (
        f"[demo] ingested {decided:,.0f} records in {ingest:.1f}s from the first poll to the last Delta commit: "
        f"{rate} (before that: {f.get('start_s', 0):.1f}s of start-up, the checks, the warm-up and the group "
        f"join; the first records came {f.get('first_record_s', 0) - f.get('start_s', 0):.1f}s after polling began)"
    )


PROGRESS = re.compile(
    r"sharelake\.progress: batch \d+: .*? accepted=(?P<accepted>\d+) released=\d+ rejected=(?P<rejected>\d+)"
)


if __name__ == "__main__":
    sys.exit(main())
