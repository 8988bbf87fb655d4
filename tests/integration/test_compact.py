"""Compaction of the build table and the lineage-respecting vacuum, on real Spark and Delta.

* Property: for random version histories (inserts, updates, deletes, truncates, equal times)
  and any horizon, the as-of answer of ``tests/reference.py`` for every key and every probe
  time >= the horizon is the same before and after compaction.
* A build table written by the real build sink: compaction is one atomic overwrite that keeps
  the properties (snapshot marker) and transaction ids, records what it did, and a join run
  afterwards gives the same output for probes inside the horizon; a concurrent ingest append
  makes it fail with nothing written.
* Vacuum keeps the build versions the output's ``_build_version`` references readable and
  deletes the files only unreferenced versions used.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import assert_rows_equal, raw_records, write_build_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType
from reference import Version, as_of

from lakehouse import delta
from lakehouse.cli import main
from lakehouse.delta.maintenance import files_at
from lakehouse.dimension import BuildSink, BuildTarget
from lakehouse.dimension.layout import INGESTED_AT, PROP_SNAPSHOT_COMPLETE, PROP_TABLE_KIND
from lakehouse.errors import ConcurrentCommitError
from lakehouse.join import JoinOptions, TemporalJoin
from lakehouse.maintenance import compact, compacted, vacuum_table
from lakehouse.sources.schema import RAW_SCHEMA_DDL
from lakehouse.testing import DebeziumTable

pytestmark = pytest.mark.spark

BUILD_DDL = "k string, value bigint, _op string, _event_time timestamp, _seq string"


@st.composite
def history(draw):
    versions = []
    for i in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(["r", "c", "u", "u", "d", "t"]))
        versions.append(
            Version(
                None if op == "t" else draw(st.sampled_from("abc")),
                draw(st.integers(0, 20)),
                f"{draw(st.integers(0, 3))}.{i:03d}",
                op,
                value=100 + i,
            )
        )
    return versions, draw(st.integers(-1, 21))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=history())
def test_as_of_at_or_after_the_horizon_is_unchanged(spark, case):
    versions, horizon = case
    rows = [
        (v.key, v.value, v.op, datetime.fromtimestamp(v.time / 1000, UTC), v.seq) for v in versions
    ]
    df = spark.createDataFrame(rows, StructType.fromDDL(BUILD_DDL))
    after = [
        Version(r.k, int(r._event_time.timestamp() * 1000), r._seq, r._op, r.value)
        for r in compacted(df, ("k",), horizon).collect()
    ]
    # every version that starts after the horizon is kept
    assert sorted(v.value for v in versions if v.time > horizon) == sorted(
        v.value for v in after if v.time > horizon
    )
    # at most one version per key at or before it, and no truncate there
    old = [v for v in after if v.time <= horizon]
    assert all(v.op not in ("t", "d") for v in old)
    assert len({v.key for v in old}) == len(old)
    for key in ("a", "b", "c", "z"):
        for t in [*range(horizon, 23), None]:
            before_v, after_v = as_of(versions, key, t), as_of(after, key, t)
            assert (before_v and before_v.value) == (after_v and after_v.value), (key, t)


# ------------------------------------------------------------------- a real build table


def _raw(spark, messages, *, first_offset=0):
    rows = [
        (m.key_bytes(), m.value_bytes(), "cdc", 0, first_offset + i, datetime.now(UTC), 0)
        for i, m in enumerate(messages)
    ]
    return spark.createDataFrame(rows, StructType.fromDDL(RAW_SCHEMA_DDL))


T0 = 1_700_000_000_000
#: A probe time that passes every earlier one and is no future time (the join refuses those).
WALL_CLOCK_MS = int(time.time() * 1000)
MINUTE = 60_000


def _ingested_rates(spark, tmp: Path) -> tuple[BuildSink, DebeziumTable, int]:
    """Snapshot, then a log with updates, a delete, a truncate and re-inserts, through the
    real build sink; returns the sink, the generator and the next offset."""
    t = DebeziumTable("public", "rates", key="currency", start_ms=T0)
    snap = t.snapshot([{"currency": c, "rate": "1.0"} for c in ("EUR", "GBP", "JPY", "CHF")])
    log = []
    t.advance(MINUTE)  # T0 + 1 min
    log += [t.update({"currency": "EUR", "rate": "1.1"}), *t.delete("GBP")]
    t.advance(MINUTE)  # + 2 min
    log += [
        t.update({"currency": "EUR", "rate": "1.2"}),
        t.update({"currency": "JPY", "rate": "2"}),
    ]
    t.advance(MINUTE)  # + 3 min
    log += [t.truncate()]
    t.advance(MINUTE)  # + 4 min
    log += [
        t.insert({"currency": "EUR", "rate": "1.3"}),
        t.insert({"currency": "CHF", "rate": "3"}),
    ]
    t.advance(MINUTE)  # + 5 min
    log += [t.update({"currency": "EUR", "rate": "1.4"}), *t.delete("CHF")]
    t.advance(MINUTE)  # + 6 min
    log += [t.insert({"currency": "GBP", "rate": "1.5"})]
    sink = BuildSink(
        [BuildTarget(str(tmp / "rates"), key_columns=("currency",))],
        dead_letter_table=str(tmp / "dlq"),
        pipeline_id="ingest",
    )
    sink.process(_raw(spark, snap), 0)
    sink.process(_raw(spark, log, first_offset=len(snap)), 1)
    return sink, t, len(snap) + len(log)


def _join_orders(spark, tmp: Path, build: str, name: str, times: list[int]):
    opts = JoinOptions(
        build_table=build,
        output_table=str(tmp / name / "out"),
        pending_table=str(tmp / name / "pending"),
        dead_letter_table=str(tmp / name / "dlq"),
        pipeline_id=name,
        probe_schema="id bigint, currency string, ts bigint",
        probe_key=("currency",),
        probe_time="ts",
        join_type="left",
        build_idle_timeout_ms=1,  # the build table is quiet: let the probe watermark rule
    )
    probes = [
        {"id": i * 10 + j, "currency": c, "ts": ts}
        for i, ts in enumerate(times)
        for j, c in enumerate(("EUR", "GBP", "JPY", "CHF", "USD"))
    ]
    # moves the watermark on (a time from the past: the join dead-letters far-future times)
    probes.append({"id": 10**6, "currency": "EUR", "ts": WALL_CLOCK_MS})
    TemporalJoin(opts, num_buckets=2).process(raw_records(spark, probes), 0)
    out = delta.read(spark, opts.output_table).collect()
    return [(r.id, r.rate, r._matched, r._build_event_time) for r in out]


def test_compaction_of_a_real_build_table_keeps_joins_inside_the_horizon(spark, tmp_path):
    sink, gen, offset = _ingested_rates(spark, tmp_path)
    build = str(tmp_path / "rates")
    props_before = delta.get_properties(build)
    assert props_before[PROP_SNAPSHOT_COMPLETE] == "true"
    rows_before = delta.row_count(build)
    horizon = T0 + 3 * MINUTE + 30_000  # after the truncate, before the re-inserts
    # probes inside the horizon: at it, between the versions after it, and far later
    inside = [horizon, T0 + 4 * MINUTE, T0 + 5 * MINUTE + 1, T0 + 7 * MINUTE]
    expected = _join_orders(spark, tmp_path, build, "before", inside)

    steps: list[str] = []
    result = compact(spark, build, horizon_ms=horizon, on_step=steps.append)
    assert steps[0] == "reading the build table" and steps[-1] == "committing"
    # everything at or before the horizon is gone: the truncate ended it all
    assert (result.rows_before, result.rows_after) == (rows_before, 5)
    assert result.truncates == 1 and result.version == delta.latest_version(build)
    commit = delta.history(build, limit=1)[0]
    assert commit.metadata["lakehouse.operation"] == "compact"
    recorded = json.loads(commit.metadata["lakehouse.compaction"])
    assert (recorded["rowsBefore"], recorded["rowsAfter"], recorded["horizonMs"]) == (
        rows_before,
        5,
        horizon,
    )
    assert delta.get_properties(build) == props_before  # the snapshot marker and all
    assert delta.transaction_version(build, "ingest") == 1

    assert_rows_equal(_join_orders(spark, tmp_path, build, "after", inside), expected)
    # the old versions stay readable by time travel until vacuumed
    assert delta.read(spark, build, version=result.read_version).count() == rows_before

    # the ingest goes on appending after the compaction
    more = [gen.update({"currency": "GBP", "rate": "1.6"})]
    report = sink.process(_raw(spark, more, first_offset=offset), 2)
    assert report.targets[0].rows == 1
    assert delta.row_count(build) == 6

    # a dry run decides and writes nothing
    version = delta.latest_version(build)
    dry = compact(spark, build, horizon_ms=T0 + 10 * MINUTE, dry_run=True)
    assert dry.version is None and dry.rows_after < dry.rows_before
    assert delta.latest_version(build) == version


def test_compaction_fails_cleanly_when_the_ingest_appends_concurrently(spark, tmp_path):
    sink, gen, offset = _ingested_rates(spark, tmp_path)
    build = str(tmp_path / "rates")
    rows = sorted(map(tuple, delta.read(spark, build).drop(INGESTED_AT).collect()), key=repr)
    entries = set(Path(build).iterdir())

    def ingest_appends():
        sink.process(
            _raw(spark, [gen.insert({"currency": "USD", "rate": "9"})], first_offset=offset), 2
        )

    with pytest.raises(ConcurrentCommitError, match="changed while it was being rewritten"):
        compact(spark, build, horizon_ms=T0 + 3 * MINUTE, before_commit=ingest_appends)
    # the append is there, the compaction is not: every version plus the new one
    after = sorted(map(tuple, delta.read(spark, build).drop(INGESTED_AT).collect()), key=repr)
    assert len(after) == len(rows) + 1 and set(rows) <= set(after)
    assert delta.history(build, limit=1)[0].metadata.get("lakehouse.operation") is None
    staged = [p.name for p in set(Path(build).iterdir()) - entries if p.name.startswith("c-")]
    assert staged == []


# ---------------------------------------------------------------------------------- vacuum


def test_vacuum_keeps_the_build_versions_the_output_references(spark, tmp_path):
    from reference import Version as V

    build = str(tmp_path / "build")
    write_build_table(spark, build, [V("a", 1, "1", "r", 10)], watermark_ms=10**12)
    referenced = delta.latest_version(build)  # the marker commit: what the join pins
    opts = JoinOptions(
        build_table=build,
        output_table=str(tmp_path / "out"),
        pending_table=str(tmp_path / "pending"),
        dead_letter_table=str(tmp_path / "dlq"),
        pipeline_id="j",
        probe_schema="id bigint, k string, ts bigint",
        probe_key=("k",),
        probe_time="ts",
        join_type="left",
    )
    TemporalJoin(opts, num_buckets=2).process(
        raw_records(spark, [{"id": 1, "k": "a", "ts": 5}, {"id": 2, "k": "a", "ts": 10**12}]), 0
    )
    assert {r._build_version for r in delta.read(spark, opts.output_table).collect()} == {
        referenced
    }
    expected = delta.read(spark, build, version=referenced).collect()

    # later versions nobody joined: an append, a compaction, another append, a compaction
    write_build_table(spark, build, [V("a", 2, "2", "u", 11)], batch_id=1, watermark_ms=10**12)
    unreferenced = delta.latest_version(build)
    compact(spark, build, horizon_ms=3)
    write_build_table(spark, build, [V("a", 4, "3", "u", 12)], batch_id=2, watermark_ms=10**12)
    compact(spark, build, horizon_ms=5)

    def files(version: int) -> set[str]:
        return {Path(u).name for u in files_at(build, version)}

    plain = vacuum_table(None, build, retention_hours=0, dry_run=True)
    lineage = vacuum_table(spark, build, output_uris=[opts.output_table], retention_hours=0)
    assert lineage.dry_run and lineage.kept_versions == (referenced,)
    assert lineage.oldest_referenced == referenced
    gone = {Path(f).name for f in lineage.files}
    # without lineage the referenced version's file would go too; with it, it stays
    assert files(referenced) <= {Path(f).name for f in plain.files}
    assert not files(referenced) & gone
    assert files(unreferenced) - files(referenced) <= gone and gone
    assert all((Path(build) / f).exists() for f in lineage.files)  # dry run: still there

    applied = vacuum_table(
        spark, build, output_uris=[opts.output_table], retention_hours=0, dry_run=False
    )
    assert set(applied.files) == set(lineage.files)
    assert not any((Path(build) / f).exists() for f in applied.files)
    # the referenced version still reads, and re-derives the output row
    assert_rows_equal(delta.read(spark, build, version=referenced).collect(), expected)
    assert delta.read(spark, build).count() == 1  # the latest version is whole too


@pytest.mark.spark
def test_vacuum_of_a_build_table_without_outputs_is_refused(spark, tmp_path, capsys, monkeypatch):

    monkeypatch.delenv("LAKEHOUSE_CONFIG", raising=False)
    uri = str(tmp_path / "rates")
    delta.create_table(
        uri,
        StructType.fromDDL("k string"),
        properties={PROP_SNAPSHOT_COMPLETE: "true", PROP_TABLE_KIND: "build"},
    )
    with pytest.raises(SystemExit) as exited:
        main(["vacuum", uri])
    assert exited.value.code == 2
    err = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert "is a build table and no output table joining it is configured" in err
    assert "--output" in err
