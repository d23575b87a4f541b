"""Unit tests of the one declaration of a run's counters (app/sharelake/observe/counters.py)."""

from __future__ import annotations

from sharelake.consume.member import MemberStats
from sharelake.consume.member_pool import PoolGauges
from sharelake.observe.counters import catalogue, collect, summed
from sharelake.run.pipeline import RunSummary
from sharelake.sink.batch.stats import PHASES, SinkStats
from sharelake.sink.dedup.dedup_table import TableStats


def owners() -> list[object]:
    sink = SinkStats(dedup_hits=3, cycle_s_sum=2.0, cycles=4)
    sink.phase_s["write"] = 1.5
    sink.dead_lettered_by_class.update({"malformed_json": 2, "null_value": 0})
    return [
        MemberStats(polls=2, records=5, accepted=4, ack_errors=1),
        MemberStats(polls=1, records=3, accepted=3, acks_s=0.25),
        sink,
        TableStats(commits=2, rows=7, concurrent_claims=1, last_version=9, last_commit_timestamp=100.0),
        TableStats(commits=1, rows=1, last_version=4, last_commit_timestamp=200.0),  # a second main table
        TableStats(prefix="dead_letter_", commits=1, rows=1, concurrent_claims=2, last_version=0),
        PoolGauges(members_active=4, buffer_records=10, buffer_capacity=50),
    ]


def test_collect_names_each_counter_once_and_sums_what_several_owners_keep() -> None:
    c = collect(owners())
    assert (c["polls"], c["polled"], c["accepted"], c["ack_errors"], c["acks_s"]) == (3, 8, 7, 1, 0.25)
    assert (c["delta_commits"], c["rows_written"]) == (3, 8)  # the main tables' counters: summed
    assert (c["last_version"], c["last_commit_timestamp_seconds"]) == (9, 200.0)  # their gauges: the largest
    assert (c["dead_letter_delta_commits"], c["dead_letter_rows_written"]) == (1, 1)  # the dead-letter table's
    assert c["concurrent_claims"] == 3  # both tables
    assert c["dedup_hits"] == 3 and c["members_active"] == 4
    assert set(c["phase_s"]) == set(PHASES) and c["phase_s"]["write"] == 1.5


def test_prometheus_names_kinds_and_docs_come_from_the_declaration() -> None:
    cat = catalogue(owners())
    assert cat["ack_errors"].prometheus == "expired_locks" and cat["ack_errors"].kind == "counter"
    assert cat["polled"].prometheus == "polled" and "polled" in cat["polled"].doc
    assert cat["max_cycle_s"].kind == "gauge" and cat["members_active"].kind == "gauge"
    assert cat["phase_s"].prometheus == "sink_phase_seconds" and cat["phase_s"].value["write"] == 1.5
    assert cat["phase_s"].label == "phase" and cat["dead_lettered_by_class"].label == "error_class"
    assert cat["dead_lettered_by_class"].value == {"malformed_json": 2, "null_value": 0}
    assert all(d.doc for d in cat.values())


def test_summed_adds_the_counters_of_owners_of_one_kind() -> None:
    total = summed([MemberStats(records=5, accepted=4), MemberStats(records=3, accepted=3)], MemberStats())
    assert (total.records, total.accepted) == (8, 7)


def test_the_run_summary_reads_the_collected_counters() -> None:
    summary = RunSummary(collect(owners()), {"seconds": 12.5})
    assert summary.accepted == 7 and summary.phase_s["write"] == 1.5 and summary.seconds == 12.5
    line = summary.line()
    assert "accepted=7" in line and "write_s=1.5" in line and "delta_commits=3" in line and "seconds=12.5" in line
    assert "dead_lettered_by_class.malformed_json=2" in line and "null_value" not in line  # classes that counted
