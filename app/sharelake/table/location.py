"""Where a table is: its path (local, `file:`, `hdfs://`, `s3a://`, ...) and, when the config names it
in the catalog, its catalog name. Normalised once, here, so every part of a job that keys, compares
or derives from a table's location (its writer, its writer lease, its `_delta_log`, its dead-letter
table) sees the same value: `s3a://bucket/events/` is `s3a://bucket/events`.

Built when the config's routes are resolved (`sharelake.config.routes.resolve_routes`: one per route, and
the dead-letter table's), a table named in the catalog given its path there (at start, with
`sharelake.sink.delta.catalog_tables.locate_table`); the tests, the warm-up and the benchmarks build their
own with `TableLocation.at(path)`. Everything below the config takes one; `str(location)` is its
path, what Spark and Hadoop are given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

DEAD_LETTER_SUFFIX = "_dead_letter"  # a main table's default dead-letter table: its path (or name) + this
DELTA_LOG = "_delta_log"


def normalise(path: str) -> str:
    """`path` without its trailing slashes, unless only a root or a scheme would be left (`/`, `file:///`)."""
    stripped = path.rstrip("/")
    if not stripped or stripped.endswith(":"):
        return path
    return stripped


@dataclass(frozen=True)
class TableLocation:
    """A table's location: `path` (normalised; "" for a table named in the catalog until it is
    located) and its catalog `name` (None for a table given by path). Equal locations are one table."""

    path: str
    name: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", normalise(os.fspath(self.path)))

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> TableLocation:
        """The table at `path`."""
        return cls(os.fspath(path))

    @classmethod
    def named(cls, name: str) -> TableLocation:
        """The table named `name` in the catalog, not located yet (`located`)."""
        return cls("", name)

    def located(self, path: str) -> TableLocation:
        """This named table, at `path` (where the catalog has it, or will create it)."""
        return replace(self, path=path)

    @property
    def delta_log(self) -> str:
        """The table's Delta log directory."""
        return f"{self.path}/{DELTA_LOG}"

    def file(self, relative: str) -> str:
        """A file under the table's directory (`_sharelake/writer-lease.json`, `_delta_log/_last_checkpoint`)."""
        return f"{self.path}/{relative}"

    def beside(self, suffix: str) -> str:
        """A file beside the table's folder, in the folder that holds it: `<parent>/.<table><suffix>`
        (`s3a://bucket/events` -> `s3a://bucket/.events<suffix>`). Not inside: any file in a table's
        folder before its first commit makes Delta's create of a partitioned or clustered table skip
        the create. ValueError for a table at a root (`s3a://bucket`): nothing holds its folder."""
        parent, slash, name = self.path.rpartition("/")
        if slash and not parent:  # a local table in `/`
            return f"/.{name}{suffix}"
        if not parent or parent.endswith((":", ":/")) or not name:
            raise ValueError(f"{self.path!r} is at the root of its store: no folder holds it")
        return f"{parent}/.{name}{suffix}"

    def dead_letter(self) -> TableLocation:
        """The default dead-letter table of this main table: its path (or its name) + `_dead_letter`."""
        if self.name is not None:
            return TableLocation.named(self.name + DEAD_LETTER_SUFFIX)
        return TableLocation.at(self.path + DEAD_LETTER_SUFFIX)

    def describe(self) -> str:
        """For a log line: the path, or `name (at path)`."""
        return self.path if self.name is None else f"{self.name} (at {self.path})"

    def __str__(self) -> str:
        return self.path
