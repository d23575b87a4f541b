"""The group types (`kafka.group_type`), listed once: the registry the job's type is taken from.

`GROUP_TYPES` lists every type, one line each; `GROUP_TYPES_BY_NAME` holds them by their `name` (the config value),
and `group_type` makes the one `kafka.group_type` names. Each type is its own module behind the seam of
`sharelake.consume.group_type`, importing it and never this module, so nothing imports back here. A type declares
what the rest of the job needs of it (its noun, its offsets' label, its member cap, its delivery limit's setting), so
nothing else asks which type it is. Adding a group type: its module (a `GroupType` naming itself in `name`), one line
in `GROUP_TYPES`, and its value among `kafka.group_type`'s allowed ones (`sharelake.config.settings`).
"""

from __future__ import annotations

from sharelake.config.settings import KafkaConfig
from sharelake.consume.classic.consumer_group import ConsumerGroupType
from sharelake.consume.group_type import GroupType
from sharelake.consume.share.share_group import ShareGroupType

# every group type, one line each
GROUP_TYPES: tuple[type[GroupType], ...] = (
    ShareGroupType,
    ConsumerGroupType,
)

GROUP_TYPES_BY_NAME: dict[str, type[GroupType]] = {t.name: t for t in GROUP_TYPES}


def group_type(k: KafkaConfig) -> GroupType:
    """The group type `kafka.group_type` names, as its module makes it by default (a share group's consumers:
    confluent-kafka's `ShareConsumer`; a test that provokes faults builds its `ShareGroupType` itself)."""
    return GROUP_TYPES_BY_NAME[k.group_type]()
