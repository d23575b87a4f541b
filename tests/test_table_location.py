"""Unit tests of `TableLocation` (no Spark): one table, one value, however its path was written."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharelake.config.loader import load_config
from sharelake.config.routes import resolve_routes
from sharelake.table.location import TableLocation

REQUIRED = ["kafka.bootstrap_servers=h:1", "kafka.topic=t", "kafka.group_id=g"]


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
    assert location.file("_delta_log/_last_checkpoint") == "s3a://bucket/events/_delta_log/_last_checkpoint"
    assert location.beside(".lease.json") == "s3a://bucket/.events.lease.json"  # in the folder holding the table's
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


def test_the_config_gives_each_table_one_location() -> None:
    routes = resolve_routes(load_config(None, [*REQUIRED, "delta.table_path=s3a://bucket/events/"]))
    assert [r.location for r in routes.main] == [TableLocation.at("s3a://bucket/events")]
    assert routes.dead_letter == TableLocation.at("s3a://bucket/events_dead_letter")  # <path>_dead_letter
    assert routes.tables() == [TableLocation.at("s3a://bucket/events"), routes.dead_letter]
    given = resolve_routes(load_config(None, [*REQUIRED, "delta.table_path=/t/e", "dead_letter.table_path=/t/dead/"]))
    assert given.dead_letter == TableLocation.at("/t/dead") and given.dead_letter_key == "dead_letter.table_path"


def test_a_named_table_and_its_dead_letter_table_are_located_by_the_catalog() -> None:
    cfg = load_config(None, [*REQUIRED, "delta.table_name=db.events"])
    asked: list[tuple[str, str]] = []

    def locate(name: str, key: str) -> str:
        asked.append((name, key))
        return f"/warehouse/{name}/"

    routes = resolve_routes(cfg, locate)
    assert asked == [("db.events", "delta.table_name"), ("db.events_dead_letter", "dead_letter.table_name")]
    assert routes.keyed_tables() == [
        (TableLocation("/warehouse/db.events", "db.events"), "delta.table_name"),
        (TableLocation("/warehouse/db.events_dead_letter", "db.events_dead_letter"), "dead_letter.table_name"),
    ]
    assert resolve_routes(cfg, locate) == routes  # the config is left as it was: resolved again, the same
    with pytest.raises(ValueError, match=r"delta.table_name = 'db.events' names a table in the catalog"):
        resolve_routes(cfg)  # no catalog to locate it in: never a table at an empty path


def test_routed_topics_on_one_table_written_two_ways_share_it() -> None:
    cfg = load_config(
        None,
        [
            "kafka.bootstrap_servers=h:1",
            "kafka.group_id=g",
            'kafka.topics=["orders", "audit"]',
            "topics.orders.table_path=s3a://bucket/orders",
            "topics.audit.table_path=s3a://bucket/orders/",
            "dead_letter.table_path=s3a://bucket/dead",
        ],
    )
    assert [(r.topics, r.location) for r in resolve_routes(cfg).main] == [
        (("orders", "audit"), TableLocation.at("s3a://bucket/orders"))
    ]


def test_a_table_at_the_root_of_its_store_has_no_folder_beside_it() -> None:
    for root in ("s3a://bucket", "s3a://bucket/"):
        with pytest.raises(ValueError, match="at the root of its store"):
            TableLocation.at(root).beside(".lease.json")
    assert TableLocation.at("/events").beside(".lock") == "/.events.lock"
