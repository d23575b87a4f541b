"""Which table each topic lands in: the rules the routing keys follow, and the routes they resolve to.

`check_routes` holds the rules (`kafka.topic` with `delta.table_path` / `table_name`, or
`kafka.topics` with a `[topics.<name>]` section each; topics sharing a table share its payload,
layout and write keys); the config's model runs it when it is validated, so a broken rule is a
load-time error naming the keys. `resolve_routes` turns a valid config into `Routes`, an immutable
value: one `Route` per main table, and the dead-letter table with the key that names it. A table
named in the catalog gets its path from `locate` then; the config itself never changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sharelake.table.layout import TableLayout
from sharelake.table.location import TableLocation

if TYPE_CHECKING:
    from sharelake.config.settings import SharelakeConfig, WriteConfig
    from sharelake.formats.base import FormatSettings

Locate = Callable[[str, str], str]  # (catalog name, the config key naming it) -> where the table is


@dataclass(frozen=True)
class Route:
    """One destination: its topics, its main table, how their values are read and the table takes them."""

    topics: tuple[str, ...]
    location: TableLocation
    payload: FormatSettings
    key: str  # the config key naming its table, for error lines
    layout: TableLayout  # asked for (empty: the table keeps its own)
    layout_key: str  # the section holding the layout keys, for error lines
    write: WriteConfig  # appended, or upserted by key
    write_key: str  # the section holding the write keys, for error lines


@dataclass(frozen=True)
class Routes:
    """Every table a job writes: the main tables' routes, then the one dead-letter table and its key.
    Each table named in the catalog has its path (`resolve_routes` located it)."""

    main: tuple[Route, ...]
    dead_letter: TableLocation | None  # None: the dead letters go to no table (`dead_letter.sink`)
    dead_letter_key: str  # the config key naming the dead-letter table, for error lines

    def tables(self) -> list[TableLocation]:
        """The main tables, then the dead-letter table (when there is one)."""
        return [location for location, _ in self.keyed_tables()]

    def keyed_tables(self) -> list[tuple[TableLocation, str]]:
        """Each table with the config key that names it, in the order of `tables`."""
        dead = [] if self.dead_letter is None else [(self.dead_letter, self.dead_letter_key)]
        return [*((r.location, r.key) for r in self.main), *dead]


# -- the rules, checked when the config is validated (ValueError: one line naming the keys) -------


def check_routes(cfg: SharelakeConfig) -> None:
    """The routing keys of `cfg` follow the rules; ValueError naming the keys when they do not."""
    _one_table("dead_letter", cfg.dead_letter.table_path, cfg.dead_letter.table_name, required=False)
    if cfg.kafka.topic is not None:
        _check_one_topic(cfg)
    else:
        _check_routed(cfg)


def _check_one_topic(cfg: SharelakeConfig) -> None:
    if cfg.delta.table_path is None and cfg.delta.table_name is None:
        raise ValueError(
            "kafka.topic needs delta.table_path (a path) or delta.table_name (a catalog name): "
            "the table its records land in"
        )
    _one_table("delta", cfg.delta.table_path, cfg.delta.table_name)
    if cfg.topics:
        raise ValueError("[topics.<name>] sections route kafka.topics; with kafka.topic use delta.table_path")
    check_envelope(cfg.payload, cfg.write)


def _check_routed(cfg: SharelakeConfig) -> None:
    subscribed = cfg.kafka.subscribed
    unrouted = [t for t in subscribed if t not in cfg.topics]
    if unrouted:
        raise ValueError(
            f"kafka.topics subscribes to {', '.join(unrouted)}, which no [topics.<name>] section routes: "
            f"add [topics.{unrouted[0]}] with its table_path, or drop the topic from kafka.topics"
        )
    stray = [t for t in cfg.topics if t not in subscribed]
    if stray:
        raise ValueError(f"[topics.{stray[0]}] routes a topic kafka.topics does not list: add it there or drop it")
    if cfg.delta.table_path is not None or cfg.delta.table_name is not None:
        raise ValueError("delta.table_path is for kafka.topic; routed topics name theirs in [topics.<name>]")
    no_table = cfg.dead_letter.table_path is None and cfg.dead_letter.table_name is None
    if no_table and cfg.dead_letter.sink == "table":
        raise ValueError(
            "kafka.topics needs dead_letter.table_path (or dead_letter.table_name): the one dead-letter "
            "table all topics share"
        )
    for topic in subscribed:
        _one_table(f"topics.{topic}", cfg.topics[topic].table_path, cfg.topics[topic].table_name)
    for table, names in topics_by_table(cfg).items():
        _check_shared_table(cfg, table, names)


def _check_shared_table(cfg: SharelakeConfig, table: TableLocation, names: list[str]) -> None:
    """Topics sharing a table share its payload, its layout keys and its write keys."""
    payloads = [cfg.topics[t].payload for t in names]
    if any(p != payloads[0] for p in payloads):
        raise ValueError(
            f"topics {', '.join(names)} share the table {table.path or f'name:{table.name}'} but read "
            "their values differently: one payload per table"
        )
    chosen = {t: layout for t in names if (layout := cfg.topics[t].layout()).chosen}
    if len(set(chosen.values())) > 1:
        raise ValueError(
            f"topics {', '.join(chosen)} share a table but ask for different layouts: give the layout "
            "keys (partition_by, cluster_by, generated_columns) in one of their sections"
        )
    writes = [w for t in names if (w := cfg.topics[t].write) is not None]
    if writes and (len(writes) < len(names) or any(w != writes[0] for w in writes)):
        raise ValueError(
            f"topics {', '.join(names)} share a table but not its [topics.<name>.write] keys: one write "
            "mode per table; give every topic sharing it the same write section"
        )
    check_envelope(payloads[0], *table_write(cfg, names))


def check_envelope(payload: FormatSettings, write: WriteConfig, section: str = "write") -> None:
    """Debezium events are upserted by key, never appended."""
    if payload.envelope == "debezium" and write.mode != "upsert":
        raise ValueError(
            f'payload.envelope = "debezium" upserts change events by key: set {section}.mode = "upsert" and '
            f"{section}.keys (the table's key columns)"
        )


def _one_table(section: str, path: str | None, name: str | None, required: bool = True) -> None:
    if path is not None and name is not None:
        raise ValueError(f"{section}.table_path and {section}.table_name both name the table: keep one")
    if required and path is None and name is None:
        raise ValueError(f"{section} needs table_path (a path) or table_name (a catalog name, db.table)")


# -- what a valid config's routing keys name ------------------------------------------------------


def named_table(path: str | None, name: str | None) -> TableLocation | None:
    """The table a `table_path` / `table_name` pair names (a name not located yet), or None."""
    if path is not None:
        return TableLocation.at(path)
    if name is not None:
        return TableLocation.named(name)
    return None


def topics_by_table(cfg: SharelakeConfig) -> dict[TableLocation, list[str]]:
    """Routed mode: each table (by path, or by name) with the topics routed to it, in `kafka.topics`' order."""
    by_table: dict[TableLocation, list[str]] = {}
    for topic in cfg.kafka.subscribed:
        route = cfg.topics[topic]
        table = named_table(route.table_path, route.table_name)
        assert table is not None, "check_routes: each routed topic names its table"
        by_table.setdefault(table, []).append(topic)
    return by_table


def table_write(cfg: SharelakeConfig, names: list[str]) -> tuple[WriteConfig, str]:
    """How the table of the routed topics `names` takes its records, and the section saying so: their
    `[topics.<name>.write]` (the same in each: `check_routes`), else `[write]`."""
    write = cfg.topics[names[0]].write
    return (write, f"topics.{names[0]}.write") if write is not None else (cfg.write, "write")


def table_layout(cfg: SharelakeConfig, names: list[str]) -> tuple[TableLayout, str]:
    """The layout the table of the routed topics `names` asks for, and the section giving it: the
    first of their sections with layout keys, else `[delta]`'s (the default of every routed table)."""
    for topic in names:
        layout = cfg.topics[topic].layout()
        if layout.chosen:
            return layout, f"topics.{topic}"
    return cfg.delta.layout(), "delta"


def kept_tombstones(payload: FormatSettings, write: WriteConfig) -> FormatSettings:
    """The payload keys a table's records are read with: an upsert that deletes on tombstones (as
    every upsert of Debezium events does) keeps records without a value (`allow_null_value`),
    whatever `[payload]` says."""
    if (write.delete_on_tombstone or payload.envelope == "debezium") and not payload.allow_null_value:
        return payload.model_copy(update={"allow_null_value": True})
    return payload


# -- the resolved routes --------------------------------------------------------------------------


def resolve_routes(cfg: SharelakeConfig, locate: Locate | None = None) -> Routes:
    """The routes of a valid `cfg`, each table named in the catalog located by `locate(name, key)`
    (`sharelake.sink.delta.catalog_tables.locate_table` with the job's session). `locate` may be None
    only when every table is given by path; a named one then raises ValueError."""

    def located(where: TableLocation, key: str) -> TableLocation:
        if where.name is None:
            return where
        if locate is None:
            raise ValueError(f"{key} = {where.name!r} names a table in the catalog: resolving it needs `locate`")
        return where.located(locate(where.name, key))

    main = _one_topic_routes(cfg) if cfg.kafka.topic is not None else _routed_routes(cfg)
    given = named_table(cfg.dead_letter.table_path, cfg.dead_letter.table_name)
    dead = given if given is not None else main[0].location.dead_letter()  # <main table's path or name>_dead_letter
    dead_key = "dead_letter.table_path" if dead.name is None else "dead_letter.table_name"
    located_main = tuple(replace(r, location=located(r.location, r.key)) for r in main)  # first: their errors first
    located_dead = located(dead, dead_key) if cfg.dead_letter.sink == "table" else None
    return Routes(located_main, located_dead, dead_key)


def _one_topic_routes(cfg: SharelakeConfig) -> tuple[Route, ...]:
    where = named_table(cfg.delta.table_path, cfg.delta.table_name)
    assert where is not None and cfg.kafka.topic is not None, "check_routes: kafka.topic names its table"
    key = "delta.table_path" if where.name is None else "delta.table_name"
    payload = kept_tombstones(cfg.payload, cfg.write)
    return (Route((cfg.kafka.topic,), where, payload, key, cfg.delta.layout(), "delta", cfg.write, "write"),)


def _routed_routes(cfg: SharelakeConfig) -> tuple[Route, ...]:
    routes = []
    for table, names in topics_by_table(cfg).items():
        key = f"topics.{names[0]}.table_path" if table.name is None else f"topics.{names[0]}.table_name"
        write, write_key = table_write(cfg, names)
        layout, layout_key = table_layout(cfg, names)
        payload = kept_tombstones(cfg.topics[names[0]].payload, write)
        routes.append(Route(tuple(names), table, payload, key, layout, layout_key, write, write_key))
    return tuple(routes)
