"""The quality report as a rich table for the terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from lakehouse.quality.unmatched import TABLE_NAME

if TYPE_CHECKING:
    from rich.console import RenderableType

    from lakehouse.quality.report import QualityReport

_STATUS_STYLE = {"passed": "bold green", "failed": "bold red", "skipped": "yellow"}
#: Keys of a failing row the console leaves out: the expectation's name, and output_matched's
#: ``_unmatched`` text (the same id, key and reason again, written for the Data Docs).
_NOT_SHOWN = frozenset({"expectation", "_unmatched"})
_STATUS_LABEL = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def report_table(report: QualityReport, *, max_rows: int = 5) -> RenderableType:
    """Render the report: one row per check (status, check, finding), a few failing rows
    under each failed check, then the table versions and the artifact paths.

    Args:
        report: what :func:`~lakehouse.quality.run_quality_report` returned.
        max_rows: failing rows shown per check (all of them are in ``summary.json``).

    Returns:
        A rich renderable; print it with a :class:`rich.console.Console`.
    """
    verdict = "all checks passed" if report.success else f"{len(report.failed)} check(s) failed"
    table = Table(
        title=f"data quality: {verdict} ({report.duration_s:.1f} s)",
        title_style=_STATUS_STYLE["passed" if report.success else "failed"],
        show_lines=True,
        expand=False,
    )
    table.add_column("", no_wrap=True, width=4)
    table.add_column("check", max_width=28)
    table.add_column("finding", min_width=36)
    for check in report.checks:
        finding: list[Any] = [Text(check.message)]
        if check.failing_rows:
            rows = check.failing_rows[:max_rows]
            lines = [
                ", ".join(f"{k}={v}" for k, v in row.items() if k not in _NOT_SHOWN) for row in rows
            ]
            more = len(check.failing_rows) - len(rows)
            if more > 0:
                lines.append(f"... {more} more in summary.json")
            finding.append(Text("\n".join(lines), style="dim"))
        table.add_row(
            Text(_STATUS_LABEL[check.status], style=_STATUS_STYLE[check.status]),
            Text.assemble((check.name, "bold"), "\n", (check.title, "dim")),
            Group(*finding),
        )
    u = report.unmatched
    if u.rows:
        reasons = ", ".join(f"{reason} {n}" for reason, n in u.by_reason.items())
        why = Text.assemble(
            (f"not matched: {u.unmatched} output row(s), {u.pending} pending", "bold"),
            f" — by reason: {reasons}\n",
            (f"every row with its reason: lakehouse sql ... FROM {TABLE_NAME}", "dim"),
        )
    else:
        why = Text("not matched: none (no unmatched output row, nothing pending)", style="dim")
    versions = ", ".join(
        f"{name} v{t.version}" if t.version is not None else f"{name} (none)"
        for name, t in report.tables.items()
    )
    footer = Text(
        f"tables: {versions}\n"
        f"data docs: {report.data_docs_path}\n"
        f"summary:   {report.summary_path}\n"
        f"plot:      {report.plot_path}\n"
        f"reasons:   {u.uri}",
        style="dim",
        # paths whole on one line each, whatever the width: cut or folded they cannot be
        # copied from a terminal or found in a CI log (print with crop=False)
        no_wrap=True,
        overflow="ignore",
    )
    return Group(table, why, footer)


def print_report(
    report: QualityReport, *, console: Console | None = None, max_rows: int = 5
) -> None:
    """Print :func:`report_table` to ``console`` (default: a new stdout console); the
    artifact paths are printed whole, beyond the console's width if they must."""
    (console or Console()).print(report_table(report, max_rows=max_rows), crop=False)
