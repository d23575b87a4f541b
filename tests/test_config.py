"""Unit tests of configuration parsing, validation and the one-line error messages."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from sharelake.config.loader import load_config
from sharelake.config.routes import resolve_routes
from sharelake.config.settings import TABLE_SINKS, DeadLetterConfig
from sharelake.failures.errors import ConfigError
from sharelake.sink.dead_letter.factory import SINKS
from sharelake.table.location import TableLocation

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = ["kafka.bootstrap_servers=h:1", "kafka.topic=t", "kafka.group_id=g", "delta.table_path=/tmp/x"]


def test_the_checked_in_example_is_valid() -> None:
    cfg = load_config(ROOT / "conf" / "local.toml")
    assert cfg.kafka.auto_offset_reset == "earliest"
    assert cfg.delta.checkpoint_path is None  # a fresh temporary clock checkpoint per run


def test_overrides_are_typed_and_win() -> None:
    cfg = load_config(ROOT / "conf" / "local.toml", ["pump.members=4", "run.mode=until-drained", "kafka.topic=x"])
    assert cfg.pump.members == 4 and cfg.run.mode == "until-drained" and cfg.kafka.topic == "x"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (REQUIRED[1:], "config key kafka.bootstrap_servers is required"),
        ([*REQUIRED, "pump.memberz=3"], "config key pump.memberz is not a known key"),
        ([*REQUIRED, "pump.members=many"], "config key pump.members = 'many'"),
        ([*REQUIRED, "pump.members=0"], "config key pump.members = 0: Input should be greater than or equal to 1"),
        ([*REQUIRED, "run.mode=sometimes"], "config key run.mode = 'sometimes'"),
        ([*REQUIRED, "kafka.client.group.id=x"], "config key kafka.client"),
        (["kafka.topic"], "write it as section.key=value"),
        (
            [*REQUIRED, "delta.table_name=db.events"],
            "delta.table_path and delta.table_name both name the table: keep one",
        ),
        (REQUIRED[:3], "kafka.topic needs delta.table_path (a path) or delta.table_name (a catalog name)"),
        ([*REQUIRED, "payload.format=json"], "config key payload: payload.format = 'json' needs payload.schema"),
        ([*REQUIRED, "payload.schema=id long"], "config key payload.schema does not apply to payload.format = 'raw'"),
        ([*REQUIRED, "payload.format=xml"], "config key payload.format = 'xml': not a payload format; use one of raw"),
        ([*REQUIRED, "payload.format=avro"], "config key payload: payload.format = 'avro' needs payload.registry.url"),
        (
            [*REQUIRED, "payload.format=protobuf"],
            "config key payload: payload.format = 'protobuf' reads the Confluent wire format: set payload.registry.url",
        ),
        (
            [*REQUIRED, "payload.format=avro", "payload.registry.url=http://user:pw@registry:8081"],
            "payload.registry.url holds credentials: move them to payload.registry.basic_auth_user",
        ),
        (
            [*REQUIRED, "payload.format=avro", "payload.registry.url=http://r:1", "payload.registry.basic_auth_user=u"],
            "config key payload.registry: payload.registry.basic_auth_user and basic_auth_password go together",
        ),
        (
            [*REQUIRED, "payload.format=avro", "payload.avro_schema='{}'", "payload.schema=id long"],
            "config key payload.schema does not apply to payload.format = 'avro'",
        ),
        (
            [*REQUIRED, "payload.key_format=avro"],
            "config key payload: payload.key_format = 'avro' reads keys in the Confluent wire format: set "
            "payload.registry.url",
        ),
        ([*REQUIRED, "payload.key_format=json"], "config key payload.key_format = 'json': Input should be 'raw'"),
        ([*REQUIRED, "dead_letter.max_delivery_count=0"], "config key dead_letter.max_delivery_count = 0"),
        ([*REQUIRED, "delta.checkpoint_interval=0"], "config key delta.checkpoint_interval = 0: Input should be"),
        (
            [*REQUIRED, "delta.log_retention=interval 5 minutes"],
            "config key delta.log_retention = 'interval 5 minutes': Value error, at least 'interval 10 minutes'",
        ),
        (
            [*REQUIRED, 'delta.partition_by=["day"]', 'delta.cluster_by=["user"]'],
            "config key delta: partition_by and cluster_by are both set: a Delta table is partitioned or clustered",
        ),
        (
            [*REQUIRED, 'delta.cluster_by=["a", "b", "c", "d", "e"]'],
            "config key delta: cluster_by names 5 columns: Delta clusters by at most 4",
        ),
        (
            [*REQUIRED, "delta.generated_columns.offset=partition + 1"],
            "config key delta: generated_columns.offset is a column Sharelake writes itself",
        ),
        (
            [*REQUIRED, "dead_letter.sink=broker_topic"],
            'dead_letter.sink = "broker_topic" needs kafka.broker_dead_letter_topic',
        ),
        (
            [
                *REQUIRED,
                "dead_letter.sink=broker_topic",
                "kafka.broker_dead_letter_topic=dlq.t",
                "kafka.group_type=consumer",
            ],
            'dead_letter.sink = "broker_topic" needs a share group',
        ),
        (
            [
                *REQUIRED,
                "dead_letter.sink=broker_topic",
                "kafka.broker_dead_letter_topic=dlq.t",
                "dead_letter.table_path=/d",
            ],
            'dead_letter.sink = "broker_topic" writes no dead-letter table: drop dead_letter.table_path',
        ),
        ([*REQUIRED, "dead_letter.sink=topic"], "config key dead_letter.sink = 'topic'"),
    ],
)
def test_bad_config_gives_one_line_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist: pass --config"):
        load_config(tmp_path / "nope.toml")


def test_client_settings_keep_their_dotted_names(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        "[kafka]\nbootstrap_servers='h:1'\ntopic='t'\ngroup_id='g'\n"
        "[kafka.client]\n\"security.protocol\" = 'SASL_SSL'\nsasl.mechanism = 'PLAIN'\n"
        "[delta]\ntable_path='/tmp/x'\n"
    )
    cfg = load_config(f, ["kafka.client.sasl.password=pw", "kafka.client.socket.timeout.ms=5000"])
    assert cfg.kafka.client == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.password": "pw",
        "socket.timeout.ms": 5000,
    }


def test_spark_settings_keep_their_dotted_names_and_read_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "c.toml"
    f.write_text(
        "[kafka]\nbootstrap_servers='h:1'\ntopic='t'\ngroup_id='g'\n[delta]\ntable_path='s3a://b/t'\n"
        "[spark_conf]\n\"spark.hadoop.fs.s3a.endpoint\" = 'http://s3:9000'\n"
    )
    monkeypatch.setenv("SHARELAKE_TEST_S3_SECRET", "canary-s3")
    # `endpoint` and `endpoint.region` side by side: a nested table could not hold both
    cfg = load_config(
        f,
        [
            "spark_conf.spark.hadoop.fs.s3a.endpoint.region=eu-west-1",
            "spark_conf.spark.hadoop.fs.s3a.secret.key=env:SHARELAKE_TEST_S3_SECRET",
            "spark_conf.spark.databricks.delta.autoCompact.enabled=true",  # TOML's true: Spark's "true"
            "spark_conf.spark.sql.shuffle.partitions=4",
        ],
    )
    assert cfg.spark_conf == {
        "spark.databricks.delta.autoCompact.enabled": "true",
        "spark.sql.shuffle.partitions": "4",
        "spark.hadoop.fs.s3a.endpoint": "http://s3:9000",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.secret.key": "canary-s3",
    }
    with pytest.raises(ConfigError) as e:
        load_config(None, [*REQUIRED, "spark_conf.hadoop.fs.s3a.endpoint=x"])
    assert str(e.value) == (
        "config key spark_conf: spark_conf.hadoop.fs.s3a.endpoint is not a Spark setting: "
        "Spark's keys start with 'spark.'"
    )


def test_secrets_never_appear_in_config_errors() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(None, [*REQUIRED, "kafka.client.sasl.password=[1, 2]"])  # a list: wrong type
    assert "1, 2" not in str(e.value) and "<hidden>" in str(e.value)


def test_secrets_come_from_the_environment_or_a_file_never_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARELAKE_TEST_PW", "canary-4711")
    (tmp_path / "pw").write_text("canary-0815\n")
    cfg = load_config(
        None,
        [
            *REQUIRED,
            "kafka.client.sasl.password=env:SHARELAKE_TEST_PW",
            f"kafka.client.sasl.username=file:{tmp_path / 'pw'}",
        ],
    )
    assert cfg.kafka.client == {"sasl.password": "canary-4711", "sasl.username": "canary-0815"}

    monkeypatch.delenv("SHARELAKE_TEST_PW")
    with pytest.raises(ConfigError) as e:
        load_config(None, [*REQUIRED, "kafka.client.sasl.password=env:SHARELAKE_TEST_PW"])
    assert str(e.value).startswith("config key kafka.client: kafka.client.sasl.password reads environment variable")
    with pytest.raises(ConfigError) as e:
        load_config(None, [*REQUIRED, f"kafka.client.sasl.password=file:{tmp_path / 'missing'}"])
    assert "cannot be read (No such file or directory)" in str(e.value) and "canary" not in str(e.value)


def test_group_settings_the_job_owns() -> None:
    from sharelake.consume.share.group_settings import desired_group_settings

    base = load_config(None, REQUIRED).kafka
    assert desired_group_settings(base) == {"share.auto.offset.reset": "earliest"}
    tuned = load_config(
        None,
        [
            *REQUIRED,
            "kafka.auto_offset_reset=unchanged",
            "kafka.record_lock_duration_ms=15000",
            "kafka.partition_max_record_locks=8000",
        ],
    ).kafka
    assert desired_group_settings(tuned) == {
        "share.record.lock.duration.ms": "15000",
        "share.partition.max.record.locks": "8000",
    }


ROUTED = ["kafka.bootstrap_servers=h:1", "kafka.group_id=g", 'kafka.topics=["orders", "clicks"]']
ONE_TABLE = [*ROUTED, "topics.orders.table_path=/o", "topics.clicks.table_path=/o", "dead_letter.table_path=/d"]
TWO_TABLES = [*ROUTED, "topics.orders.table_path=/o", "topics.clicks.table_path=/c", "dead_letter.table_path=/d"]


def test_a_routed_table_takes_its_topics_layout_else_the_default_one() -> None:
    cfg = load_config(
        None,
        [
            *TWO_TABLES,
            'delta.partition_by=["day"]',
            "delta.generated_columns.day=CAST(kafka_timestamp AS DATE)",
            'topics.clicks.cluster_by=["user", "kind"]',
        ],
    )
    layouts = {r.topics: (r.layout.describe(), r.layout_key) for r in resolve_routes(cfg).main}
    assert layouts == {
        ("orders",): ("partitioned by (day), day = CAST(kafka_timestamp AS DATE)", "delta"),
        ("clicks",): ("clustered by (user, kind)", "topics.clicks"),
    }


def test_routed_topics_take_the_default_payload_and_their_own_keys(tmp_path: Path) -> None:
    f = tmp_path / "routed.toml"
    f.write_text(
        "[kafka]\nbootstrap_servers='h:1'\ngroup_id='g'\ntopics=['orders', 'clicks', 'audit']\n"
        "[payload]\nformat='json'\nschema='id long'\nmax_value_bytes=2048\n"
        "[dead_letter]\ntable_path='/t/dead'\n"
        "[topics.orders]\ntable_path='/t/orders'\n"
        "[topics.clicks]\ntable_path='/t/clicks'\n[topics.clicks.payload]\nformat='text'\n"
        "[topics.audit]\ntable_path='/t/orders'\n"  # shares the orders table (and its payload)
    )
    routes = resolve_routes(load_config(f)).main
    assert [(r.topics, r.location.path, r.payload.format) for r in routes] == [
        (("orders", "audit"), "/t/orders", "json"),
        (("clicks",), "/t/clicks", "text"),
    ]
    assert routes[1].payload.max_value_bytes == 2048  # a shared key of the default section
    assert resolve_routes(load_config(f)).dead_letter == TableLocation.at("/t/dead")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [*ROUTED, "topics.orders.table_path=/o", "dead_letter.table_path=/d"],
            "kafka.topics subscribes to clicks, which no [topics.<name>] section routes: add [topics.clicks]",
        ),
        (
            [*ROUTED, "topics.orders.table_path=/o", "topics.clicks.table_path=/c"],
            "kafka.topics needs dead_letter.table_path",
        ),
        (
            [*ONE_TABLE, "topics.clicks.payload.format=text"],
            "topics orders, clicks share the table /o but read their values differently",
        ),
        (
            [*TWO_TABLES, "topics.clicks.payload.format=avro"],
            "config key topics.clicks.payload: payload.format = 'avro' needs payload.registry.url",
        ),
        ([*REQUIRED, 'kafka.topics=["t"]'], "set kafka.topic (one topic into delta.table_path) or kafka.topics"),
        ([*REQUIRED, "topics.t.table_path=/t"], "[topics.<name>] sections route kafka.topics"),
        (
            [*ONE_TABLE, 'topics.orders.partition_by=["topic"]', 'topics.clicks.cluster_by=["topic"]'],
            "topics orders, clicks share a table but ask for different layouts",
        ),
    ],
)
def test_routing_mistakes_give_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_routing_on_the_command_line_replaces_the_files_one_topic() -> None:
    routed = load_config(
        ROOT / "conf" / "local.toml",
        ['kafka.topics=["a"]', "topics.a.table_path=/a", "dead_letter.table_path=/d"],
    )
    assert [(r.topics, r.location.path) for r in resolve_routes(routed).main] == [(("a",), "/a")]
    assert routed.kafka.topic is None and routed.delta.table_path is None


def test_dead_letters_to_the_broker_topic_route_to_no_table() -> None:
    """With `dead_letter.sink = "broker_topic"` a job writes its main tables only: no dead-letter table
    among its tables (no lease, no maintenance, no replay from a table), and a routed job needs none named."""
    routed = [
        "kafka.bootstrap_servers=h:1",
        "kafka.group_id=g",
        'kafka.topics=["a"]',
        "topics.a.table_path=/a",
        "kafka.broker_dead_letter_topic=dlq.a",
        "dead_letter.sink=broker_topic",
    ]
    routes = resolve_routes(load_config(None, routed))
    assert routes.dead_letter is None
    assert routes.tables() == [TableLocation.at("/a")]
    table = resolve_routes(load_config(None, REQUIRED))
    assert table.tables() == [TableLocation.at("/tmp/x"), TableLocation.at("/tmp/x_dead_letter")]


def test_the_config_routes_a_dead_letter_table_to_the_sinks_that_write_one() -> None:
    """The `dead_letter.sink` values are the sink types' names, and the config gives a dead-letter table (its
    routes, its rules) to exactly the sink types that declare they write one (the config cannot ask them)."""
    assert set(get_args(DeadLetterConfig.model_fields["sink"].annotation)) == set(SINKS)
    assert {name for name, sink in SINKS.items() if sink.writes_table} == TABLE_SINKS
