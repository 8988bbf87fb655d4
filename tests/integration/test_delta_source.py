"""A Delta table as the join's probe input (issue 32, item 3), on real Spark and real Delta.

The README's orders, appended to a Delta table in two commits and streamed by Delta's own
source (by catalog name and by path), join to the README's answer; a second run of the same
checkpoint joins only what was appended since, once. Each column type survives the row's trip
through its JSON record; a commit that deletes probe rows stops the join with one line naming
the setting that skips it, and that setting lets the join go on.
"""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pytest
from helpers import assert_rows_equal, readme_block, wait_for_lease_release

import lakehouse
from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.errors import SourceError, TableNotFoundError
from lakehouse.join.options import JoinOptions
from lakehouse.join.probe import PARSE_ERROR, parse
from lakehouse.runner import start_join

pytestmark = pytest.mark.spark

ORDERS_SCHEMA = "order_id bigint, region string, sku string, order_ts timestamp"
#: The README's answer (see tests/integration/test_api.py): order, price, what released it.
README_ANSWER = [
    (1, 10.0, "watermark"),
    (2, 12.0, "watermark"),
    (3, 11.0, "watermark"),
    (4, None, "end_of_input"),
    (5, 20.0, "end_of_input"),
]


@pytest.fixture(scope="module")
def readme(spark, tmp_path_factory) -> Path:
    """The README's dimension, ingested, and its orders as JSON lines."""
    tmp = tmp_path_factory.mktemp("delta-source")
    (tmp / "cdc").mkdir()
    (tmp / "cdc/0001.jsonl").write_text(readme_block("cdc"))
    (tmp / "orders.jsonl").write_text(readme_block("orders"))
    options = lakehouse.IngestOptions(
        pipeline_id="prices",
        tables=[{"table": str(tmp / "tables/prices"), "key": ["region", "sku"]}],
        dead_letter_table=str(tmp / "tables/prices_dead_letter"),
    )
    query = (
        lakehouse.ingest_cdc(lakehouse.read_files_stream(spark, str(tmp / "cdc")), options)
        .option("checkpointLocation", str(tmp / "state/ingest"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wait_for_lease_release(str(tmp / "tables/prices"))
    return tmp


def _orders(spark, readme: Path, ids: set[int]):
    """The README's orders of ``ids`` as a bronze table holds them: with a column more than
    the join reads."""
    from pyspark.sql import functions as F

    return (
        spark.read.schema(ORDERS_SCHEMA)
        .json(str(readme / "orders.jsonl"))
        .filter(F.col("order_id").isin(sorted(ids)))
        .withColumn("channel", F.lit("web"))
        .coalesce(1)
    )


def _options(readme: Path, name: str, **overrides: object) -> JoinOptions:
    values: dict[str, object] = dict(
        pipeline_id=name,
        build_table=str(readme / "tables/prices"),
        output_table=str(readme / f"tables/{name}"),
        pending_table=str(readme / f"tables/{name}_pending"),
        dead_letter_table=str(readme / f"tables/{name}_dead_letter"),
        probe_schema=ORDERS_SCHEMA,
        probe_key=["region", "sku"],
        probe_time="order_ts",
        probe_id="order_id",
        join_type="left",
    )
    return JoinOptions(**{**values, **overrides})


def _answer(spark, options: JoinOptions) -> list[tuple]:
    rows = delta.read(spark, options.output_table).select("order_id", "price", "_released_by")
    return [tuple(r) for r in rows.orderBy("order_id").collect()]


def test_a_delta_table_by_name_joins_to_the_readme_answer_once(spark, readme):
    bronze = readme / "bronze/orders"
    _orders(spark, readme, {1, 2, 3}).write.format("delta").save(str(bronze))
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS lakehouse_test LOCATION '{readme}/schema'")
    spark.sql(f"CREATE TABLE lakehouse_test.orders USING delta LOCATION '{bronze}'")
    try:
        options = _options(readme, "orders_delta")

        def run(**overrides: object) -> list[lakehouse.JoinBatchReport]:
            reports: list[lakehouse.JoinBatchReport] = []
            stream = lakehouse.read_delta_stream(spark, "lakehouse_test.orders")
            (
                lakehouse.temporal_join(
                    stream, options.model_copy(update=overrides), on_batch=reports.append
                )
                .option("checkpointLocation", str(readme / "state/orders_delta"))
                .trigger(availableNow=True)
                .start()
                .awaitTermination()
            )
            wait_for_lease_release(options.output_table)
            return reports

        # the first commit: the watermark releases orders 1 and 3 (order 2 is the latest)
        run()
        assert _answer(spark, options) == [README_ANSWER[0], README_ANSWER[2]]
        # two more commits reach the table (one appends order 4, one order 5); the same
        # checkpoint reads only them, and the end of the input releases them
        for i in (4, 5):
            _orders(spark, readme, {i}).write.format("delta").mode("append").save(str(bronze))
        reports = run(until_complete=True, build_complete=True)
        assert sum(r.arrived for r in reports) == 2, reports
        assert _answer(spark, options) == README_ANSWER
        # the output's lineage names the table; its rows kept the columns the join reads
        lineage = delta.read(spark, options.output_table).select("_probe_topic").distinct()
        assert [r[0] for r in lineage.collect()] == ["lakehouse_test.orders"]
        # nothing new: a third run writes nothing twice
        run(until_complete=True, build_complete=True)
        assert len(_answer(spark, options)) == 5
    finally:
        spark.sql("DROP SCHEMA IF EXISTS lakehouse_test CASCADE")

    with pytest.raises(TableNotFoundError, match=r"no table 'lakehouse_test\.missing'"):
        lakehouse.read_delta_stream(spark, "lakehouse_test.missing")
    with pytest.raises(TableNotFoundError, match="no Delta table at"):
        lakehouse.read_delta_stream(spark, str(readme / "nowhere"))


def test_every_column_type_survives_the_rows_json_record(spark):
    schema = (
        "id bigint, amount decimal(38,18), ts timestamp, created timestamp, "
        "local timestamp_ntz, day date, "
        "name string, tags array<string>, spec struct<w: double, h: int>, ok boolean, "
        "ratio float"
    )
    rows = [
        (
            1,
            decimal.Decimal("12345678901234567890.123456789012345678"),
            # the event time is the join's, in milliseconds; other times keep microseconds
            dt.datetime(2026, 3, 2, 8, 0, 30, 123000, tzinfo=dt.UTC),
            dt.datetime(2026, 3, 2, 8, 0, 30, 123456, tzinfo=dt.UTC),
            dt.datetime(2026, 3, 2, 8, 0, 30, 654321),
            dt.date(1969, 12, 31),
            'Zürich \u2603 "quoted"\n',
            ["a", None],
            (1.5, 2),
            True,
            0.25,
        ),
        (2, None, None, None, None, None, None, None, None, None, None),
    ]
    table = spark.createDataFrame(rows, schema)
    records = lakehouse.rows_as_records(table, topic="bronze.things")
    options = JoinOptions(
        build_table="b",
        output_table="o",
        pending_table="p",
        dead_letter_table="d",
        pipeline_id="types",
        probe_schema=schema,
        probe_key=["id"],
        probe_time="ts",
        probe_id="id",
    )
    from lakehouse.join.probe import probe_schema

    parsed = parse(records, options, probe_schema(options))
    fields = table.schema.fieldNames()
    got = parsed.select(*fields, PARSE_ERROR).orderBy("id").collect()
    assert [tuple(r)[:-1] for r in got] == [tuple(r) for r in table.orderBy("id").collect()]
    assert got[0][PARSE_ERROR] is None
    # the second row has no time: a dead letter naming the column, as for any record
    assert "'ts' is missing" in got[1][PARSE_ERROR]
    # identical rows are one position; different rows are two
    positions = records.select("topic", "partition", "offset").collect()
    again = lakehouse.rows_as_records(table, topic="bronze.things").collect()
    assert positions == [(r.topic, r.partition, r.offset) for r in again]
    assert len(set(positions)) == 2


def test_a_commit_that_deletes_probe_rows_stops_the_join_until_it_is_skipped(
    spark, readme, tmp_path
):
    bronze = tmp_path / "bronze"
    _orders(spark, readme, {1, 2, 3}).write.format("delta").save(str(bronze))
    out = tmp_path / "out"

    def config(**extra: str) -> Path:
        cfg = tmp_path / "join.toml"
        cfg.write_text(
            "[join]\n"
            f'pipeline_id = "orders"\nsource = "delta"\ndelta_table = "{bronze}"\n'
            f'checkpoint = "{out}/checkpoint"\ntrigger = "available-now"\n'
            f'probe_schema = "{ORDERS_SCHEMA}"\nprobe_key = ["region", "sku"]\n'
            'probe_time = "order_ts"\nprobe_id = "order_id"\njoin_type = "left"\n'
            "until_complete = true\nbuild_complete = true\n"
            f'build_table = "{readme}/tables/prices"\noutput_table = "{out}/output"\n'
            f'pending_table = "{out}/pending"\ndead_letter_table = "{out}/dead_letter"\n'
            + "".join(f"{k} = {v}\n" for k, v in extra.items())
        )
        return cfg

    def run(cfg: Path) -> BaseException | None:
        query = start_join(spark, load_settings(cfg))
        try:
            query.awaitTermination()
        except Exception as e:
            return e
        finally:
            wait_for_lease_release(str(out / "output"))
        return None

    assert run(config()) is None
    assert [r[0] for r in _answer_ids(spark, out)] == [1, 2, 3]
    spark.sql(f"DELETE FROM delta.`{bronze}` WHERE order_id = 2")
    _orders(spark, readme, {4}).write.format("delta").mode("append").save(str(bronze))

    failure = run(config())
    assert isinstance(failure, SourceError), failure
    message = str(failure)
    assert "updates or deletes rows (version 1)" in message, message
    assert "join.skip_change_commits = true" in message
    assert "\n" not in message
    # skipping the delete: the rows joined before stay; the append after it is joined
    assert run(config(skip_change_commits="true")) is None
    assert_rows_equal(_answer_ids(spark, out), [(1,), (2,), (3,), (4,)])


def _answer_ids(spark, out: Path) -> list[tuple]:
    rows = delta.read(spark, str(out / "output")).select("order_id").orderBy("order_id")
    return [tuple(r) for r in rows.collect()]
