"""The quality report on real tables written by the real TemporalJoin operator.

Each check has a passing case and a failing case. Failures the operator cannot produce (a
replayed batch written twice, a lost pending row, a decreasing watermark, a row joined before
the snapshot) are injected with ``lakehouse.delta`` functions into a copy of real tables.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import comparable_summary, lakehouse_command, raw_records, write_build_table
from pyspark.sql import functions as F
from reference import Version

from lakehouse import delta
from lakehouse.join import JoinOptions, TemporalJoin
from lakehouse.quality import QualityReport, run_quality_report
from lakehouse.time import ManualClock, Watermark

pytestmark = pytest.mark.spark

PROBE_SCHEMA = "id bigint, k string, ts bigint"
T0 = 1_700_000_000_000  # the join's (manual) clock at batch 0
MINUTE = 60_000


def _options(root: Path, **kw) -> JoinOptions:
    base = dict(
        build_table=str(root / "build"),
        output_table=str(root / "out"),
        pending_table=str(root / "pending"),
        dead_letter_table=str(root / "dlq"),
        pipeline_id="quality-test",
        probe_schema=PROBE_SCHEMA,
        probe_key=("k",),
        probe_time="ts",
        probe_id="id",
    )
    base.update(kw)
    return JoinOptions(**base)


def _probe(spark, rows, first_offset=0):
    return raw_records(
        spark,
        [r if isinstance(r, str) else {"id": r[0], "k": r[1], "ts": r[2]} for r in rows],
        first_offset=first_offset,
    )


@pytest.fixture(scope="module", params=["spark", "pandas"])
def engine(request) -> str:
    """Each report of this module runs on both engines (``test_the_engines_write_the_same_
    report`` compares them)."""
    return request.param


def _report(spark, opts: JoinOptions, report_dir: Path, **kw) -> QualityReport:
    """The report of the join ``opts`` describes; ``kw`` overrides a join option (such as
    ``probe_time``) or an argument of the report (such as ``engine``)."""
    join = opts.model_copy(update={k: kw.pop(k) for k in list(kw) if k in JoinOptions.model_fields})
    args = dict(report_dir=report_dir, max_pending_age_ms=10 * MINUTE, now_ms=T0 + 2 * MINUTE)
    args.update(kw)
    return run_quality_report(spark, join, **args)


def _statuses(report: QualityReport) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def _copy_tables(src: Path, dst: Path) -> JoinOptions:
    for name in ("build", "out", "pending", "dlq"):
        if (src / name).exists():
            shutil.copytree(src / name, dst / name)
    return _options(dst)


@pytest.fixture(scope="module")
def rowtime(spark, tmp_path_factory) -> JoinOptions:
    """A healthy row-time inner join after two batches.

    batch 0 (clock T0): ids 1 (a, 5), 2 (b, 8), 3 (a, 100) and one malformed record;
        probe watermark 99: 1 and 2 released and matched, 3 pending, the malformed record
        dead-lettered.
    batch 1 (clock T0 + 1 min): ids 4 (z, 50), 5 (b, 200); watermark 199: 3 released
        (matched), 4 released but unmatched (key z is not in the build table, so the inner
        join drops it), 5 pending.
    Output {1, 2, 3}; pending {5}; arrived 5 = released 4 + pending 1 (the malformed record
    is dead-lettered without counting as arrived).
    """
    root = tmp_path_factory.mktemp("quality-rowtime")
    opts = _options(root)
    write_build_table(
        spark,
        opts.build_table,
        [Version("a", 1, "1", "r", 10), Version("b", 1, "2", "r", 20)],
        watermark_ms=10**12,
    )
    clock = ManualClock(T0)
    join = TemporalJoin(opts, clock=clock, num_buckets=2)
    join.process(_probe(spark, [(1, "a", 5), (2, "b", 8), (3, "a", 100), "not json"]), 0)
    clock.advance(MINUTE)
    join.process(_probe(spark, [(4, "z", 50), (5, "b", 200)], first_offset=4), 1)
    return opts


@dataclass(frozen=True)
class Run:
    """A report and what its directory held right after it was written."""

    report: QualityReport
    summary: dict
    files: list[str]
    docs_index: str


def _run(spark, opts: JoinOptions, report_dir: Path, **kw) -> Run:
    report = _report(spark, opts, report_dir, **kw)
    return Run(
        report=report,
        summary=json.loads(report.summary_path.read_text()),
        files=sorted(str(p.relative_to(report_dir)) for p in report_dir.rglob("*")),
        docs_index=report.data_docs_path.read_text(),
    )


@pytest.fixture(scope="module")
def report_dir(engine, tmp_path_factory) -> Path:
    """One report directory (per engine) that the healthy and then the defective report are
    written to."""
    return tmp_path_factory.mktemp(f"report-{engine}")


@pytest.fixture(scope="module")
def healthy(spark, rowtime, report_dir, engine) -> Run:
    return _run(spark, rowtime, report_dir, engine=engine)


# ------------------------------------------------------------------------- passing cases


def test_healthy_join_passes_every_check(healthy):
    assert _statuses(healthy.report) == {
        "probe_ids_unique": "passed",
        "probe_rows_accounted": "passed",
        "output_matched": "passed",
        "proctime_build_version": "passed",
        "pending_age": "passed",
        "watermark_monotonic": "passed",
    }
    assert healthy.report.success
    assert all(not c.failing_rows for c in healthy.report.checks)


def test_summary_records_observed_values_and_versions(healthy, rowtime):
    summary = healthy.summary
    assert (summary["success"], summary["failed_checks"]) == (True, [])
    checks = {c["name"]: c for c in summary["checks"]}
    # 3 output rows + 1 pending row, all ids distinct
    assert checks["probe_ids_unique"]["observed"] == {
        "rows": 4,
        "duplicated_rows": 0,
        "null_ids": 0,
    }
    # the malformed record is dead-lettered without counting as arrived; the dead-letter
    # table tells it apart
    assert checks["probe_rows_accounted"]["observed"] == {
        "batches": 2,
        "baseline_pending": 0,
        "arrived": 5,
        "released": 4,
        "dead_lettered": 1,
        "malformed_dead_letters": 1,
        "pending_rows": 1,
        "pending_rows_recorded": 1,
        "arrived_total": 5,
        "accounted_total": 5,
        "history_from_creation": True,
    }
    assert checks["probe_rows_accounted"]["message"] == (
        "arrived 5 over 2 batch(es) = 5 vs released 4 + dead-lettered 1 - 1 malformed + "
        "pending 1 = 5"
    )
    # id 4 (time 50) arrived after the watermark had reached 99, but the inner join drops it
    assert checks["output_matched"]["observed"] == {"rows": 3, "unmatched": 0, "late": 0}
    # a row-time join writes no processing-time rows
    assert checks["proctime_build_version"]["observed"]["proctime_rows"] == 0
    # id 5 arrived in batch 1 at T0 + 1 min; the report time is T0 + 2 min
    assert checks["pending_age"]["observed"]["oldest_age_ms"] == MINUTE
    assert checks["watermark_monotonic"]["observed"] == {
        "batches": 2,
        "decreases": 0,
        "first": str(Watermark(99)),
        "last": str(Watermark(199)),
    }
    assert summary["tables"] == {
        "output": {
            "uri": rowtime.output_table,
            "version": delta.latest_version(rowtime.output_table),
        },
        "pending": {
            "uri": rowtime.pending_table,
            "version": delta.latest_version(rowtime.pending_table),
        },
        "build": {"uri": rowtime.build_table, "version": delta.latest_version(rowtime.build_table)},
        "dead_letter": {
            "uri": rowtime.dead_letter_table,
            "version": delta.latest_version(rowtime.dead_letter_table),
        },
    }
    assert summary["run"]["duration_s"] > 0
    assert checks["output_matched"]["suite"].endswith("suites/output_matched.json")


def test_data_docs_and_plot_are_written(healthy, report_dir):
    report = healthy.report
    assert report.data_docs_path == report_dir / "data_docs" / "index.html"
    assert "probe_ids_unique" in healthy.docs_index
    assert "watermark_monotonic" in healthy.docs_index
    pages = [f for f in healthy.files if f.startswith("data_docs/validations/")]
    assert sum(f.endswith(".html") for f in pages) == 6  # one validation page per check
    assert report.plot_path == report_dir / "watermarks.png"
    assert report.plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # GX's context is ephemeral: nothing of it is left outside data_docs/
    assert {f.split("/")[0] for f in healthy.files} == {
        "data_docs",
        "summary.json",
        "unmatched_rows",
        "watermarks.png",
    }


# ------------------------------------------------------------------------- failing cases


@pytest.fixture(scope="module")
def defective_tables(spark, rowtime, tmp_path_factory) -> JoinOptions:
    """A copy of the healthy tables with injected defects the join itself cannot produce.

    * output: batch 1's rows appended a second time with the same batch id, as a replay that
      skipped the idempotence check would write them (id 3 twice);
    * output: a processing-time row (id 100) joined at the build version before the
      snapshot-complete one;
    * pending: a batch 2 commit that records one arrival it neither released nor kept
      (a lost row), and a combined watermark of 50, below batch 1's 199.

    At the report time T0 + 12 min, id 5 (arrived T0 + 1 min) has waited 11 minutes.
    """
    root = tmp_path_factory.mktemp("quality-defective")
    opts = _copy_tables(Path(rowtime.output_table).parent, root)
    out = delta.read(spark, opts.output_table)
    delta.append(out.filter("_batch_id = 1"), opts.output_table, metadata={"lakehouse.batchId": 1})
    completed = int(delta.get_properties(opts.build_table)["lakehouse.snapshot.completedVersion"])
    early = (
        out.filter("id = 1")
        .withColumn("id", F.lit(100).cast("bigint"))
        .withColumn("_join_mode", F.lit("proctime"))
        .withColumn("_build_version", F.lit(completed - 1).cast("bigint"))
    )
    delta.append(early, opts.output_table, metadata={"lakehouse.batchId": 1})
    plan = json.loads(delta.history(opts.pending_table, limit=1)[0].metadata["lakehouse.plan"])
    plan.update(batchId=2, previous=plan["combined"], combined=Watermark(50).to_dict())
    delta.overwrite(
        delta.read(spark, opts.pending_table),
        opts.pending_table,
        metadata={
            "lakehouse.batchId": 2,
            "lakehouse.pipeline": opts.pipeline_id,
            "lakehouse.plan": json.dumps(plan),
            "lakehouse.pendingRows": 1,
            "lakehouse.arrived": 1,
            "lakehouse.released": 0,
            "lakehouse.deadLettered": 0,
        },
    )
    return opts


@pytest.fixture(scope="module")
def defective(spark, defective_tables, healthy, report_dir, engine) -> Run:
    """The defective tables reported ten minutes later into the healthy report's directory
    (a second run there)."""
    return _run(spark, defective_tables, report_dir, now_ms=T0 + 12 * MINUTE, engine=engine)


def test_replayed_batch_written_twice_fails_uniqueness(defective):
    unique = defective.report.check("probe_ids_unique")
    assert unique.status == "failed"
    # output: 1, 2, 3, 3 (again), 100; pending: 5
    assert unique.observed == {"rows": 6, "duplicated_rows": 2, "null_ids": 0}
    assert sorted((r["probe_id"], r["_table"], r["_batch_id"]) for r in unique.failing_rows) == [
        (3, "output", 1),
        (3, "output", 1),
    ]
    assert unique.message == (
        "6 probe rows in output and pending, 2 row(s) share their probe id with another row"
    )


def test_lost_row_fails_accounting_with_the_numbers(defective):
    accounted = defective.report.check("probe_rows_accounted")
    assert accounted.status == "failed"
    assert accounted.message == (
        "arrived 6 over 3 batch(es) = 6 vs released 4 + dead-lettered 1 - 1 malformed + "
        "pending 1 = 5: 1 probe row(s) lost"
    )
    assert (accounted.observed["arrived_total"], accounted.observed["accounted_total"]) == (6, 5)


def test_row_joined_before_the_snapshot_fails_proctime_check(defective, rowtime):
    proc = defective.report.check("proctime_build_version")
    completed = int(
        delta.get_properties(rowtime.build_table)["lakehouse.snapshot.completedVersion"]
    )
    assert proc.status == "failed"
    assert (proc.observed["proctime_rows"], proc.observed["joined_before_snapshot"]) == (1, 1)
    assert [(r["id"], r["k"], r["ts"], r["_build_version"]) for r in proc.failing_rows] == [
        (100, "a", 5, completed - 1)
    ]


def test_old_pending_row_fails_age_check(defective):
    age = defective.report.check("pending_age")
    assert age.status == "failed"
    assert (age.observed["too_old"], age.observed["oldest_age_ms"]) == (1, 11 * MINUTE)
    assert [(r["id"], r["k"], r["ts"]) for r in age.failing_rows] == [(5, "b", 200)]
    assert age.message.startswith("1 of 1 pending rows arrived more than 600000 ms before")


def test_decreasing_watermark_fails_monotonic_check(defective):
    mono = defective.report.check("watermark_monotonic")
    assert mono.status == "failed"
    assert mono.observed["decreases"] == 1
    assert [(r["batch_id"], r["combined"], r["previous_combined"]) for r in mono.failing_rows] == [
        (2, str(Watermark(50)), str(Watermark(199)))
    ]


def test_second_run_into_the_same_dir_replaces_the_first(defective, report_dir):
    # each defect fails its own check only; output_matched still passes
    assert defective.summary["failed_checks"] == [
        "probe_ids_unique",
        "probe_rows_accounted",
        "proctime_build_version",
        "pending_age",
        "watermark_monotonic",
    ]
    assert not defective.report.success
    # the Data Docs show this run only: one validation page per check, none of the first run
    pages = [f for f in defective.files if f.startswith("data_docs/validations/")]
    assert sum(f.endswith(".html") for f in pages) == 6
    assert defective.report.plot_path.is_file()


# ------------------------------------------------------------------ processing-time mode


@pytest.fixture(scope="module")
def proctime(spark, tmp_path_factory) -> JoinOptions:
    """A processing-time left join of ids 1, 2 (key a), 3 (b) and 4 (z) after the build
    table's snapshot is complete: all four are released at the latest build version; id 4
    matches nothing and the left join writes it unmatched."""
    root = tmp_path_factory.mktemp("quality-proctime")
    opts = _options(root, mode="proctime", watermark="none", probe_time=None, join_type="left")
    write_build_table(
        spark, opts.build_table, [Version("a", 1, "1", "r", 10), Version("b", 2, "2", "r", 20)]
    )
    TemporalJoin(opts, clock=ManualClock(T0), num_buckets=2).process(
        _probe(spark, [(1, "a", 5), (2, "a", 6), (3, "b", 7), (4, "z", 8)]), 0
    )
    return opts


def test_processing_time_join_after_the_snapshot_passes(spark, proctime, engine, tmp_path):
    report = _report(spark, proctime, tmp_path, probe_time=None, engine=engine)
    proc = report.check("proctime_build_version")
    completed = int(
        delta.get_properties(proctime.build_table)["lakehouse.snapshot.completedVersion"]
    )
    assert proc.status == "passed"
    assert (proc.observed["proctime_rows"], proc.observed["completed_version"]) == (4, completed)
    assert proc.message == (
        f"4 processing-time output rows, all joined at build version >= {completed} "
        "(snapshot complete)"
    )
    # the left join's unmatched row is listed with its probe id, key and the reason (no
    # probe time here)
    matched = report.check("output_matched")
    assert matched.status == "failed"
    assert matched.observed == {"rows": 4, "unmatched": 1, "late": 0}
    assert [(r["id"], r["k"], r["_reason"], r["_unmatched"]) for r in matched.failing_rows] == [
        (4, "z", "key_never_in_dimension", "id=4 k=z (batch 0): key_never_in_dimension")
    ]
    assert {n for n, s in _statuses(report).items() if s == "failed"} == {"output_matched"}


def test_processing_time_rows_without_a_marker_fail(spark, proctime, engine, tmp_path):
    # a copy whose marker is taken back: no processing-time row may exist at all
    copy = _copy_tables(Path(proctime.output_table).parent, tmp_path / "tables")
    tables = ("build_table", "output_table", "pending_table", "dead_letter_table")
    opts = proctime.model_copy(update={k: getattr(copy, k) for k in tables})
    delta.set_properties(opts.build_table, {"lakehouse.snapshot.complete": "false"})
    report = _report(
        spark, opts, tmp_path / "report", probe_time=None, max_pending_age_ms=None, engine=engine
    )
    proc = report.check("proctime_build_version")
    assert proc.status == "failed"
    assert (proc.observed["joined_before_snapshot"], proc.observed["completed_version"]) == (
        4,
        None,
    )
    assert proc.message == (
        "the build table has no snapshot-complete marker, and 4 processing-time output row(s) exist"
    )
    assert sorted(r["id"] for r in proc.failing_rows) == [1, 2, 3, 4]
    # without max_pending_age_ms the age check is skipped, which does not fail the report
    assert report.check("pending_age").status == "skipped"


# ------------------------------------------------------------------ the command a scheduler runs


def _quality_command(cwd: Path, opts: JoinOptions, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``lakehouse quality``, run from ``cwd`` with a configuration naming the
    join's tables, as cron or a Databricks job runs it."""
    cfg = cwd / "lakehouse.toml"
    cfg.write_text(
        '[spark]\nmaster = "local[1]"\n'
        'conf = { "spark.sql.shuffle.partitions" = "1", "spark.ui.enabled" = "false" }\n'
        f'[join]\npipeline_id = "{opts.pipeline_id}"\nsource = "files"\npath = "{cwd}/probe"\n'
        f'checkpoint = "{cwd}/checkpoint"\nprobe_schema = "{PROBE_SCHEMA}"\nprobe_key = ["k"]\n'
        f'probe_time = "ts"\nprobe_id = "id"\nbuild_table = "{opts.build_table}"\n'
        f'output_table = "{opts.output_table}"\npending_table = "{opts.pending_table}"\n'
        f'dead_letter_table = "{opts.dead_letter_table}"\n'
    )
    return lakehouse_command("quality", "-c", str(cfg), *args, cwd=cwd, columns=200)


@pytest.mark.slow
def test_the_quality_command_exits_1_on_a_failed_check_0_on_success_2_on_misuse(
    spark, rowtime, tmp_path
):
    # healthy tables, the documented relative --report-dir: exit 0, the report where asked
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    opts = _copy_tables(Path(rowtime.output_table).parent, healthy)
    ok = _quality_command(healthy, opts, "--report-dir", "quality-report")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert (healthy / "quality-report" / "summary.json").exists()

    # a batch written twice (a replay that skipped the idempotence check): a failed check
    broken = tmp_path / "broken"
    broken.mkdir()
    opts = _copy_tables(Path(rowtime.output_table).parent, broken)
    out = delta.read(spark, opts.output_table)
    delta.append(out.filter("_batch_id = 1"), opts.output_table, metadata={"lakehouse.batchId": 1})
    failed = _quality_command(broken, opts, "--report-dir", "quality-report")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    summary = json.loads((broken / "quality-report" / "summary.json").read_text())
    assert summary["success"] is False

    # a usage error: 2, one line
    misuse = _quality_command(broken, opts, "--max-pending-age-ms", "soon")
    assert misuse.returncode == 2
    assert "Traceback" not in misuse.stderr


# ------------------------------------------------------------------------- the two engines


def test_the_engines_write_the_same_report(spark, defective_tables, tmp_path):
    """The differential proof of the pandas engine: on tables where every check has
    something to say (a duplicate, a lost row, a row joined before the snapshot, an old
    pending row, a decreasing watermark), both engines write the same summary, the same
    unmatched-rows table and a Data Docs page per suite."""
    runs = {
        e: _run(spark, defective_tables, tmp_path / e, now_ms=T0 + 12 * MINUTE, engine=e)
        for e in ("spark", "pandas")
    }
    summaries = {
        e: comparable_summary(run.report.summary_path, tmp_path / e) for e, run in runs.items()
    }
    assert summaries["pandas"] == summaries["spark"]
    tables = {e: runs[e].report.unmatched.uri for e in runs}
    rows = {e: sorted(map(str, delta.read(spark, uri).collect())) for e, uri in tables.items()}
    assert rows["pandas"] == rows["spark"]
    schemas = {e: delta.table_schema(uri) for e, uri in tables.items()}
    assert [(f.name, f.dataType) for f in schemas["pandas"]] == [
        (f.name, f.dataType) for f in schemas["spark"]
    ]
    assert delta.get_properties(tables["pandas"])["lakehouse.tableKind"] == "unmatched"
    assert [p for p in runs["pandas"].files if "validations" in p and p.endswith(".html")]
