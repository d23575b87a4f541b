"""Unit tests of `TableLocation` (no Spark): one table, one value, however its path was written."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.sink.table_location import TableLocation


@pytest.mark.parametrize(
    ("given", "path"),
    [
        ("/data/events", "/data/events"),
        ("/data/events/", "/data/events"),
        ("/data/events///", "/data/events"),
        ("relative/events/", "relative/events"),
        ("file:/data/events/", "file:/data/events"),
        ("file:///data/events/", "file:///data/events"),
        ("s3a://bucket/events/", "s3a://bucket/events"),
        ("s3a://bucket/lake/events", "s3a://bucket/lake/events"),
        ("s3a://bucket/", "s3a://bucket"),
        ("abfss://c@acct.dfs.core.windows.net/events/", "abfss://c@acct.dfs.core.windows.net/events"),
        # nothing left but a root or a scheme: kept as given
        ("/", "/"),
        ("file:///", "file:///"),
    ],
)
def test_a_path_is_normalised_once_when_the_location_is_made(given: str, path: str) -> None:
    location = TableLocation.at(given)
    assert location.path == path and str(location) == path
    assert location.name is None
    assert TableLocation(given) == location  # the constructor normalises too: no unnormalised value exists


def test_a_local_path_object_is_its_string() -> None:
    assert TableLocation.at(Path("/data/events")) == TableLocation.at("/data/events/")


def test_locations_of_one_table_are_equal_and_hash_alike() -> None:
    written = ["s3a://bucket/events", "s3a://bucket/events/", "s3a://bucket/events//"]
    locations = {TableLocation.at(p) for p in written}
    assert len(locations) == 1
    writers = {TableLocation.at("s3a://bucket/events/"): "writer"}
    assert writers[TableLocation.at("s3a://bucket/events")] == "writer"  # keyed by one, looked up by the other
    assert TableLocation.at("s3a://bucket/events") != TableLocation.at("s3a://bucket/events_dead_letter")
    assert TableLocation.at("/data/events") != TableLocation.at("file:/data/events")  # not resolved: kept as given


def test_derived_locations_come_from_the_normalised_path() -> None:
    location = TableLocation.at("s3a://bucket/events/")
    assert location.delta_log == "s3a://bucket/events/_delta_log"
    assert location.file("_sharelake/writer-lease.json") == "s3a://bucket/events/_sharelake/writer-lease.json"
    assert location.dead_letter() == TableLocation.at("s3a://bucket/events_dead_letter")
    assert location.describe() == "s3a://bucket/events"


def test_a_catalog_name_is_located_at_start() -> None:
    named = TableLocation.named("db.events")
    assert named.name == "db.events" and named.path == ""
    assert named.dead_letter() == TableLocation.named("db.events_dead_letter")
    located = named.located("s3a://bucket/warehouse/db.db/events/")
    assert located == TableLocation("s3a://bucket/warehouse/db.db/events", "db.events")
    assert located.delta_log == "s3a://bucket/warehouse/db.db/events/_delta_log"
    assert located.describe() == "db.events (at s3a://bucket/warehouse/db.db/events)"
    assert located != TableLocation.at("s3a://bucket/warehouse/db.db/events")  # a name is part of the address
    with pytest.raises(AttributeError):
        located.path = "elsewhere"  # type: ignore[misc]  # frozen
