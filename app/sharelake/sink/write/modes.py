"""The write modes by their `write.mode` name, and the one place a route's mode is built from its config.

A new mode is its own module (a `WriteMode`, `sharelake.sink.write.mode`, declaring what it needs), its
config (`WriteConfig`), and one entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from sharelake.config.routes import Route
from sharelake.sink.write.mode import Append, WriteMode
from sharelake.sink.write.upsert import Upsert

MODES: Mapping[str, type[WriteMode]] = MappingProxyType({mode.name: mode for mode in (Append, Upsert)})


def write_mode(route: Route) -> WriteMode:
    """The write mode a route's `write` keys ask for, given the other modes (their tables it refuses)."""
    chosen = MODES[route.write.mode]
    return chosen.of_route(route, [mode for mode in MODES.values() if mode is not chosen])
