"""Progress lines: one per batch, but a join's quiet ticks (nothing arrived, released or
dead-lettered) only under ``--verbose`` (issue 34: a running join printed a line every tick)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from lakehouse.dimension import BatchReport, TargetReport
from lakehouse.join import JoinBatchReport
from lakehouse.progress import LINE_TABLES, Progress, ingest_line, quiet


def _printed(reports: list[JoinBatchReport], *, verbose: bool) -> list[str]:
    out = io.StringIO()
    progress = Progress(Console(file=out, width=60, soft_wrap=True), verbose=verbose)
    for report in reports:
        progress.join(report)
    return out.getvalue().splitlines()


TICK = JoinBatchReport(batch_id=3, pending=2, seconds=0.4)


@pytest.mark.parametrize(
    "report",
    [
        JoinBatchReport(batch_id=1, arrived=1),
        JoinBatchReport(batch_id=1, released=2, pending=0),  # a tick that released rows
        JoinBatchReport(batch_id=1, dead_lettered=1),
        JoinBatchReport(batch_id=1, expired=1),
        JoinBatchReport(batch_id=1, bound_alert="pending rows over 10"),
        JoinBatchReport(batch_id=1, skipped=True),
    ],
)
def test_a_batch_that_did_something_is_printed(report):
    assert not quiet(report)
    assert len(_printed([report], verbose=False)) >= 1


def test_a_quiet_tick_is_printed_only_when_verbose():
    assert quiet(TICK)
    assert _printed([TICK, TICK], verbose=False) == []
    shown = _printed([TICK], verbose=True)
    assert shown == ["join batch 3: arrived 0, released 0, matched 0, pending 2, 0.4s"]


def test_a_log_line_to_a_file_is_never_wrapped(capsys):
    # the command's stderr console, written to a pipe (as a scheduler's log is): one batch,
    # one line, however long (rich would wrap at 80 columns)
    from lakehouse.cli._app import err_console

    long = JoinBatchReport(batch_id=7, arrived=10**12, released=10**12, matched=10**12)
    Progress(err_console).join(long)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and len(lines[0]) > 80, lines


def _table(i: int, **kw) -> TargetReport:
    fields = {
        "table_uri": f"/lake/t{i:03d}",
        "version": 12,
        "rows": 10,
        "watermark_ms": 1_714_557_600_000 + i * 1000,
        "snapshot_complete": True,
        "phase": "complete",
    }
    return TargetReport(**{**fields, **kw})


def _plain(markup: str) -> str:
    from rich.text import Text

    return Text.from_markup(markup).plain


def test_a_batch_of_many_tables_names_those_with_news_and_sums_up_the_rest():
    tables = [_table(i) for i in range(40)]
    tables[3] = _table(3, rows=2, version=5, marker_set_now=True, signal="debezium")
    tables[7] = _table(7, rows=0, version=9, unchanged=True)
    tables[9] = _table(9, snapshot_complete=False, phase="loading")
    line = _plain(ingest_line(BatchReport(batch_id=4, records=400, changes=392, targets=tables)))
    assert line == (
        "ingest batch 4: 400 records, 392 changes, /lake/t003: +2 versions (v5), snapshot "
        "complete (marker set now by debezium), watermark 2024-05-01T10:00:03.000Z, 39 more "
        "tables: +380 versions in 38, 1 unchanged, snapshot complete in 38, snapshot loading "
        "in 1, watermarks 2024-05-01T10:00:00.000Z to 2024-05-01T10:00:39.000Z, 0.0s"
    )
    assert "/lake/t000" not in line and len(line) < 400


def test_a_batch_of_a_few_tables_names_each():
    tables = [_table(i) for i in range(LINE_TABLES)]
    line = _plain(ingest_line(BatchReport(batch_id=1, records=50, changes=50, targets=tables)))
    assert all(f"/lake/t{i:03d}: +10 versions (v12)" in line for i in range(LINE_TABLES))
    assert "more tables" not in line
