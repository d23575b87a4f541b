"""The payload formats: one module each, behind the seam of `sharelake.formats.base`.

`READERS` lists every format, one line each; `FORMATS` (the readers by name) and `PayloadSettings` (the
`[payload]` section: the settings model of the format its `format` key names, a pydantic discriminated union; its
order is the config reference's) are both built from it. `payload_format` builds a format's reader from its
settings, wrapped in a `KeyedFormat` (`sharelake.formats.keys`) when `key_format` is not raw. Adding a format: a module
with its settings and its `PayloadFormat` (naming its settings in `settings_model`), and one line in `READERS`.
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Discriminator, Tag

from sharelake.formats.avro import AvroFormat
from sharelake.formats.base import FormatSettings, PayloadFormat
from sharelake.formats.json import JsonFormat
from sharelake.formats.json_schema import JsonSchemaFormat
from sharelake.formats.keys import KeyedFormat, key_reader
from sharelake.formats.protobuf import ProtobufFormat
from sharelake.formats.raw import RawFormat
from sharelake.formats.schema_registry_client import SchemaRegistry
from sharelake.formats.text import TextFormat

# every payload format, one line each
READERS: tuple[type[PayloadFormat], ...] = (
    RawFormat,
    TextFormat,
    JsonFormat,
    AvroFormat,
    ProtobufFormat,
    JsonSchemaFormat,
)

FORMATS: dict[str, type[PayloadFormat]] = {f.name: f for f in READERS}


def _format_of(value: Any) -> str:
    """The `format` key of a `[payload]` section (raw when absent)."""
    found = value.get("format", "raw") if isinstance(value, dict) else getattr(value, "format", "raw")
    return str(found)


if TYPE_CHECKING:  # a union built at run time: type checkers see what every member is
    PayloadSettings = FormatSettings
else:
    PayloadSettings = Annotated[
        functools.reduce(operator.or_, (Annotated[f.settings_model, Tag(f.name)] for f in READERS)),
        Discriminator(_format_of),
    ]


def payload_format(settings: FormatSettings) -> PayloadFormat:
    """The reader of the format `settings` describe, keys included (its `start` runs the start-up check)."""
    values = FORMATS[settings.format](settings)
    if settings.key_format == "raw":
        return values
    registry = SchemaRegistry(settings.registry) if settings.registry is not None else None
    return KeyedFormat(values, key_reader(settings.key_format, registry))
