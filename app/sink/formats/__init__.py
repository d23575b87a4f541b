"""The payload formats: one module each, behind the seam of `app.sink.formats.base`.

`PayloadSettings` is the `[payload]` section: the settings model of the format its `format` key
names (validated by `app.config`). `payload_format` builds that format's reader (called by
`app.pipeline`). Adding a format: a module with its settings and its `PayloadFormat`, and one line
in each of `PayloadSettings` and `FORMATS`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Tag

from app.sink.formats.avro import AvroFormat, AvroSettings
from app.sink.formats.base import FormatSettings, PayloadFormat
from app.sink.formats.json import JsonFormat, JsonSettings
from app.sink.formats.raw import RawFormat, RawSettings
from app.sink.formats.text import TextFormat, TextSettings

FORMATS: dict[str, type[PayloadFormat]] = {f.name: f for f in (RawFormat, TextFormat, JsonFormat, AvroFormat)}


def _format_of(value: Any) -> str:
    """The `format` key of a `[payload]` section (raw when absent)."""
    found = value.get("format", "raw") if isinstance(value, dict) else getattr(value, "format", "raw")
    return str(found)


PayloadSettings = Annotated[
    Annotated[RawSettings, Tag("raw")]
    | Annotated[TextSettings, Tag("text")]
    | Annotated[JsonSettings, Tag("json")]
    | Annotated[AvroSettings, Tag("avro")],
    Discriminator(_format_of),
]


def payload_format(settings: FormatSettings) -> PayloadFormat:
    """The reader of the format `settings` describe (its `start` runs the start-up check)."""
    return FORMATS[settings.format](settings)
