"""Reading a config: a TOML file, then `--set section.key=value` overrides over it, validated by the
models (`sharelake.config.settings`); the first problem as a `ConfigError` whose one line names the key
and the fix (`load_config`).

An override is read as a TOML value when it parses, else as a string (`sharelake.config.overrides`). Overriding one
routing or table key replaces the file's keys it contradicts (`kafka.topics` the file's `kafka.topic` and its
table, a `table_path` the file's `table_name`, and back), so a command line can switch the mode.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sharelake.config.overrides import merge_overrides, parse_override
from sharelake.config.settings import SharelakeConfig
from sharelake.failures.errors import ConfigError
from sharelake.formats import FORMATS
from sharelake.secrets import is_secret_key

__all__ = ["load_config", "merge_overrides", "parse_override"]


def _one_line(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"]]
    tag = next((i for i in range(1, len(loc)) if loc[i - 1] == "payload" and loc[i] in FORMATS), None)
    if tag is not None:  # the format's tag is how pydantic chose the section's model: not a key
        loc = [*loc[:tag], *loc[tag + 1 :]]
    key = ".".join(loc) or "(top level)"
    kind = first["type"]
    got = first.get("input")
    if kind == "missing":
        return f"config key {key} is required: add it to the config file or pass --set {key}=..."
    if kind == "union_tag_invalid":
        tag = first.get("ctx", {}).get("tag")
        return f"config key {key}.format = {tag!r}: not a payload format; use one of {', '.join(FORMATS)}"
    if kind == "extra_forbidden" and tag is not None:
        fmt = first["loc"][tag]
        return f"config key {key} does not apply to payload.format = {fmt!r}: remove it (see conf/local.toml)"
    if kind == "extra_forbidden":
        return f"config key {key} is not a known key: remove it or fix its spelling (see conf/local.toml)"
    if kind == "value_error" and not loc:  # a rule across sections: the message names the keys
        return str(first["msg"]).removeprefix("Value error, ")
    if kind == "value_error" and isinstance(got, dict):  # a section-level rule: the message names the keys
        return f"config key {key}: {first['msg'].removeprefix('Value error, ')}"
    if kind == "value_error" and first["msg"].startswith("Value error, " + key):  # the message names the key
        return first["msg"].removeprefix("Value error, ")
    shown = "<hidden>" if is_secret_key(key) else repr(got)
    return f"config key {key} = {shown}: {first['msg']}; fix the value (see conf/local.toml)"


def _switch_mode(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """An override of `kafka.topics` replaces the file's one-topic keys (`kafka.topic`,
    `delta.table_path` / `table_name`); one of `kafka.topic` replaces the file's routing
    (`kafka.topics`, [topics]); a table given by path replaces the file's by name, and back."""
    keys = {tuple(parse_override(item)[0][:2]) for item in overrides}
    for section in ("delta", "dead_letter"):
        table = data.get(section)
        for given, other in (("table_path", "table_name"), ("table_name", "table_path")):
            if isinstance(table, dict) and (section, given) in keys and (section, other) not in keys:
                table.pop(other, None)
    kafka, delta = data.get("kafka"), data.get("delta")
    if ("kafka", "topics") in keys and ("kafka", "topic") not in keys:
        if isinstance(kafka, dict):
            kafka.pop("topic", None)
        for key in ("table_path", "table_name"):
            if isinstance(delta, dict) and ("delta", key) not in keys:
                delta.pop(key, None)
    if ("kafka", "topic") in keys and ("kafka", "topics") not in keys:
        if isinstance(kafka, dict):
            kafka.pop("topics", None)
        data.pop("topics", None)
    return data


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> SharelakeConfig:
    """Read, merge and validate; raise `ConfigError` with one line on the first problem."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist: pass --config with a file from conf/")
        try:
            data = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {p} is not valid TOML: {e}") from None
    data = merge_overrides(_switch_mode(data, overrides or []), overrides or [])
    try:
        return SharelakeConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_one_line(e)) from None
