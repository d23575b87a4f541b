"""Share-group settings the job owns: applied on the GROUP resource before any member polls.

Called once by `app.pipeline` at start. The group's `share.auto.offset.reset` defaults to `latest`
on the broker, which would silently skip every record produced before the group first existed, so
the job sets it (unless configured `unchanged`); the record lock duration and the in-flight record
cap per partition can be set the same way.
"""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from app.config import KafkaConfig


def desired_group_settings(cfg: KafkaConfig) -> dict[str, str]:
    settings: dict[str, str] = {}
    if cfg.auto_offset_reset != "unchanged":
        settings["share.auto.offset.reset"] = cfg.auto_offset_reset
    if cfg.record_lock_duration_ms is not None:
        settings["share.record.lock.duration.ms"] = str(cfg.record_lock_duration_ms)
    if cfg.partition_max_record_locks is not None:
        settings["share.partition.max.record.locks"] = str(cfg.partition_max_record_locks)
    return settings


def apply_group_settings(admin: AdminClient, group_id: str, settings: dict[str, str], timeout_s: float = 30) -> None:
    """IncrementalAlterConfigs(SET) of `settings` on the share group `group_id`."""
    if not settings:
        return
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()]
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=timeout_s)


def read_group_settings(admin: AdminClient, group_id: str, timeout_s: float = 30) -> dict[str, str]:
    """The group's effective config (describe_configs on the GROUP resource)."""
    resource = ConfigResource(ResourceType.GROUP, group_id)
    (future,) = admin.describe_configs([resource]).values()
    return {name: entry.value for name, entry in future.result(timeout=timeout_s).items()}
