"""The quality report's table of unmatched and pending rows, with the reason for each, on
tables written by the real TemporalJoin: one probe row per reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import comparable_summary, lakehouse_command, raw_records, write_build_table
from reference import Version

from lakehouse import delta
from lakehouse.join import JoinOptions, TemporalJoin
from lakehouse.quality import QualityReport, run_quality_report
from lakehouse.time import ManualClock

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000
PROBE_SCHEMA = "id bigint, k string, ts bigint"


@pytest.fixture(scope="module")
def join(spark, tmp_path_factory) -> JoinOptions:
    """A row-time left join, probe watermark = max time - 300 ms, build watermark 250 ms.

    build: a (10), c (100), d (10, deleted at 30), e (10), and a truncate at 60;
    batch 0: 1 (a, 20) matches; 2 (z, 20) key never there; 3 (c, 50) before c's first
        version; 4 (d, 40) deleted; 5 (e, 70) truncated; 6 (a, 200) waits for the probe
        watermark (99); 7 (a, 400) waits for the build watermark (250).
    then key z gets a version at time 0: at the latest build version row 2 would match, but
    it was joined (and is explained) at the version before.
    """
    root = tmp_path_factory.mktemp("unmatched")
    opts = JoinOptions(
        build_table=str(root / "build"),
        output_table=str(root / "out"),
        pending_table=str(root / "pending"),
        dead_letter_table=str(root / "dlq"),
        pipeline_id="unmatched-test",
        probe_schema=PROBE_SCHEMA,
        probe_key=("k",),
        probe_time="ts",
        probe_id="id",
        join_type="left",
        out_of_orderness_ms=300,
    )
    write_build_table(
        spark,
        opts.build_table,
        [
            Version("a", 10, "1", "r", 1),
            Version("c", 100, "2", "c", 3),
            Version("d", 10, "3", "r", 4),
            Version("d", 30, "4", "d", None),
            Version("e", 10, "5", "r", 5),
            Version(None, 60, "6", "t", None),
        ],
        watermark_ms=250,
    )
    rows = [(1, "a", 20), (2, "z", 20), (3, "c", 50), (4, "d", 40), (5, "e", 70)]
    rows += [(6, "a", 200), (7, "a", 400)]
    TemporalJoin(opts, clock=ManualClock(T0), num_buckets=2).process(
        raw_records(spark, [{"id": i, "k": k, "ts": t} for i, k, t in rows]), 0
    )
    write_build_table(spark, opts.build_table, [Version("z", 0, "7", "r", 9)], batch_id=1)
    return opts


@pytest.fixture(scope="module", params=["spark", "pandas"])
def report(spark, join, tmp_path_factory, request) -> QualityReport:
    return run_quality_report(
        spark,
        join,
        report_dir=tmp_path_factory.mktemp(f"report-{request.param}"),
        now_ms=T0,
        engine=request.param,
    )


def test_every_unmatched_and_pending_row_has_its_reason(spark, report, join):
    table = delta.read(spark, report.unmatched.uri)
    got = {r["id"]: (r["_state"], r["_reason"]) for r in table.collect()}
    assert got == {
        2: ("unmatched", "key_never_in_dimension"),
        3: ("unmatched", "before_first_version"),
        4: ("unmatched", "deleted"),
        5: ("unmatched", "truncated"),
        6: ("pending", "probe_watermark_behind"),
        7: ("pending", "build_watermark_behind"),
    }
    assert (report.unmatched.unmatched, report.unmatched.pending) == (4, 2)
    rows = {r["id"]: r for r in table.collect()}
    # explained at the version the join read, not the newer one where z has a version
    joined_at = rows[2]["_build_version"]
    assert joined_at < delta.latest_version(join.build_table)
    assert rows[2]["_explained_at_version"] == joined_at
    assert rows[4]["_detail"] == (
        "the key was deleted at 1970-01-01T00:00:00.030Z (t/0@3), before the row's time "
        f"1970-01-01T00:00:00.040Z at build version {joined_at}"
    )
    assert "build watermark (1970-01-01T00:00:00.250Z)" in rows[7]["_detail"]
    assert "probe watermark (1970-01-01T00:00:00.099Z)" in rows[6]["_detail"]
    assert rows[3]["_time"].year == 1970 and rows[3]["k"] == "c"


def test_the_reasons_are_in_the_failing_rows_and_the_summary(report):
    matched = report.check("output_matched")
    assert matched.status == "failed"
    assert sorted((r["id"], r["_reason"]) for r in matched.failing_rows) == [
        (2, "key_never_in_dimension"),
        (3, "before_first_version"),
        (4, "deleted"),
        (5, "truncated"),
    ]
    summary = json.loads(report.summary_path.read_text())
    assert summary["unmatched_rows"]["by_reason"] == {
        "before_first_version": 1,
        "build_watermark_behind": 1,
        "deleted": 1,
        "key_never_in_dimension": 1,
        "probe_watermark_behind": 1,
        "truncated": 1,
    }
    assert summary["unmatched_rows"]["table"].endswith("/unmatched_rows")
    # the Data Docs page of output_matched lists the failing rows with their reason
    page = next(
        p
        for p in (report.data_docs_path.parent / "validations").rglob("*.html")
        if "output_matched" in str(p)
    )
    html = page.read_text()
    for row in (
        "id=2 k=z ts=20 (batch 0): key_never_in_dimension",
        "id=4 k=d ts=40 (batch 0): deleted",
    ):
        assert row in html
    # the page names the table it validated (GX alone says "Data asset: None")
    assert f"output table {report.tables['output'].uri} @ v" in html


def test_the_table_is_queryable_with_lakehouse_sql(report, join, tmp_path):
    cfg = tmp_path / "lakehouse.toml"
    cfg.write_text(
        f'[join]\npipeline_id = "x"\nsource = "files"\npath = "{tmp_path}/probe"\n'
        f'checkpoint = "{tmp_path}/cp"\nprobe_schema = "{PROBE_SCHEMA}"\nprobe_key = ["k"]\n'
        f'probe_time = "ts"\nprobe_id = "id"\nbuild_table = "{join.build_table}"\n'
        f'output_table = "{join.output_table}"\npending_table = "{join.pending_table}"\n'
        f'dead_letter_table = "{join.dead_letter_table}"\n'
        f'[quality]\nreport_dir = "{report.report_dir}"\n'
    )
    done = lakehouse_command(
        "sql",
        "-c",
        str(cfg),
        "SELECT _reason, count(*) AS n FROM unmatched_rows GROUP BY _reason ORDER BY _reason",
        cwd=tmp_path,
        columns=200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for reason in ("before_first_version", "deleted", "key_never_in_dimension", "truncated"):
        assert reason in done.stdout


def test_the_engines_explain_every_row_alike(spark, join, tmp_path):
    """The differential proof of the pandas engine's explanations: every reason (a key
    never there, before its first version, deleted, truncated, waiting for either
    watermark), one row explained at the version it was joined at, not the latest."""
    reports = {
        e: run_quality_report(spark, join, report_dir=tmp_path / e, now_ms=T0, engine=e)
        for e in ("spark", "pandas")
    }
    summaries = {e: comparable_summary(r.summary_path, tmp_path / e) for e, r in reports.items()}
    assert summaries["pandas"] == summaries["spark"]
    rows = {
        e: sorted(map(str, delta.read(spark, r.unmatched.uri).collect()))
        for e, r in reports.items()
    }
    assert rows["pandas"] == rows["spark"]


@pytest.mark.parametrize("engine", ["spark", "pandas"])
def test_a_report_without_unmatched_rows_writes_an_empty_table(spark, tmp_path, engine):
    root = tmp_path
    opts = JoinOptions(
        build_table=str(root / "build"),
        output_table=str(root / "out"),
        pending_table=str(root / "pending"),
        dead_letter_table=str(root / "dlq"),
        pipeline_id="all-matched",
        until_complete=True,  # releases the newest row too: nothing is left pending
        probe_schema=PROBE_SCHEMA,
        probe_key=("k",),
        probe_time="ts",
        probe_id="id",
    )
    write_build_table(spark, opts.build_table, [Version("a", 1, "1", "r", 1)], watermark_ms=10**12)
    TemporalJoin(opts, clock=ManualClock(T0), num_buckets=2).process(
        raw_records(spark, [{"id": 1, "k": "a", "ts": 5}, {"id": 2, "k": "a", "ts": 6}]), 0
    )
    report = run_quality_report(spark, opts, report_dir=root / "report", engine=engine)
    assert (report.unmatched.rows, dict(report.unmatched.by_reason)) == (0, {})
    assert delta.row_count(report.unmatched.uri) == 0
    assert Path(report.unmatched.uri).name == "unmatched_rows"
