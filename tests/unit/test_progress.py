"""Progress lines: one per batch, but a join's quiet ticks (nothing arrived, released or
dead-lettered) only under ``--verbose`` (issue 34: a running join printed a line every tick)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from lakehouse.join import JoinBatchReport
from lakehouse.progress import Progress, quiet


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
