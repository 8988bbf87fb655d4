"""The Python API (issue 32): a streaming DataFrame in, Spark's own ``DataStreamWriter`` out.

The README's worked example, ingested and joined through :func:`lakehouse.ingest_cdc` and
:func:`lakehouse.temporal_join` instead of the command line, gives the README's answer; the
writer guards exactly-once as the command line does (a checkpoint, the writer lease, the
checkpoint's binding), and refuses in one line what would break it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import readme_block, wait_for_lease_release
from pyspark.sql.streaming import DataStreamWriter

import lakehouse
from lakehouse import delta
from lakehouse.errors import ConfigError, DataSafetyError, WriterLeaseError
from lakehouse.lease import read_lease

pytestmark = pytest.mark.spark


def _readme_files(tmp: Path) -> None:
    """The README tutorial's ``cdc/`` and ``orders/`` files, taken from its first block."""
    for folder in ("cdc", "orders"):
        (tmp / folder).mkdir()
        (tmp / folder / "0001.jsonl").write_text(readme_block(folder))


def _join_options(tmp: Path, name: str, **overrides: object) -> lakehouse.JoinOptions:
    values: dict[str, object] = dict(
        pipeline_id=name,
        build_table=str(tmp / "tables/prices"),
        output_table=str(tmp / f"tables/{name}"),
        pending_table=str(tmp / f"tables/{name}_pending"),
        dead_letter_table=str(tmp / "tables/orders_dead_letter"),
        probe_schema="order_id bigint, region string, sku string, order_ts timestamp",
        probe_key=["region", "sku"],
        probe_time="order_ts",
        probe_id="order_id",
        join_type="left",
    )
    return lakehouse.JoinOptions(**{**values, **overrides})


def _run(writer: lakehouse.PipelineWriter, checkpoint: Path) -> None:
    query = writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    query.awaitTermination()


@pytest.fixture(scope="module")
def prices(spark, tmp_path_factory) -> Path:
    """The README's dimension, ingested through :func:`lakehouse.ingest_cdc`."""
    tmp = tmp_path_factory.mktemp("api")
    _readme_files(tmp)
    reports: list[lakehouse.BatchReport] = []
    options = lakehouse.IngestOptions(
        pipeline_id="prices",
        tables=[{"table": str(tmp / "tables/prices"), "key": ["region", "sku"]}],
        dead_letter_table=str(tmp / "tables/prices_dead_letter"),
    )
    writer = lakehouse.ingest_cdc(
        lakehouse.read_files_stream(spark, str(tmp / "cdc")), options, on_batch=reports.append
    )
    assert isinstance(writer, DataStreamWriter)
    _run(writer, tmp / "state/ingest")
    assert sum(t.rows for r in reports for t in r.targets) == 5, reports
    assert any(t.marker_set_now for r in reports for t in r.targets), reports
    wait_for_lease_release(str(tmp / "tables/prices"))
    return tmp


def test_the_api_joins_the_readme_example_as_the_command_line_does(spark, prices):
    options = _join_options(prices, "orders_api", until_complete=True, build_complete=True)
    reports: list[lakehouse.JoinBatchReport] = []
    writer = lakehouse.temporal_join(
        lakehouse.read_files_stream(spark, str(prices / "orders")),
        options,
        on_batch=reports.append,
    )
    _run(writer.queryName("orders_api"), prices / "state/orders_api")
    rows = (
        delta.read(spark, options.output_table)
        .select("order_id", "price", "_released_by")
        .orderBy("order_id")
        .collect()
    )
    # the README's row-time answer: the old price before the update, none after the delete;
    # the watermark releases orders 1 to 3, the end of the input the other two
    assert [tuple(r) for r in rows] == [
        (1, 10.0, "watermark"),
        (2, 12.0, "watermark"),
        (3, 11.0, "watermark"),
        (4, None, "end_of_input"),
        (5, 20.0, "end_of_input"),
    ]
    assert sum(r.released for r in reports) == 5
    # the lease named the query; the job gave it back when it ended
    wait_for_lease_release(options.output_table)
    # a second run of the same checkpoint finds nothing new and writes nothing twice
    again = lakehouse.temporal_join(
        lakehouse.read_files_stream(spark, str(prices / "orders")), options
    )
    _run(again, prices / "state/orders_api")
    assert delta.read(spark, options.output_table).count() == 5


def test_the_writer_holds_the_tables_while_its_query_runs(spark, prices):
    options = _join_options(prices, "orders_held", mode="proctime")
    orders = lakehouse.read_files_stream(spark, str(prices / "orders"))
    first = (
        lakehouse.temporal_join(orders, options)
        .option("checkpointLocation", str(prices / "state/held"))
        .queryName("held")
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        # (processAllAvailable never returns: the join's tick source always has a next row)
        while not first.recentProgress:
            time.sleep(0.2)
        lease = read_lease(options.output_table)
        assert lease is not None and lease.query_name == "held", lease
        second = lakehouse.temporal_join(orders, options).option(
            "checkpointLocation", str(prices / "state/held")
        )
        with pytest.raises(WriterLeaseError, match="join 'orders_held'"):
            second.start()
    finally:
        first.stop()
    wait_for_lease_release(options.output_table)
    # the tables are bound to the first checkpoint: another one would replay or skip batches
    other = lakehouse.temporal_join(orders, options).option(
        "checkpointLocation", str(prices / "state/other")
    )
    with pytest.raises(DataSafetyError, match="state/held"):
        other.start()
    assert read_lease(options.output_table) is None  # a refused start keeps no lease
    # the first checkpoint goes on, under a new writer
    resumed = lakehouse.temporal_join(orders, options)
    _run(resumed, prices / "state/held")
    assert delta.read(spark, options.output_table).count() == 5


def test_the_writer_refuses_what_would_break_exactly_once(spark, prices, tmp_path):
    options = _join_options(prices, "orders_refused")
    orders = lakehouse.read_files_stream(spark, str(prices / "orders"))
    writer = lakehouse.temporal_join(orders, options)
    with pytest.raises(ConfigError, match=r"needs a checkpoint .*checkpointLocation"):
        writer.start()
    with pytest.raises(TypeError, match="sink is the lakehouse join: foreachBatch"):
        writer.foreachBatch(lambda df, i: None)
    with pytest.raises(TypeError, match="writes its own tables"):
        writer.start(path=str(tmp_path / "elsewhere"))
    with pytest.raises(TypeError, match="sink is the lakehouse join: toTable"):
        writer.toTable("t")
    with pytest.raises(ConfigError, match="takes a streaming DataFrame"):
        lakehouse.temporal_join(spark.range(1), options)
    with pytest.raises(ConfigError, match="column 'offset' is missing"):
        lakehouse.temporal_join(orders.drop("offset"), options)
    # a name under Spark's checkpoint root is a checkpoint too
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "root"))
    try:
        named = lakehouse.temporal_join(orders, options).queryName("q")
        assert named.checkpoint == f"{tmp_path / 'root'}/q"
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
