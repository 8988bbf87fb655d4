"""A steady ingest batch decoded, written and summarised in one Spark job
(:mod:`lakehouse.dimension.one_pass`) against the same batches in two jobs
(``spark.lakehouse.ingestOnePass=false``): the same tables, commits and dead letters, and the
batches that take one pass are the ones foreseen.

Two sinks ingest the same connector's batches (three tables of one connector, with and without
Connect schemas): steady updates, a table a batch does not touch, a delete with its tombstone,
a record without its key (a dead letter: the batch's foreseen rows are not its rows), a column
a record adds (another plan), and the batches after each.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from batch_cost import BatchCost
from helpers import add_column, connector_records

from lakehouse import delta
from lakehouse.dimension import BuildSink, BuildTarget
from lakehouse.dimension.layout import INGESTED_AT
from lakehouse.dimension.one_pass import ONE_PASS_CONF
from lakehouse.testing.debezium import DebeziumTable, Message

pytestmark = pytest.mark.spark

NAMES = ("rates", "fees", "taxes")
CODES = [f"C{i:02d}" for i in range(6)]


@contextlib.contextmanager
def _one_pass(spark: Any, on: bool):
    spark.conf.set(ONE_PASS_CONF, "true" if on else "false")
    try:
        yield
    finally:
        spark.conf.unset(ONE_PASS_CONF)


def _batches(with_schema: bool) -> list[tuple[bool, int | None, list[Any]]]:
    """The batches, each with whether a one-pass sink takes it in one pass and, when it does,
    its Spark jobs (None: not pinned): 1 when every table's rows are as foreseen, one more for
    the tables whose are not (written together)."""
    tables = {
        n: DebeziumTable(
            "public", n, key="currency", start_ms=1_000, step_ms=10, with_schema=with_schema
        )
        for n in NAMES
    }

    def updates(names: tuple[str, ...], value: str) -> list[Any]:
        return [tables[n].update({"currency": c, "rate": value}) for n in names for c in CODES[:4]]

    snapshot = [
        m
        for t in tables.values()
        for m in t.snapshot([{"currency": c, "rate": "1"} for c in CODES])
    ]
    # with Connect schemas the JVM knew the first record's only (the other tables' it learned
    # from the Python decoder in the first batch: not steady); without, the shape of the
    # first record's image, the three tables' alike
    batches: list[tuple[bool, int | None, list[Any]]] = [
        (False, None, snapshot),
        (not with_schema, None if with_schema else 1, updates(NAMES, "2")),
        (True, 1, updates(("rates", "fees"), "2.5")),
        # a delete and its tombstone; taxes was not in the batch before: not foreseen
        (True, 2, [*updates(NAMES, "3"), *tables["fees"].delete("C05", tombstone=True)]),
        # no key: a dead letter of taxes, whose rows are written again without it
        (
            True,
            None,
            [*updates(NAMES, "4"), tables["taxes"].update({"currency": None, "rate": "4"})],
        ),
        (True, 1, updates(NAMES, "5")),
        # a record the JVM leaves to Python (no Connect schema in a stream with them; a payload
        # that is not an envelope without): not steady, every foreseen file deleted
        (
            False,
            None,
            [
                *updates(NAMES, "6"),
                Message(None, {"payload": {"source": {"table": "rates"}}, "op": "q"}),
            ],
        ),
        (False, None, updates(NAMES, "7")),  # waits one batch after a miss
        (True, 1, updates(NAMES, "8")),
    ]

    # a column the table's records have from now on (a DDL): with Connect schemas, a schema
    # the JVM does not know yet (the Python decoder reads it: not steady); without, a column
    # set fees is written again with
    def with_note(m: Any) -> Any:
        if with_schema:
            return add_column(m, "note", "string", "x")
        assert m.value is not None
        return Message(m.key, {**m.value, "after": {**m.value["after"], "note": "x"}})

    def noted(value: str) -> list[Any]:
        return [with_note(m) if "fees" in str(m.value) else m for m in updates(NAMES, value)]

    if not with_schema:  # the batches above, as without Connect schemas: the first three
        batches = batches[:3]
    batches += [
        # without: taxes, not in the batch before, and fees (its new column) in two more jobs
        (not with_schema, None if with_schema else 3, noted("9")),
        (False, None, noted("10")),  # waits, or its decoder learned since
        (True, 1, noted("11")),
    ]
    return batches


def _table(spark: Any, uri: str, root: Path) -> list[tuple[Any, ...]]:
    rows = delta.read(spark, uri)
    # when a run ingested or dead-lettered a record, or the record arrived
    times = (INGESTED_AT, "_dead_lettered_at", "_source_timestamp")
    rows = rows.drop(*[c for c in times if c in rows.columns])
    return sorted(
        (tuple(str(v).replace(str(root), "<root>") for v in r) for r in rows.collect()), key=repr
    )


def _commits(uri: str, root: Path) -> list[tuple[str, int, dict[str, str]]]:
    """The table's commits: operation, rows and ``lakehouse.*`` metadata, without the times of
    the records' arrival (the records of each run are made anew)."""
    return [
        (
            c.operation,
            c.rows,
            {
                k: re.sub(r'"kafkaTimestamp": \d+', "", v).replace(str(root), "<root>")
                for k, v in c.metadata.items()
                if not k.endswith("completedAt")
            },
        )
        for c in delta.history(uri)
    ]


@pytest.mark.parametrize("with_schema", [True, False], ids=["schemas", "bare"])
def test_batches_in_one_pass_write_what_two_jobs_write(spark, tmp_path, with_schema):
    batches = _batches(with_schema)
    runs: dict[bool, Any] = {}
    for on in (True, False):
        root = tmp_path / ("one" if on else "two")
        sink = BuildSink(
            [
                BuildTarget(str(root / n), key_columns=("currency",), source_table=f"public.{n}")
                for n in NAMES
            ],
            dead_letter_table=str(root / "dlq"),
            pipeline_id="passes",
        )
        offsets: dict[str, int] = {}
        passes, jobs = [], []
        with _one_pass(spark, on):
            for batch_id, (_, _, messages) in enumerate(batches):
                with BatchCost(spark) as cost:
                    report = sink.process(connector_records(spark, messages, offsets), batch_id)
                passes.append(report.one_pass)
                jobs.append(cost.jobs)
        runs[on] = (root, passes, jobs)

    (one, passes, jobs), (two, never, _) = runs[True], runs[False]
    assert not any(never)
    # jobs are pinned where the batch's rows alone decide them (not the dead letters' write)
    got = [
        (p, j if want else None) for p, j, (_, want, _) in zip(passes, jobs, batches, strict=True)
    ]
    assert got == [(p, j) for p, j, _ in batches], got
    dlq = delta.table_exists(str(two / "dlq"))
    assert delta.table_exists(str(one / "dlq")) == dlq == with_schema
    for name in (*NAMES, "dlq") if dlq else NAMES:
        assert _table(spark, str(one / name), one) == _table(spark, str(two / name), two), name
    for name in NAMES:
        assert _commits(str(one / name), one) == _commits(str(two / name), two), name
    if dlq:
        dead = json.dumps(_table(spark, str(one / "dlq"), one))
        assert dead.count("missing_key") == 1 and dead.count("<root>") == 0, dead
    # a batch in one pass of a few rows is one task: each table's rows are one file
    for name in NAMES:
        for c in delta.history(str(one / name)):
            batch = c.metadata.get("lakehouse.batchId")
            if batch is None or not passes[int(batch)] or not c.rows:
                continue
            lines = (one / name / "_delta_log" / f"{c.version:020d}.json").read_text()
            adds = [line for line in lines.splitlines() if line.startswith('{"add"')]
            assert len(adds) == 1, (name, c.version, adds)
    # a miss leaves no file of its foreseen rows: a file no version names holds no row (Delta's
    # writer leaves an empty one where a task of a table's own write had none)
    for name in NAMES:
        uri = str(one / name)
        live = {Path(p).name for p in delta.files_at(uri, delta.latest_version(uri))}
        left = [p for p in (one / name).glob("*.parquet") if p.name not in live]
        assert all(pq.read_metadata(p).num_rows == 0 for p in left), (name, left)
