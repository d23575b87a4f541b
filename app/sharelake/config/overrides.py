"""`--set section.key=value` overrides: each read (`parse_override`) and set into a config's data
(`merge_overrides`), before any validation.

Light on purpose (the standard library and `ConfigError` only): spark-submit.sh reads the job's
application name through it before every submit (`sharelake.config.app_name`), without the models.
"""

from __future__ import annotations

import tomllib
from typing import Any

from sharelake.failures.errors import ConfigError

__all__ = ["merge_overrides", "parse_override"]


# sections whose keys are another tool's dotted names (librdkafka's, Spark's): `--set` keeps the rest whole
FLAT_SECTIONS: tuple[tuple[str, ...], ...] = (("kafka", "client"), ("spark_conf",))


def parse_override(item: str) -> tuple[list[str], Any]:
    """`section.key=value` -> (["section", "key"], value); the value is read as TOML when it parses."""
    if "=" not in item:
        raise ConfigError(f"override {item!r}: write it as section.key=value, e.g. kafka.topic=events")
    dotted, raw = item.split("=", 1)
    path = [p for p in dotted.strip().split(".") if p]
    if not path:
        raise ConfigError(f"override {item!r}: the key is empty; write section.key=value")
    for section in FLAT_SECTIONS:  # their keys are dotted names (`fs.s3a.endpoint` beside `fs.s3a.endpoint.region`)
        if tuple(path[: len(section)]) == section and len(path) > len(section):
            path = [*section, ".".join(path[len(section) :])]
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return path, value


def merge_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`data` with each override set in it, in order (in place; a section made where it is missing)."""
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {item!r}: {part} is a value, not a section")
            node = nxt
        node[path[-1]] = value
    return data
