"""The configuration reference, generated from the config models: `docs/configuration.md`.

    python -m devkit.config_reference > docs/configuration.md

Every key's type, default and description come from the pydantic models (`sharelake.config.settings`, the payload
formats' settings in `sharelake.formats`), so a key is documented once, on its `Field`. The committed
file is checked against this output by `tests/test_docs.py`, which fails when they differ.
"""

from __future__ import annotations

import json
import re
import sys
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from sharelake.config.settings import SharelakeConfig, TopicRoute
from sharelake.formats import PayloadSettings
from sharelake.formats.base import FormatSettings, RegistrySettings

HEADER = """\
# Configuration reference

<!-- Generated from the config models by `python -m devkit.config_reference > docs/configuration.md`:
edit the `Field(description=...)` in app/sharelake/config/settings.py or app/sharelake/formats/, not this file
(tests/test_docs.py fails when the two differ). -->

A Sharelake config is a TOML file, given with `--config FILE`; any key can be overridden with
`--set section.key=value` (the value is read as TOML when it parses, else as a string). Unknown keys,
wrong types and missing required keys stop every subcommand at start with one line naming the key
(exit code 2, see [operations](operations.md#exit-codes)). `conf/local.toml` is a runnable example
with every key, set to its default or commented out; a test checks it against this reference.

Types: `"a" | "b"` is one of those strings; a range `1..64` includes both ends; *unset* means the key
is absent (the behaviour is described beside it).
"""


def _constraints(metadata: list[Any]) -> str:
    parts = []
    lo = next((m.ge for m in metadata if isinstance(m, Ge)), None)
    hi = next((m.le for m in metadata if isinstance(m, Le)), None)
    if lo is not None and hi is not None:
        parts.append(f"{lo}..{hi}")
    elif lo is not None:
        parts.append(f">= {lo}")
    elif hi is not None:
        parts.append(f"<= {hi}")
    parts += [f"> {m.gt}" for m in metadata if isinstance(m, Gt)]
    parts += [f"< {m.lt}" for m in metadata if isinstance(m, Lt)]
    parts += [f"length >= {m.min_length}" for m in metadata if isinstance(m, MinLen)]
    parts += [f"length <= {m.max_length}" for m in metadata if isinstance(m, MaxLen)]
    parts += [f"matching `{m.pattern}`" for m in metadata if getattr(m, "pattern", None)]
    return ", ".join(parts)


def type_name(annotation: Any, metadata: list[Any] | None = None) -> str:
    """A field's type as the reference writes it (`int >= 1`, `"sync" | "async"`, `list of strings`)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *extra = get_args(annotation)
        nested = [m for e in extra if isinstance(e, FieldInfo) for m in e.metadata]
        return type_name(inner, nested + [e for e in extra if not isinstance(e, FieldInfo)])
    if origin is Literal:
        return " | ".join(json.dumps(v) for v in get_args(annotation))
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:  # optional: the field's own bounds apply to the one type
            return type_name(args[0], metadata)
        return " | ".join(type_name(a) for a in args)
    if origin is list:
        (item,) = get_args(annotation)
        return f"list of {type_name(item)}s"
    if origin is dict:
        return "table"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    names = {str: "string", int: "int", float: "number", bool: "bool"}
    base = names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    bounds = _constraints(metadata or [])
    return f"{base} {bounds}" if bounds else base


def default_of(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "**required**"
    else:
        value = field.default
    if value is None:
        return "*unset*"
    if isinstance(value, BaseModel):
        return f"`format = {json.dumps(getattr(value, 'format', ''))}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{json.dumps(value)}`"
    if isinstance(value, dict | list):
        return "`{}`" if isinstance(value, dict) else "`[]`"
    return f"`{value}`"


def key_of(name: str, field: FieldInfo) -> str:
    return field.alias or name


def _row(key: str, field: FieldInfo, *, kind: str | None = None) -> str:
    text = (field.description or "").replace("|", "\\|").replace("\n", " ")
    shown = (kind or type_name(field.annotation, list(field.metadata))).replace("|", "\\|")
    return f"| `{key}` | {shown} | {default_of(field)} | {text} |"


def _table(prefix: str, model: type[BaseModel], skip: tuple[str, ...] = ()) -> list[str]:
    rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        rows.append(_row(f"{prefix}.{key_of(name, field)}", field))
    return rows


def _doc(model: type[BaseModel]) -> str:
    """The model's docstring as the section's lead, without the `[section]`: it opens with (the heading has it)."""
    text = re.sub(r"^`\[[^\]]+\]`: ", "", " ".join((model.__doc__ or "").split()))
    return text[:1].upper() + text[1:]


def format_models() -> list[type[FormatSettings]]:
    """The settings model of each payload format, in `PayloadSettings`' order."""
    union = get_args(PayloadSettings)[0]
    return [get_args(tagged)[0] for tagged in get_args(union)]


def reference() -> str:
    fields = SharelakeConfig.model_fields
    out = [HEADER]
    for section, field in fields.items():
        annotation = field.annotation
        if section == "payload":
            out += _payload()
            continue
        if section == "topics":
            out += ["## `[topics.<name>]`", "", field.description or "", "", _doc(TopicRoute), ""]
            out += _table("topics.<name>", TopicRoute, skip=("payload",))
            out += [_row("topics.<name>.payload", TopicRoute.model_fields["payload"], kind="section"), ""]
            continue
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += [f"## `[{section}]`", "", _doc(annotation), ""]
            out += _table(section, annotation)
            out.append("")
            continue
        out += [f"## `[{section}]`", "", field.description or "", ""]
    return "\n".join(out).rstrip() + "\n"


def _payload() -> list[str]:
    out = ["## `[payload]`", "", _doc(FormatSettings), ""]
    names = [str(m.model_fields["format"].default) for m in format_models()]
    out += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    kind = " | ".join(json.dumps(n) for n in names)
    fmt = FormatSettings.model_fields["format"]
    out.append(_row("payload.format", fmt, kind=kind).replace("**required**", f"`{json.dumps(names[0])}`"))
    out += _table("payload", FormatSettings, skip=("registry", "format"))[2:]
    out += [_row("payload.registry", FormatSettings.model_fields["registry"], kind="section"), ""]
    out += ["### Keys of one format", "", "A key of another format than `payload.format` is refused at start.", ""]
    out += ["| key | formats | type | default | description |", "| --- | --- | --- | --- | --- |"]
    own: dict[str, tuple[list[str], FieldInfo]] = {}
    for model in format_models():
        name = str(model.model_fields["format"].default)
        for key, field in model.model_fields.items():
            if key not in FormatSettings.model_fields:
                formats, first = own.setdefault(key_of(key, field), ([], field))
                if first.description != field.description:
                    raise ValueError(f"payload.{key}: described differently in two formats' settings")
                formats.append(name)
    for key, (formats, field) in own.items():
        row = _row(f"payload.{key}", field)
        head, rest = row.split(" | ", 1)
        out.append(f"{head} | {', '.join(formats)} | {rest}")
    out += ["", "### `[payload.registry]`", "", _doc(RegistrySettings), ""]
    out += _table("payload.registry", RegistrySettings)
    out.append("")
    return out


# sections whose keys are another tool's (librdkafka's, Spark's): any key goes
FREE_FORM = ("kafka.client", "spark_conf")


def documented_keys() -> dict[str, FieldInfo]:
    """Every config key the reference documents, by its dotted name (`topics.<name>.table_path`;
    `kafka.client` and `spark_conf` stand for their free-form sections)."""
    keys: dict[str, FieldInfo] = {}

    def add(prefix: str, model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            keys.setdefault(f"{prefix}.{key_of(name, field)}", field)  # `format`: the shared field's

    for section, field in SharelakeConfig.model_fields.items():
        annotation = field.annotation
        if section == "payload":
            models: list[type[BaseModel]] = [FormatSettings, *format_models()]
            for model in models:
                add("payload", model)
            add("payload.registry", RegistrySettings)
        elif section == "topics":
            add("topics.<name>", TopicRoute)
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            add(section, annotation)
        else:
            keys[section] = field
    return keys


if __name__ == "__main__":
    sys.stdout.write(reference())
