"""Share-group settings the job owns: applied on the GROUP resource before any member polls.

The group's `share.auto.offset.reset` defaults to `latest` on the broker, which would silently skip every record
produced before the group first existed, so the job sets it (unless configured `unchanged`). The in-flight record
cap per partition (`GROUP_LOCKS`) bounds the throughput on few partitions (locks x partitions per batch cycle): by
default the job raises it to what the broker allows (`broker_lock_cap`, at most `MAX_RECORD_LOCKS`). The record
lock duration can be set the same way, and the group's broker-side dead-letter topic (`DLQ_TOPIC`; its start-up
check is `sharelake.consume.share.broker_dead_letter_topic`'s).

An accepted alter is applied by each broker when it replays the cluster's metadata log, so
`settled_group_settings` reads the group back until the broker serves the applied values (bounded: then the values
as applied, with a warning). On brokers before 4.3 the delivery limit and the in-flight cap are broker configs
only (`BROKER_DEFAULTS`): `with_broker_defaults` fills them in from the broker's.
"""

from __future__ import annotations

import logging

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from sharelake.config.settings import MAX_RECORD_LOCKS, KafkaConfig

log = logging.getLogger(__name__)

BROKER_LOCK_CAP = "group.share.max.partition.max.record.locks"  # the broker's bound on the group setting
GROUP_LOCKS = "share.partition.max.record.locks"
DELIVERY_LIMIT = "share.delivery.count.limit"  # the group config (broker default 5)
# group config -> the broker config that is its value on brokers without the group config (4.2)
BROKER_DEFAULTS = {
    DELIVERY_LIMIT: "group.share.delivery.count.limit",
    GROUP_LOCKS: "group.share.partition.max.record.locks",
}
# the group's broker-side dead-letter topic (KIP-1191, Kafka 4.4): sharelake.consume.share.broker_dead_letter_topic
DLQ_TOPIC = "errors.deadletterqueue.topic.name"
DLQ_COPY_RECORD = "errors.deadletterqueue.copy.record.enable"


def desired_group_settings(cfg: KafkaConfig, broker_lock_cap: int | None = None) -> dict[str, str]:
    """The group configs to set; `broker_lock_cap` is the broker's BROKER_LOCK_CAP when it could be read."""
    settings: dict[str, str] = {}
    if cfg.auto_offset_reset != "unchanged":
        settings["share.auto.offset.reset"] = cfg.auto_offset_reset
    if cfg.record_lock_duration_ms is not None:
        settings["share.record.lock.duration.ms"] = str(cfg.record_lock_duration_ms)
    locks = cfg.partition_max_record_locks
    if locks == "max" and broker_lock_cap is not None:
        settings[GROUP_LOCKS] = str(min(MAX_RECORD_LOCKS, broker_lock_cap))
    elif isinstance(locks, int):
        settings[GROUP_LOCKS] = str(locks)
    if cfg.broker_dead_letter_topic is not None:
        settings[DLQ_TOPIC] = cfg.broker_dead_letter_topic
        settings[DLQ_COPY_RECORD] = str(cfg.broker_dead_letter_copy_record).lower()
    return settings


def broker_lock_cap(broker: dict[str, str]) -> int | None:
    """The broker's BROKER_LOCK_CAP; None when unknown (unreadable, or a broker before it existed)."""
    value = broker.get(BROKER_LOCK_CAP, "")
    return int(value) if value.isdigit() else None


def with_broker_defaults(group: dict[str, str], broker: dict[str, str]) -> dict[str, str]:
    """The group's effective settings: on brokers before 4.3 the delivery limit and the in-flight
    cap are broker configs only (BROKER_DEFAULTS), and the group lists neither."""
    return {**{g: broker[b] for g, b in BROKER_DEFAULTS.items() if g not in group and b in broker}, **group}


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


def settled_group_settings(
    admin: AdminClient, group_id: str, applied: dict[str, str], settle_s: float = 15
) -> dict[str, str]:
    """The group's config once the broker serves the `applied` values.

    An accepted IncrementalAlterConfigs is a record in the cluster's metadata log; each broker
    applies it when it replays it, some milliseconds later. Read back at once, the group can still
    show the old values (a 2 s lock read as the default 30 s), and members that join meanwhile would
    start on them (`share.auto.offset.reset` still `latest`). So wait until the broker serves them:
    bounded, then the values as applied with a warning (the alter itself was accepted).
    """

    def stale(seen: dict[str, str]) -> bool:
        return any(seen.get(k) != v for k, v in applied.items())

    seen: dict[str, str] = Retrying(
        retry=retry_if_result(stale),
        stop=stop_after_delay(settle_s),
        wait=wait_fixed(0.05),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else {},
    )(read_group_settings, admin, group_id)
    if stale(seen):
        log.warning(
            "share group %s: the broker still serves old settings after %.0f s; using those applied", group_id, settle_s
        )
        return seen | applied
    return seen
