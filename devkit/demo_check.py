"""The demo's own proof: what it produced is in its tables, each record once, its upserted table holds
each key once at its newest value, and its poison records are in the dead-letter table, each once,
with the class the README names.

Run after the demo's ingest job exits 0, so a demo that printed a summary but lost or doubled a
record fails. It reads the tables with the local SparkSession it is given (the demo's, not the
job's), as a user would, never through the job's summary; every problem found is named.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from devkit.sample_data import Produced


@dataclass(frozen=True)
class Expected:
    """One table and the records produced for it."""

    table: Path
    records: list[Produced]


def table_problems(spark: SparkSession, expected: Expected) -> list[str]:
    """What is wrong with one table: missing, extra or doubled records (empty when it is right)."""
    rows = spark.read.format("delta").load(str(expected.table)).select("topic", "partition", "offset").collect()
    actual = Counter((r.topic, r.partition, r.offset) for r in rows)
    wanted = {(p.topic, p.partition, p.offset) for p in expected.records}
    problems = []
    if missing := wanted - set(actual):
        problems.append(f"{expected.table.name}: {len(missing)} produced records missing, e.g. {min(missing)}")
    if extra := set(actual) - wanted:
        problems.append(f"{expected.table.name}: {len(extra)} rows that were never produced, e.g. {min(extra)}")
    if doubled := {k: n for k, n in actual.items() if n > 1}:
        problems.append(f"{expected.table.name}: {sum(doubled.values()) - len(doubled)} duplicate rows")
    return problems


@dataclass(frozen=True)
class ExpectedUpserts:
    """An upserted table and what each key's row must hold: its newest record's value of `column`."""

    table: Path
    key: str
    column: str
    newest: dict[str, object]


def upsert_problems(spark: SparkSession, expected: ExpectedUpserts) -> list[str]:
    """What is wrong with an upserted table: a key missing, doubled or extra, or not at its newest value."""
    rows = spark.read.format("delta").load(str(expected.table)).select(expected.key, expected.column).collect()
    keys = Counter(r[0] for r in rows)
    name, problems = expected.table.name, []
    if doubled := [k for k, n in keys.items() if n > 1]:
        problems.append(f"{name}: {len(doubled)} keys with more than one row, e.g. {min(doubled)}")
    if missing := set(expected.newest) - set(keys):
        problems.append(f"{name}: {len(missing)} keys missing, e.g. {min(missing)}")
    if extra := set(keys) - set(expected.newest):
        problems.append(f"{name}: {len(extra)} keys never produced, e.g. {min(extra)}")
    stale = sorted(r[0] for r in rows if r[0] in expected.newest and r[1] != expected.newest[r[0]])
    if stale:
        problems.append(f"{name}: {len(stale)} keys not at their newest record's {expected.column}, e.g. {stale[0]}")
    return problems


def dead_letter_problems(spark: SparkSession, path: Path, classes: dict[tuple[str, int, int], str]) -> list[str]:
    """The dead-letter table holds exactly the poison records, each once, each with its expected class."""
    rows = spark.read.format("delta").load(str(path)).select("topic", "partition", "offset", "error_class").collect()
    actual = Counter((r.topic, r.partition, r.offset) for r in rows)
    found = {(r.topic, r.partition, r.offset): r.error_class for r in rows}
    problems = []
    if missing := set(classes) - set(actual):
        problems.append(f"dead letters: {len(missing)} poison records missing, e.g. {min(missing)}")
    if extra := set(actual) - set(classes):
        problems.append(f"dead letters: {len(extra)} records that are not poison, e.g. {min(extra)}")
    if doubled := [k for k, n in actual.items() if n > 1]:
        problems.append(f"dead letters: {len(doubled)} poison records more than once")
    wrong = {k: (found[k], cls) for k, cls in classes.items() if k in found and found[k] != cls}
    problems += [f"dead letter {k}: class {got!r}, expected {want!r}" for k, (got, want) in sorted(wrong.items())]
    return problems


def check_demo(
    spark: SparkSession,
    tables: list[Expected],
    dead_letter: Path,
    poison: list[Produced],
    classes: dict[str, str],
    upserted: Sequence[ExpectedUpserts] = (),
) -> str:
    """One line that says what was proven; raises AssertionError naming every problem found.

    `classes`: the dead-letter class expected for each poison record, by the record's key;
    `upserted`: the upserted tables and each key's newest value."""
    by_offset = {(p.topic, p.partition, p.offset): classes[p.key.decode()] for p in poison}
    problems = [p for expected in tables for p in table_problems(spark, expected)]
    problems += [p for expected in upserted for p in upsert_problems(spark, expected)]
    problems += dead_letter_problems(spark, dead_letter, by_offset)
    if problems:
        raise AssertionError("; ".join(problems))
    counted = ", ".join(f"{e.table.name} {len(e.records):,} rows" for e in tables)
    by_class = ", ".join(f"{cls} {n}" for cls, n in sorted(Counter(by_offset.values()).items()))
    upserts = "".join(
        f"; {u.table.name} holds one row per {u.key} ({len(u.newest):,}), each its newest record's {u.column}"
        for u in upserted
    )
    return (
        f"every produced record is in its table exactly once ({counted}, 0 duplicates){upserts}; "
        f"the dead-letter table holds the {len(poison)} poison records, each once ({by_class})"
    )
