"""The group types' registry (app/sharelake/consume/group_types.py): one type per allowed `kafka.group_type` value,
made by name. No broker."""

from __future__ import annotations

from typing import get_args

import pytest

from sharelake.config.settings import KafkaConfig
from sharelake.consume.group_types import GROUP_TYPES, GROUP_TYPES_BY_NAME, group_type


def test_the_registry_holds_one_type_per_allowed_config_value() -> None:
    allowed = set(get_args(KafkaConfig.model_fields["group_type"].annotation))
    assert set(GROUP_TYPES_BY_NAME) == allowed
    assert len(GROUP_TYPES) == len(GROUP_TYPES_BY_NAME)  # no two types share a name


@pytest.mark.parametrize("name", sorted(GROUP_TYPES_BY_NAME))
def test_group_type_makes_the_type_the_config_names(name: str) -> None:
    made = group_type(KafkaConfig.model_construct(group_type=name))
    assert made.name == name and isinstance(made, GROUP_TYPES_BY_NAME[name])
