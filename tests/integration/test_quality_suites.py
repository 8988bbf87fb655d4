"""The quality report's parts that need no tables: suite files, the GX error boundary, the
row accounting, argument checks."""

from __future__ import annotations

import io
import json
import logging
import os
from pathlib import Path

import pytest
from pydantic import ValidationError
from rich.console import Console

from lakehouse.errors import ConfigError, TableNotFoundError, WatermarkError
from lakehouse.join import JoinOptions
from lakehouse.quality import (
    CHECKS,
    CheckResult,
    QualityError,
    QualityReport,
    TableVersion,
    print_report,
    report_table,
    run_quality_report,
)
from lakehouse.quality._gx import GxSession, default_suites_dir, gx_boundary, load_suite_file
from lakehouse.quality._ledger import Accounting
from lakehouse.quality.unmatched import Unmatched

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "quality"


def test_every_check_has_a_suite_file_with_notes():
    for name in CHECKS:
        suite = load_suite_file(default_suites_dir(), name)
        assert suite.name == name
        assert suite.content["meta"]["notes"]
        assert all(e["meta"]["notes"] for e in suite.content["expectations"])


@pytest.mark.parametrize(
    ("content", "match"),
    [
        # the name must match the file, so a copied suite cannot shadow another check
        ({"name": "other", "meta": {"notes": "n"}, "expectations": []}, "must be a JSON object"),
        # every expectation explains itself
        (
            {
                "name": "pending_age",
                "meta": {"notes": "n"},
                "expectations": [{"type": "expect_column_to_exist", "kwargs": {"column": "x"}}],
            },
            "has no meta.notes",
        ),
        ({"name": "pending_age", "meta": {"notes": "n"}, "expectations": []}, "non-empty list"),
    ],
)
def test_suite_file_breaking_the_contract_is_refused(tmp_path, content, match):
    (tmp_path / "pending_age.json").write_text(json.dumps(content))
    with pytest.raises(QualityError, match=match):
        load_suite_file(tmp_path, "pending_age")


def test_missing_suite_file_names_the_path(tmp_path):
    with pytest.raises(QualityError, match=r"suite file '.*/pending_age.json' not found"):
        load_suite_file(tmp_path, "pending_age")


def test_boundary_reraises_third_party_errors_as_quality_error():
    with (
        pytest.raises(QualityError, match="while doing x: ValueError: boom") as info,
        gx_boundary("doing x"),
    ):
        raise ValueError("boom")
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.stage == "doing x"


def test_boundary_lets_lakehouse_errors_through_and_restores_log_levels():
    gx_logger = logging.getLogger("great_expectations")
    before = gx_logger.level
    with pytest.raises(WatermarkError), gx_boundary("doing y"):
        assert gx_logger.level == logging.CRITICAL
        raise WatermarkError("not GX's")
    assert gx_logger.level == before


@pytest.mark.spark
def test_expectation_gx_cannot_build_is_an_error_not_a_silent_drop(spark, tmp_path):
    # GX logs and drops an invalid expectation when a suite is built; the report refuses
    (tmp_path / "pending_age.json").write_text(
        json.dumps(
            {
                "name": "pending_age",
                "meta": {"notes": "n"},
                "expectations": [
                    {"type": "expect_no_such_thing", "kwargs": {}, "meta": {"notes": "n"}}
                ],
            }
        )
    )
    suite = load_suite_file(tmp_path, "pending_age")
    session = GxSession(tmp_path / "docs")
    with pytest.raises(QualityError, match="rejected 1 of its expectations"):
        session.validate(suite, asset="pending", df=spark.range(1))


def _accounting(**kw) -> Accounting:
    base = dict(
        batches=3,
        baseline=0,
        arrived_sum=10,
        released_sum=6,
        dead_lettered_sum=1,
        malformed=0,
        pending_rows=3,
        pending_rows_recorded=3,
        from_creation=True,
    )
    base.update(kw)
    return Accounting(**base)


def test_accounting_balances():
    a = _accounting()
    assert (a.arrived, a.accounted) == (10, 10)
    assert a.message() == (
        "arrived 10 over 3 batch(es) = 10 vs released 6 + dead-lettered 1 + pending 3 = 10"
    )


def test_accounting_without_dead_letter_table_hints_at_malformed_records():
    # 2 malformed records were dead-lettered but never counted as arrived
    a = _accounting(dead_lettered_sum=3, malformed=None)
    assert a.message().endswith(
        "2 probe row(s) counted more than once (malformed records are dead-lettered without "
        "counting as arrived; pass the dead-letter table so they can be told apart)"
    )


def test_accounting_after_log_cleanup_starts_from_the_oldest_batch():
    a = _accounting(baseline=2, arrived_sum=8, pending_rows_recorded=3, from_creation=False)
    assert a.message() == (
        "pending before 2 + arrived 8 over 3 batch(es) = 10 vs released 6 + dead-lettered 1 + "
        "pending 3 = 10 (history cleaned up: counted from the oldest remaining batch)"
    )


def _join(tmp_path, **kw) -> JoinOptions:
    base = dict(
        output_table=str(tmp_path / "out"),
        pending_table=str(tmp_path / "pending"),
        build_table=str(tmp_path / "build"),
        dead_letter_table=str(tmp_path / "dlq"),
        pipeline_id="j",
        probe_schema="id bigint, k string, ts bigint",
        probe_id="id",
        probe_key=("k",),
        probe_time="ts",
    )
    return JoinOptions(**{**base, **kw})


@pytest.mark.parametrize(
    ("join", "kw", "setting"),
    [
        # the report identifies rows by probe_id, which a join may leave unset
        ({"probe_id": None}, {}, "probe_id"),
        ({}, {"max_pending_age_ms": 0}, "max_pending_age_ms"),
        ({}, {"sample_rows": -1}, "sample_rows"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(tmp_path, join, kw, setting):
    with pytest.raises(ConfigError, match=f"quality setting '{setting}'") as info:
        run_quality_report(  # type: ignore[arg-type]
            None, _join(tmp_path, **join), report_dir=tmp_path / "report", **kw
        )
    assert info.value.setting == setting
    assert not (tmp_path / "report").exists()


def test_a_string_is_not_a_tuple_of_probe_key_columns(tmp_path):
    # JoinOptions refuses it when made, before any report can be asked for
    with pytest.raises(ValidationError, match="probe_key"):
        _join(tmp_path, probe_key="k")


def test_missing_pending_table_is_named(tmp_path):
    with pytest.raises(TableNotFoundError, match="no pending table at"):
        run_quality_report(None, _join(tmp_path), report_dir=tmp_path / "report")  # type: ignore[arg-type]


def _synthetic_report(tmp: Path) -> QualityReport:
    """A report built by hand, so its rendering is the same on every machine."""
    return QualityReport(
        success=False,
        checks=(
            CheckResult(
                name="probe_ids_unique",
                title=CHECKS["probe_ids_unique"],
                status="passed",
                message="4 probe rows in output and pending, all with distinct, non-NULL ids",
            ),
            CheckResult(
                name="output_matched",
                title=CHECKS["output_matched"],
                status="failed",
                message="2 of 3 output rows did not match (_matched = false)",
                failing_rows=(
                    {
                        "expectation": "expect_column_values_to_be_null",
                        "id": 2,
                        "k": "z",
                        "_reason": "key_never_in_dimension",
                    },
                    {
                        "expectation": "expect_column_values_to_be_null",
                        "id": 7,
                        "k": "y",
                        "_reason": "deleted",
                    },
                ),
            ),
            CheckResult(
                name="pending_age",
                title=CHECKS["pending_age"],
                status="skipped",
                message="skipped: no max_pending_age_ms given",
            ),
        ),
        tables={"output": TableVersion("/t/out", 3), "pending": TableVersion("/t/pending", None)},
        report_dir=tmp,
        summary_path=tmp / "summary.json",
        data_docs_path=tmp / "data_docs" / "index.html",
        plot_path=tmp / "watermarks.png",
        unmatched=Unmatched(
            uri=str(tmp / "unmatched_rows"),
            unmatched=2,
            pending=1,
            by_reason={"deleted": 1, "key_never_in_dimension": 1, "probe_watermark_behind": 1},
            examples=(),
            versions_read=(4,),
            explained_later=0,
        ),
        now_ms=0,
        started_at_ms=0,
        duration_s=4.25,
    )


def test_rich_rendering_matches_golden_file():
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(report_table(_synthetic_report(Path("/r")), max_rows=1))
    text = console.export_text()
    golden = GOLDEN / "report_table.txt"
    if os.environ.get("LAKEHOUSE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_report_paths_are_printed_whole_at_80_columns():
    long = Path("/data/lakehouse/reports/" + "x" * 60 + "/orders")
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    print_report(_synthetic_report(long), console=console)
    lines = console.export_text().splitlines()
    assert f"data docs: {long}/data_docs/index.html" in lines
    assert f"reasons:   {long}/unmatched_rows" in lines
    # the table itself still fits the terminal
    assert all(len(line) <= 80 for line in lines if line.startswith(("┃", "│", "┏", "└")))
