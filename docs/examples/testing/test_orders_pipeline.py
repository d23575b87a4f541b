"""A test of a Sharelake pipeline, as a user writes one (docs/testing.md).

Copy this file and orders.toml into your project, `pip install "sharelake[testing]"`, run `pytest`.
The broker, the SparkSession and the topic come from the plugin the package registers; the first
run fetches the broker's jars and Delta's once.
"""

from pathlib import Path

from chispa import assert_df_equality

from sharelake.testing import produce_records, run_until_drained, without_bookkeeping

CONFIG = Path(__file__).parent / "orders.toml"


def test_orders_land_once_and_a_bad_record_is_parked(sharelake_broker, sharelake_spark, sharelake_topic, tmp_path):
    topic = sharelake_topic(partitions=2)
    produce_records(
        sharelake_broker.bootstrap,
        topic,
        [
            (b"o-1", b'{"order_id": 1, "customer": "ada", "amount": 12.5}'),
            (b"o-2", b'{"order_id": 2, "customer": "grace", "amount": 7.0}'),
            (b"o-3", b"not an order"),
            (b"o-4", b'{"order_id": 4, "customer": "ada", "amount": 3.25}'),
        ],
    )

    run = run_until_drained(
        sharelake_spark,
        CONFIG,
        bootstrap_servers=sharelake_broker.bootstrap,
        overrides=[
            f"kafka.topic={topic}",
            f"kafka.group_id=test-{topic}",
            f"delta.table_path={tmp_path / 'orders'}",
        ],
    )

    expected = sharelake_spark.createDataFrame(
        [(b"o-1", 1, "ada", 12.5), (b"o-2", 2, "grace", 7.0), (b"o-4", 4, "ada", 3.25)],
        "key binary, order_id long, customer string, amount double",
    )
    landed = without_bookkeeping(run.landed(topic))
    assert_df_equality(landed, expected, ignore_row_order=True, ignore_nullable=True)

    parked = run.dead_letters().collect()
    assert [(r["key"], r["error_class"]) for r in parked] == [(b"o-3", "malformed_json")]
    assert (run.summary.accepted, run.summary.dead_lettered) == (3, 1)
