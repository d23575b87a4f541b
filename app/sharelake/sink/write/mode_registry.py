"""The write modes by their `write.mode` name, and the one place a route's mode is built from its config.

A new mode is its own module (a `WriteMode`, `sharelake.sink.write.write_mode`, declaring what it needs), its
config value (`WriteConfig.mode`), and one entry in `MODES`. Building a route's mode is also where the route's
payload envelope is checked against what the mode takes (the config's models cannot ask the modes).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from sharelake.config.routes import Route
from sharelake.failures.errors import ConfigError
from sharelake.sink.write.append import Append
from sharelake.sink.write.upsert import Upsert
from sharelake.sink.write.write_mode import WriteMode

# every write mode, one entry each
MODES: Mapping[str, type[WriteMode]] = MappingProxyType({mode.name: mode for mode in (Append, Upsert)})


def write_mode(route: Route) -> WriteMode:
    """The write mode a route's `write` keys ask for, given the other modes (their tables it refuses);
    ConfigError (one line) when the mode does not take the route's payload envelope."""
    chosen = MODES[route.write.mode]
    envelope = route.payload.envelope
    if envelope not in chosen.envelopes:
        taker = next(mode for mode in MODES.values() if envelope in mode.envelopes)
        raise ConfigError(taker.envelope_refusal(envelope, route.write_key))
    return chosen.of_route(route, [mode for mode in MODES.values() if mode is not chosen])
