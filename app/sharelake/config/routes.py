"""Which table each topic lands in: the routes a valid config's routing keys resolve to.

The rules those keys follow are `sharelake.config.settings.check_routes`, beside the config's model that
runs them when it is validated (a broken rule is a load-time error naming the keys); this module
reads only a config that passed them. `resolve_routes` turns a valid config into `Routes`, an immutable
value: one `Route` per main table, and the dead-letter table with the key that names it. A table
named in the catalog gets its path from `locate` then; the config itself never changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sharelake.config.settings import named_table, table_write, topics_by_table
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


# -- what a valid config's routing keys name ------------------------------------------------------


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
    located_dead = located(dead, dead_key) if cfg.dead_letter.writes_table else None
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
