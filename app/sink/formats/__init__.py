"""The payload formats: one module each, behind the seam of `app.sink.formats.base`.

`PayloadSettings` is the `[payload]` section: the settings model of the format its `format` key
names (validated by `app.config`). `payload_format` builds that format's reader (called by
`app.pipeline`), wrapped in a `KeyedFormat` (`app.sink.formats.keys`) when `key_format` is not raw.
Adding a format: a module with its settings and its `PayloadFormat`, and one line in each of
`PayloadSettings` and `FORMATS`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Tag

from app.sink.formats.avro import AvroFormat, AvroSettings
from app.sink.formats.base import FormatSettings, PayloadFormat
from app.sink.formats.json import JsonFormat, JsonSettings
from app.sink.formats.keys import KeyedFormat, key_reader
from app.sink.formats.protobuf import ProtobufFormat, ProtobufSettings
from app.sink.formats.raw import RawFormat, RawSettings
from app.sink.formats.registry import SchemaRegistry
from app.sink.formats.text import TextFormat, TextSettings

FORMATS: dict[str, type[PayloadFormat]] = {
    f.name: f for f in (RawFormat, TextFormat, JsonFormat, AvroFormat, ProtobufFormat)
}


def _format_of(value: Any) -> str:
    """The `format` key of a `[payload]` section (raw when absent)."""
    found = value.get("format", "raw") if isinstance(value, dict) else getattr(value, "format", "raw")
    return str(found)


PayloadSettings = Annotated[
    Annotated[RawSettings, Tag("raw")]
    | Annotated[TextSettings, Tag("text")]
    | Annotated[JsonSettings, Tag("json")]
    | Annotated[AvroSettings, Tag("avro")]
    | Annotated[ProtobufSettings, Tag("protobuf")],
    Discriminator(_format_of),
]


def payload_format(settings: FormatSettings) -> PayloadFormat:
    """The reader of the format `settings` describe, keys included (its `start` runs the start-up check)."""
    values = FORMATS[settings.format](settings)
    if settings.key_format == "raw":
        return values
    registry = SchemaRegistry(settings.registry) if settings.registry is not None else None
    return KeyedFormat(values, key_reader(settings.key_format, registry))
