"""Contender (d), Kafka's own Java share-consumer perf tool: the broker's ceiling on this machine.

Runs `org.apache.kafka.tools.ShareConsumerPerformance` (what
bin/kafka-share-consumer-perf-test.sh runs) from the kafka-tools jar in .cache/jars/kafka with
`--threads M --num-records N` on a fresh group whose share.auto.offset.reset is set to earliest
first. It consumes with the Java client's default (implicit) acknowledgement and writes nothing.

records/s = the tool's own nMsg.sec: records / (end - start), where its window starts before the
consumers subscribe, so it includes the group join (which weighs on small sizes).
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from bench.contenders.base import RunContext, RunResult, failed, run_logged, tail
from devkit.paths import KAFKA_JARS
from sharelake.consume.share.group_settings import apply_group_settings

NAME = "perf-tool"
MAIN = "org.apache.kafka.tools.ShareConsumerPerformance"
# start.time, end.time, data.consumed.in.MB, MB.sec, nMsg.sec, data.consumed.in.nMsg, fetch.time.ms
FIELDS = 7


def run_perf_tool(ctx: RunContext) -> RunResult:
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    log = ctx.run_dir / "perf-tool.log"
    group = ctx.group(NAME)
    apply_group_settings(
        AdminClient({"bootstrap.servers": ctx.bootstrap}), group, {"share.auto.offset.reset": "earliest"}
    )
    cmd = [
        "java", "-Xmx512m", "-cp", f"{KAFKA_JARS}/*", MAIN,
        "--bootstrap-server", ctx.bootstrap, "--topic", ctx.topic, "--group", group,
        "--num-records", str(ctx.records), "--threads", str(ctx.members), "--timeout", "30000",
    ]  # fmt: skip
    code = run_logged(cmd, log, ctx.settings.run_timeout_s)
    if code != 0:
        return failed(ctx, NAME, f"exit code {code}: {tail(log, 8)}", log)
    text = log.read_text(errors="replace")
    stats = [ln.split(", ") for ln in text.splitlines() if ln.count(", ") == FIELDS - 1 and not ln.startswith("start")]
    if not stats:
        return failed(ctx, NAME, f"no result line in the tool's output: {tail(log, 8)}", log)
    last = stats[-1]
    records, fetch_ms = int(last[5]), int(last[6])
    if "WARNING: Exiting before consuming" in text:
        return failed(ctx, NAME, f"timed out after {records} of {ctx.records} records", log)
    details = {"tool_records_per_s": float(last[4]), "tool_mb_per_s": float(last[3])}
    return RunResult(
        NAME, ctx.phase, ctx.partitions, ctx.members, True, records, fetch_ms / 1000, "", None, log, details
    )
