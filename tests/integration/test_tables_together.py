"""The rows of a batch's tables written by one Spark job (``delta.stage_appends``) against each
table written by a job of its own: the same tables, files statistics and commits.

Two sinks ingest the same connector's batches, one with ``spark.lakehouse.writeTablesTogether``
on (the default) and one with it off. The batches hold what sends a table back to its own write
(a table the batch creates, a column a record adds) beside tables the joint write takes, a
delete, a record that is dead-lettered and a record of two tables of one catch-all target.
One table asks Delta to compact its small files after each write, as Delta's own writer does
it for the table.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from batch_cost import BatchCost
from helpers import add_column, connector_records

from lakehouse import delta
from lakehouse.delta import write as delta_write
from lakehouse.delta.write import AUTO_COMPACT, TABLES_TOGETHER_CONF
from lakehouse.dimension import BuildSink, BuildTarget
from lakehouse.dimension.layout import INGESTED_AT
from lakehouse.dimension.one_pass import ONE_PASS_CONF
from lakehouse.testing.debezium import DebeziumTable

pytestmark = pytest.mark.spark

NAMES = ("rates", "fees", "taxes")
CODES = [f"C{i:02d}" for i in range(6)]
#: columns of when a run ingested or dead-lettered a record, or the record arrived
_TIMES = {INGESTED_AT, "_dead_lettered_at", "_source_timestamp"}


#: the session's least number of small files Delta's auto compaction compacts
_MIN_FILES = "spark.databricks.delta.autoCompact.minNumFiles"


@contextlib.contextmanager
def _together(spark: Any, on: bool):
    spark.conf.set(TABLES_TOGETHER_CONF, "true" if on else "false")
    spark.conf.set(_MIN_FILES, "2")
    # the two-job batch, whose write this compares (its one pass: test_one_pass.py)
    spark.conf.set(ONE_PASS_CONF, "false")
    try:
        yield
    finally:
        spark.conf.unset(TABLES_TOGETHER_CONF)
        spark.conf.unset(_MIN_FILES)
        spark.conf.unset(ONE_PASS_CONF)


def _sink(root: Path) -> BuildSink:
    return BuildSink(
        [
            BuildTarget(str(root / n), key_columns=("currency",), source_table=f"public.{n}")
            for n in NAMES
        ],
        dead_letter_table=str(root / "dlq"),
        pipeline_id="together",
    )


def _batches() -> list[list[Any]]:
    tables = {
        n: DebeziumTable("public", n, key="currency", start_ms=1_000, step_ms=10) for n in NAMES
    }
    snapshot = [
        m
        for t in tables.values()
        for m in t.snapshot([{"currency": c, "rate": "1"} for c in CODES])
    ]
    steady = [
        tables[n].update({"currency": c, "rate": f"2.{i}"})
        for n in NAMES
        for i, c in enumerate(CODES[:4])
    ]
    steady += tables["fees"].delete("C05", tombstone=False)
    # no key: a dead letter of every table that routes it
    steady.append(tables["taxes"].update({"currency": None, "rate": "3"}))
    drift = [
        tables["rates"].update({"currency": "C01", "rate": "4"}),
        add_column(tables["fees"].update({"currency": "C02", "rate": "4"}), "note", "string", "x"),
        tables["taxes"].insert({"currency": "C09", "rate": "4"}),
    ]
    return [snapshot, steady, steady[:3], drift]


def _file_stats(uri: str) -> tuple[int, dict[str, Any], dict[str, Any], dict[str, int]]:
    """The table's live files' statistics merged: rows, and per column the least and greatest
    value and the null count (the table's, whatever its files)."""
    snap = delta.snapshot(uri)
    rows, least, most, nulls = 0, {}, {}, {}
    for line in snap._jsnapshot.allFiles().toJSON().collectAsList():
        stats = json.loads(json.loads(line)["stats"])
        rows += stats["numRecords"]
        for k, v in stats["minValues"].items():
            least[k] = v if k not in least else min(least[k], v)
        for k, v in stats["maxValues"].items():
            most[k] = v if k not in most else max(most[k], v)
        for k, v in stats["nullCount"].items():
            nulls[k] = nulls.get(k, 0) + v
    # the batch's ingest time differs between the two runs
    for values in (least, most):
        values.pop(INGESTED_AT, None)
    return rows, least, most, nulls


def _commits(uri: str) -> list[tuple[str, int, dict[str, str]]]:
    """The table's commits: operation, rows and ``lakehouse.*`` metadata, without the times of
    the records' arrival (the records of each run are made anew)."""
    return [
        (
            c.operation,
            c.rows,
            {k: re.sub(r'"kafkaTimestamp": \d+', "", v) for k, v in c.metadata.items()},
        )
        for c in delta.history(uri)
    ]


@pytest.mark.parametrize("evaluation", ["interpreted", "generated"])
def test_tables_written_by_one_job_are_the_tables_written_one_by_one(
    spark, tmp_path, monkeypatch, evaluation
):
    """The joint write evaluates its batches' few rows interpreted; with the threshold at 0
    it generates code for them, as for a batch of many rows: either way, the same tables."""
    if evaluation == "generated":
        monkeypatch.setattr(delta_write, "INTERPRETED_ROWS_PER_TABLE", 0)
    runs = {}
    for on in (True, False):
        root = tmp_path / ("together" if on else "apart")
        sink, offsets, jobs = _sink(root), {}, []
        with _together(spark, on):
            for batch_id, messages in enumerate(_batches()):
                with BatchCost(spark) as cost:
                    report = sink.process(connector_records(spark, messages, offsets), batch_id)
                jobs.append(cost.jobs)
                if batch_id == 0:
                    delta.set_properties(str(root / "rates"), {AUTO_COMPACT: "true"})
            # a replay of the last batch writes nothing, either way
            replay = sink.process(
                connector_records(
                    spark, messages, {k: v - len(messages) for k, v in offsets.items()}
                ),
                batch_id,
            )
        assert all(t.skipped or t.rows == 0 for t in replay.targets), replay
        runs[on] = root, jobs, report
    (together, jobs_together, report), (apart, jobs_apart, report_apart) = runs[True], runs[False]
    # the steady batch writes its tables' rows in one job, not a job per table; the batch
    # where a record adds a column to one table writes that table on its own, the two others
    # in one job
    assert jobs_apart[1] - jobs_together[1] == len(NAMES) - 1, (jobs_together, jobs_apart)
    assert jobs_apart[3] - jobs_together[3] == 1, (jobs_together, jobs_apart)
    assert [t.rows for t in report.targets] == [t.rows for t in report_apart.targets]
    for name in (*NAMES, "dlq"):
        a, b = str(together / name), str(apart / name)
        columns = [c for c in spark.read.format("delta").load(a).columns if c not in _TIMES]
        left = spark.read.format("delta").load(a).select(*columns)
        right = spark.read.format("delta").load(b).select(*columns)
        assert left.exceptAll(right).count() == 0 and right.exceptAll(left).count() == 0, name
        if name == "dlq":
            continue
        assert _file_stats(a) == _file_stats(b), name
        assert _commits(a) == _commits(b), name
        if name == "rates":  # compacted after its writes, whichever wrote them
            assert any(c.operation == "OPTIMIZE" for c in delta.history(a)), name
        assert delta.get_properties(a).keys() == delta.get_properties(b).keys(), name


def test_the_joint_write_sends_its_tasks_one_hadoop_configuration_for_all_its_tables(
    spark, tmp_path
):
    # Delta's statistics tracker of each table copies the table's Hadoop configuration (about
    # a thousand keys): equal to the configuration the tables share, it is that one object,
    # serialised once into the job's tasks however many tables the job writes
    from lakehouse.delta import _engine
    from lakehouse.delta.log import snapshot

    uris = [str(tmp_path / n) for n in NAMES]
    for uri in uris:
        spark.createDataFrame([("C00", 1.0)], "currency string, rate double").write.format(
            "delta"
        ).save(uri)
    row = "struct(cast('C01' as string) as currency, cast(2.0 as double) as rate)"
    df = spark.sql(f"select {', '.join(f'{row} as t{i}' for i in range(len(uris)))}")
    fields = df._jdf.schema().fields()

    def outputs_bytes(count: int) -> int:
        tables = []
        for i, uri in enumerate(uris[:count]):
            snap = snapshot(uri, spark=spark)
            tables.append(
                _engine.TableRows(
                    log=snap._log,
                    jsnapshot=snap._jsnapshot,
                    schema=fields[i].dataType(),
                    app_id="one-configuration",
                    version=0,
                    event_time=-1,
                )
            )
        joint = _engine._prepare_outputs(spark, df._jdf, tables, 1)
        return len(spark._jvm.org.apache.spark.util.Utils.serialize(joint.outputs()))

    one, three = outputs_bytes(1), outputs_bytes(len(uris))
    # each table's own copy would make three tables' outputs about three times one table's
    assert three < 1.3 * one, (one, three)


def test_a_tables_kept_writer_is_made_again_when_its_settings_or_columns_change(spark, tmp_path):
    # a table's writer parts (Delta's statistics tracker, the Parquet factory) are kept between
    # joint writes; what Delta records of each file must still follow the table as it is now:
    # its statistics columns (a delta.* setting) and its columns
    from lakehouse.delta import _engine

    uri = str(tmp_path / "rates")
    spark.createDataFrame([("C00", 1.0)], "currency string, rate double").write.format(
        "delta"
    ).save(uri)

    def write(batch: int, row: str) -> dict[str, Any]:
        df = spark.sql(f"select {row} as t0")
        joint = delta.stage_appends(
            df, [uri], txn=("kept-writer", batch), max_files=1, event_time="none"
        )
        staged = joint.appends[0]
        assert staged is not None, "the joint write took the table"
        version = staged.commit().version
        log = Path(uri) / "_delta_log" / f"{version:020d}.json"
        (add,) = [json.loads(x)["add"] for x in log.read_text().splitlines() if '"add"' in x]
        return json.loads(add["stats"])

    two = "struct(cast('C01' as string) as currency, cast(2.0 as double) as rate)"
    assert write(1, two)["minValues"].keys() == {"currency", "rate"}
    kept = dict(_engine._WRITERS[spark.sparkContext._gateway])
    assert write(2, two)["minValues"].keys() == {"currency", "rate"}
    assert dict(_engine._WRITERS[spark.sparkContext._gateway]) == kept, "kept, not made again"

    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES (delta.dataSkippingNumIndexedCols = 1)")
    assert write(3, two)["minValues"].keys() == {"currency"}

    spark.sql(f"ALTER TABLE delta.`{uri}` ADD COLUMNS (fee double)")
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES (delta.dataSkippingNumIndexedCols = 3)")
    three = (
        "struct(cast('C02' as string) as currency, cast(3.0 as double) as rate, "
        "cast(0.5 as double) as fee)"
    )
    assert write(4, three)["minValues"] == {"currency": "C02", "rate": 3.0, "fee": 0.5}
