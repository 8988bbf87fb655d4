"""The per-batch cost of the handlers, counted (not timed): Spark jobs and Delta log reads.

Each micro-batch reads each table's log once (``delta.batch_scope``), and a processing-time
batch that releases everything runs at most two Spark jobs in all, Delta's included. The
counts are deterministic for the pinned Spark and Delta; the bounds hold what was measured
(bench/README.md, "Per-batch cost") so that a change that adds a job or a look at a log fails
here first.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from batch_cost import BatchCost
from helpers import connector_records, data_commit_of_batch, raw_records

from lakehouse import delta
from lakehouse.dimension import BuildSink, BuildTarget
from lakehouse.dimension.layout import META_BATCH_ID, PROP_PRIMARY_KEY, PROP_TABLE_KIND
from lakehouse.dimension.staging import MAX_FILES
from lakehouse.join import JoinOptions, TemporalJoin
from lakehouse.testing.debezium import DebeziumTable

pytestmark = pytest.mark.spark

CODES = [f"C{i:02d}" for i in range(10)]


def _cdc(spark, messages, first_offset):
    return raw_records(
        spark,
        [m.value_bytes() for m in messages],
        topic="dbserver1.public.rates",
        first_offset=first_offset,
    )


@pytest.fixture(scope="module")
def rates(spark, tmp_path_factory):
    """A build table ingested by the real sink, and the cost of its batches: the first (which
    creates the table), then the steady-state ones."""
    root = tmp_path_factory.mktemp("cost")
    uri = str(root / "rates")
    table = DebeziumTable("public", "rates", key="currency", start_ms=1_000, step_ms=10)
    sink = BuildSink(
        [BuildTarget(uri, key_columns=("currency",))],
        dead_letter_table=str(root / "dlq"),
        pipeline_id="cost-ingest",
    )
    snapshot = table.snapshot([{"currency": c, "rate": "1.0"} for c in CODES])
    with BatchCost(spark) as first:
        sink.process(_cdc(spark, snapshot, 0), 0)
    costs = [first]
    offset = len(snapshot)
    with generated_code(spark):
        # steady: each in one pass (lakehouse.dimension.one_pass)
        for b in (1, 2):
            changes = [table.update({"currency": CODES[i], "rate": f"{b}.{i}"}) for i in range(3)]
            with BatchCost(spark) as cost:
                sink.process(_cdc(spark, changes, offset), b)
            offset += len(changes)
            costs.append(cost)
    return root, uri, costs


@contextlib.contextmanager
def generated_code(spark):
    """Spark's code generation as users have it: the suite's session interprets what it can
    (tests/conftest.py), which would hide a batch compiling its code anew."""
    key = "spark.sql.codegen.factoryMode"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "FALLBACK")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _join(root, uri, mode):
    return TemporalJoin(
        JoinOptions(
            build_table=uri,
            output_table=str(root / f"out-{mode}"),
            pending_table=str(root / f"pending-{mode}"),
            dead_letter_table=str(root / f"dlq-{mode}"),
            pipeline_id=f"cost-{mode}",
            probe_schema="id bigint, currency string, ts bigint",
            probe_key=("currency",),
            probe_time="ts" if mode == "rowtime" else None,
            mode=mode,
            watermark="bounded" if mode == "rowtime" else "none",
            join_type="left",
        ),
        num_buckets=2,
    )


def as_foreach_batch(df):
    """``df`` as ``foreachBatch`` hands a micro-batch to its function: in a new Python
    ``SparkSession`` object around the same JVM session, every batch
    (``pyspark.sql.utils.ForeachBatchFunction``)."""
    from pyspark.sql import DataFrame, SparkSession

    return DataFrame(df._jdf, SparkSession(df.sparkSession.sparkContext, df._jdf.sparkSession()))


def _batches(spark, op, n=3):
    costs = []
    with generated_code(spark):
        for b in range(n):
            rows = [
                {"id": b * 6 + i, "currency": CODES[(b + i) % 10], "ts": 5_000 + b * 6 + i}
                for i in range(6)
            ]
            raw = as_foreach_batch(raw_records(spark, rows, topic="orders", first_offset=b * 6))
            with BatchCost(spark) as cost:
                op.process(raw, b)
            costs.append(cost)
    return costs[1:]  # batch 0 creates the tables


def test_a_table_s_first_batch_creates_it_with_its_rows_in_one_commit(rates):
    _, uri, costs = rates
    first = costs[0]
    # the rows staged and counted by their write, whose commit creates the table: no job of
    # its own counts them, no empty commit precedes them, Delta rebuilds no state. The jobs:
    # the decode's first look at the batch's schemas, the summary, the write, and the job of
    # no task that Delta's first commit of a table runs (a plain DataFrameWriter's too)
    assert first.jobs <= 4 and first.delta_jobs == 0, first.descriptions
    created = delta.commit_info(uri, 0)
    assert created is not None and created.rows == len(CODES), created
    assert created.app_transactions == {"cost-ingest": 0}
    props = delta.get_properties(uri, version=0)
    assert props[PROP_PRIMARY_KEY] == "currency" and props[PROP_TABLE_KIND] == "build"


def test_an_ingest_batch_reads_the_build_table_log_once(rates):
    _, uri, all_costs = rates
    costs = all_costs[1:]
    for cost in costs:
        assert cost.log_reads == {uri: 1}, cost.log_reads
        # no rebuild of the table's state: the write's transaction is answered from the
        # commits the batch's look read (delta.write's direct write); the rows are counted
        # by their write (delta.stage_append), not by a job of their own
        assert cost.jobs <= 2 and cost.delta_jobs == 0, cost.descriptions
    # a steady batch is one job, and the second runs the code Spark compiled for the first:
    # no value of a batch's own (the wall clock, its id) is written into Spark's generated
    # code (lakehouse.columns)
    assert [c.jobs for c in costs] == [1, 1], [c.descriptions for c in costs]
    assert costs[1].compiles == 0, costs[1].descriptions


def test_a_processing_time_batch_is_one_look_per_table_and_two_jobs(spark, rates):
    root, uri, _ = rates
    costs = _batches(spark, _join(root, uri, "proctime"))
    for cost in costs:
        assert set(cost.log_reads.values()) == {1} and len(cost.log_reads) == 4, cost.log_reads
        assert cost.total_jobs <= 2, json.dumps(cost.descriptions, indent=1)
    # the batch's watermark, time and id are not written into Spark's generated code
    assert costs[-1].compiles == 0, costs[-1].descriptions


def test_a_row_time_batch_is_one_look_per_table(spark, rates):
    root, uri, _ = rates
    costs = _batches(spark, _join(root, uri, "rowtime"))
    for cost in costs:
        assert set(cost.log_reads.values()) == {1} and len(cost.log_reads) == 4, cost.log_reads
        # the pending rows are read from the files its last overwrite's commit names, and the
        # pending table's overwrite removes those without Delta listing them
        assert cost.jobs <= 4 and cost.delta_jobs == 0, json.dumps(cost.descriptions, indent=1)
    assert costs[-1].compiles == 0, costs[-1].descriptions


def _connector(tmp_path, names, pipeline_id):
    """One connector's tables ``public.<name>`` and a sink writing each to its own table."""
    tables = {
        n: DebeziumTable("public", n, key="currency", start_ms=1_000, step_ms=10) for n in names
    }
    sink = BuildSink(
        [
            BuildTarget(str(tmp_path / n), key_columns=("currency",), source_table=f"public.{n}")
            for n in names
        ],
        dead_letter_table=str(tmp_path / "dlq"),
        pipeline_id=pipeline_id,
    )
    return tables, sink


def test_a_configured_table_the_batch_did_not_touch_costs_no_spark_job(spark, tmp_path):
    """One connector, three tables: a batch of changes to one of them rebuilds no other
    table's state (the replay check reads the tables' recent commits, issue 33)."""
    names = ("rates", "fees", "taxes")
    tables, sink = _connector(tmp_path, names, "cost-tables")
    snapshot = [
        m
        for t in tables.values()
        for m in t.snapshot([{"currency": c, "rate": "1"} for c in CODES[:3]])
    ]
    sink.process(_cdc(spark, snapshot, 0), 0)
    offset = len(snapshot)
    # batch 1 records the end of each table's snapshot signal (the batch after a marker
    # fires); from batch 2 on the untouched tables are quiet
    for b in (1, 2, 3):
        changes = [
            tables["rates"].update({"currency": CODES[i], "rate": f"{b}.{i}"}) for i in range(3)
        ]
        with BatchCost(spark) as cost:
            report = sink.process(_cdc(spark, changes, offset), b)
        offset += len(changes)
        assert [t.rows for t in report.targets] == [3, 0, 0]
        assert set(cost.log_reads.values()) == {1} and len(cost.log_reads) == 3, cost.log_reads
        if b > 1:
            assert cost.delta_jobs == 0 and cost.jobs <= 2, json.dumps(cost.descriptions, indent=1)
    # the untouched tables committed nothing (their data commits are the snapshot's), and a
    # replay of the last batch writes nothing anywhere
    versions = [delta.latest_version(str(tmp_path / n)) for n in names]
    for n in names[1:]:
        batches = {c.metadata.get(META_BATCH_ID) for c in delta.history(str(tmp_path / n))}
        assert batches <= {"0", "1", None}, (n, batches)
    assert data_commit_of_batch(str(tmp_path / "rates"), 3) == versions[0]
    replay = sink.process(_cdc(spark, changes, offset - len(changes)), 3)
    assert [t.rows for t in replay.targets] == [0, 0, 0]
    assert [delta.latest_version(str(tmp_path / n)) for n in names] == versions


def test_a_connector_of_many_tables_decodes_every_record_in_the_jvm(spark, tmp_path):
    """A connector of more tables than the JVM decode once knew schemas (16), read as Spark's
    Kafka source reads it (a topic per table, an input partition per topic): a steady batch
    that touches every table decodes none of its records in Python and keeps the JVM decoder
    of the batch before (not a new one). In two jobs (the first batch after the one that
    taught the decoder its schemas) it runs one for its summary, one for the decoded rows
    without the decode's plan behind them, and one that writes every table's rows, each in
    two tasks per core the application has, not one per topic; in one pass (the batches
    after), one job that decodes, writes every table's rows and summarises, in at most as
    many tasks as a table gets files."""
    names = [f"t{i:02d}" for i in range(17)]
    tables, sink = _connector(tmp_path, names, "cost-many")
    snapshot = [m for t in tables.values() for m in t.snapshot([{"currency": "C00", "rate": "1"}])]
    offsets: dict[str, int] = {}
    sink.process(connector_records(spark, snapshot, offsets), 0)
    plans, costs, passes = [], [], []
    for b in (1, 2, 3):
        # each batch meets the tables in another order
        order = names[b:] + names[:b]
        changes = [tables[n].update({"currency": "C00", "rate": f"{b}"}) for n in order]
        with BatchCost(spark) as cost:
            report = sink.process(connector_records(spark, changes, offsets), b)
        plans.append(sink._wire.plan)
        costs.append(cost)
        passes.append(report.one_pass)
        assert [t.rows for t in report.targets] == [1] * len(names)
    assert plans[1] is plans[2], "the JVM decoder was built anew"
    assert passes == [False, True, True], passes
    two, one = costs[0], costs[-1]
    assert two.jobs == 3, json.dumps(two.descriptions, indent=1)
    cores = spark.sparkContext.defaultParallelism
    reduce = int(spark.conf.get("spark.sql.shuffle.partitions"))
    summary, *rest = two.tasks  # the summary's job also runs its aggregate's reduce side
    tasks = list(zip(two.tasks, two.descriptions, strict=True))
    assert summary <= 2 * cores + reduce and max(rest) <= 2 * cores < len(names), tasks
    # the write's tasks are at most as many as the files a table gets
    assert two.tasks[-1] <= MAX_FILES, tasks
    assert one.jobs == 1 and one.tasks[0] <= MAX_FILES, (one.tasks, one.descriptions)
