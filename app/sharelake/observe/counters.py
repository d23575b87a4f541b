"""What a run counts, declared once: each counter's name, meaning and kind, next to where it is kept.

Counters are kept where the work happens, by their owners: each group member (`MemberStats`, written by its own
thread), the Delta sink (`SinkStats`), each Delta table (`TableStats`) and the member pool (its gauges). Every
field that is a counter or gauge is declared with `counter()` or `gauge()` from here, with its doc.
`collect()` reads every declared field of the owners into one flat dict (a name kept by several
owners is summed: the members' counts, both tables' duplicates), and the three places that show
counters read that dict only: the progress line, the Prometheus endpoint and the run summary. A counter added to
an owner shows in all three. `summed` adds up owners of one kind into a fresh one (the members' totals).

Names: a field's name, or `name=` (with `{prefix}` for the table's role: "" for the main table,
"dead_letter_" for the dead-letter table). `prometheus=` renames it there (kept for dashboards),
`prometheus=None` leaves it out. A dict-valued counter is one Prometheus metric labelled `label=`
(seconds per sink step: `phase`; dead letters per error class: `error_class`), and one entry per
key in the summary (`<key>_s` for seconds, else `<name>.<key>`). A gauge several owners keep is
their largest value (the newest commit of several tables), a counter their sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar

Kind = Literal["counter", "gauge"]
T = TypeVar("T")


def counter(
    doc: str,
    *,
    name: str | None = None,
    prometheus: str | bool | None = True,
    default: Any = 0,
    label: str = "phase",
) -> Any:
    """A field that only grows during a run (a dict of them: one per `label` value)."""
    return _declared("counter", doc, name, prometheus, default, label)


def gauge(doc: str, *, name: str | None = None, prometheus: str | bool | None = True, default: Any = 0) -> Any:
    """A field that is a current or extreme value (a version, the longest cycle)."""
    return _declared("gauge", doc, name, prometheus, default, "")


def _declared(kind: Kind, doc: str, name: str | None, prometheus: str | bool | None, default: Any, label: str) -> Any:
    meta = {"kind": kind, "doc": doc, "name": name, "prometheus": prometheus, "label": label}
    if callable(default):
        return field(default_factory=default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Declared:
    """One declared counter of one owner, with its current value."""

    name: str  # in the run summary and the progress line
    kind: Kind
    doc: str
    prometheus: str | None  # its Prometheus name (without sharelake_ and _total), None: not exported
    value: Any  # a number, or a dict of numbers (a labelled counter)
    label: str = "phase"  # a labelled counter's Prometheus label


def declared(owner: Any) -> Iterator[Declared]:
    """Every declared counter and gauge of one owner (a stats dataclass), in declaration order."""
    prefix = getattr(owner, "prefix", "")
    for f in fields(owner):
        meta = f.metadata
        if "kind" not in meta:
            continue
        name = (meta["name"] or f.name).format(prefix=prefix)
        prom = meta["prometheus"]
        exported = None if prom is None or prom is False else name if prom is True else str(prom).format(prefix=prefix)
        yield Declared(name, meta["kind"], meta["doc"], exported, getattr(owner, f.name), meta["label"])


def collect(owners: Iterable[Any]) -> dict[str, Any]:
    """One flat dict of every owner's declared counters; a name several owners keep is summed."""
    out: dict[str, Any] = {}
    for owner in owners:
        for d in declared(owner):
            if isinstance(d.value, dict):
                merged = out.setdefault(d.name, {})
                for k, v in d.value.items():
                    merged[k] = merged.get(k, 0) + v
            elif d.kind == "gauge" and d.name in out:
                out[d.name] = max(out[d.name], d.value)
            else:
                out[d.name] = out.get(d.name, 0) + d.value
    return out


def catalogue(owners: Iterable[Any]) -> dict[str, Declared]:
    """name -> its declaration (values summed as in `collect`): for the Prometheus endpoint."""
    values = collect(owners)
    out: dict[str, Declared] = {}
    for owner in owners:
        for d in declared(owner):
            out.setdefault(d.name, Declared(d.name, d.kind, d.doc, d.prometheus, values[d.name], d.label))
    return out


def summed(owners: list[T], empty: T) -> T:
    """`empty` (a fresh owner) with each declared counter set to its sum over `owners`."""
    for f in fields(empty):  # type: ignore[arg-type]
        if f.metadata.get("kind") == "counter" and not isinstance(getattr(empty, f.name), dict):
            setattr(empty, f.name, sum(getattr(o, f.name) for o in owners))
    return empty
