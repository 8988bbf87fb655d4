"""Progress output of the pipelines: one line per micro-batch, on a rich console, as text or
as JSON, and the batch's metrics (:mod:`lakehouse.metrics`)."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from rich.console import Console

from lakehouse.metrics import ingest_record, join_record
from lakehouse.time import WATERMARK_MIN, Watermark, format_epoch_ms

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lakehouse.dimension import BatchReport, TargetReport
    from lakehouse.join import JoinBatchReport
    from lakehouse.metrics import Metrics


def watermark_text(ms: int) -> str:
    """A watermark as progress lines show it: ``MIN`` or an ISO-8601 time."""
    return "MIN" if ms == WATERMARK_MIN else format_epoch_ms(ms)


#: An ingest batch's line names each of its tables up to this many; beyond that it names the
#: tables with news (a marker set, an alert, a schema change, ...) and sums up the rest. The
#: batch's JSON record (``--log-format json``, :mod:`lakehouse.metrics`) lists every table.
LINE_TABLES = 5


def _news(t: TargetReport) -> bool:
    """Whether a table's part of the batch is more than rows appended in its current phase."""
    return bool(
        t.marker_set_now
        or t.resnapshot_started
        or t.pending
        or t.synthetic_deletes
        or t.alert
        or t.schema_changes
        or t.schema_block
    )


def _tables_sum(targets: Sequence[TargetReport], *, more: bool) -> str:
    """The routine tables of a batch of many, in one part of its line."""
    written = [t for t in targets if not t.unchanged]
    unchanged = len(targets) - len(written)
    text = f"{len(targets)}{' more' if more else ''} tables: "
    counts = []
    if written:
        counts.append(f"+{sum(t.rows for t in written)} versions in {len(written)}")
    if unchanged:
        counts.append(f"{unchanged} unchanged")
    text += ", ".join(counts)
    phases = Counter("complete" if t.snapshot_complete else t.phase for t in targets)
    if list(phases) == ["complete"]:
        text += ", [green]snapshot complete[/]"
    else:
        text += ", " + ", ".join(f"snapshot {p} in {n}" for p, n in sorted(phases.items()))
    marks = sorted({t.watermark_ms for t in written})
    if len(marks) == 1:
        text += f", watermark {watermark_text(marks[0])}"
    elif marks:
        text += f", watermarks {watermark_text(marks[0])} to {watermark_text(marks[-1])}"
    return text


def ingest_line(report: BatchReport) -> str:
    """A one-line summary of an ingest batch (rich markup): each table's part, or past
    :data:`LINE_TABLES` tables, those with news and a sum of the rest."""
    if report.skipped:
        return f"[dim]ingest batch {report.batch_id}: already committed (replay), skipped[/]"
    parts = [
        f"[bold]ingest[/] batch {report.batch_id}: {report.records} records",
        f"{report.changes} changes",
    ]
    if report.tombstones:
        parts.append(f"{report.tombstones} tombstones")
    if report.dead_lettered:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.errors_by_kind.items()))
        parts.append(
            f"[yellow]{report.dead_lettered} dead-lettered[/]" + (f" ({kinds})" if kinds else "")
        )
    if report.unrouted:
        parts.append(f"[yellow]{report.unrouted} of no configured table[/]")
    shown: Sequence[TargetReport] = report.targets
    routine: Sequence[TargetReport] = ()
    if len(shown) > LINE_TABLES:
        shown = [t for t in report.targets if _news(t)]
        routine = [t for t in report.targets if not _news(t)]
    for t in shown:
        if t.unchanged:
            parts.append(f"{t.table_uri}: unchanged, nothing committed (v{t.version})")
            continue
        marker = "[green]snapshot complete[/]" if t.snapshot_complete else (f"snapshot {t.phase}")
        if t.marker_set_now:
            marker = f"[bold green]snapshot complete (marker set now by {t.signal})[/]"
        if t.resnapshot_started:
            marker += ", [yellow]re-snapshot started: joins stay on the last complete version[/]"
        if t.pending:
            marker += f", signal(s) {', '.join(t.pending)} waiting for their offsets"
        if t.synthetic_deletes:
            marker += f", {t.synthetic_deletes} keys not re-read ended"
        if t.alert:
            marker += f", [bold red]ALERT: {t.alert}[/]"
        if t.schema_changes:
            marker += f", {t.schema_changes} schema change(s) recorded"
        if t.schema_block:
            marker += f", [bold red]{t.schema_block}[/]"
        parts.append(
            f"{t.table_uri}: +{t.rows} versions (v{t.version}), {marker}, "
            f"watermark {watermark_text(t.watermark_ms)}"
        )
    if routine:
        parts.append(_tables_sum(routine, more=bool(shown)))
    parts.append(f"{report.seconds:.1f}s")
    return ", ".join(parts)


def join_line(report: JoinBatchReport) -> str:
    """A one-line summary of a join batch (rich markup)."""
    if report.skipped:
        return f"[dim]join batch {report.batch_id}: already committed (replay), skipped[/]"
    plan = report.plan
    wm = (
        ""
        if plan is None
        else (
            f", watermark {plan.combined} (probe {plan.probe}, build {plan.build}"
            f"{' idle' if plan.build_status.name == 'IDLE' else ''}), build v{plan.build_version}"
            + ("" if plan.final is None else f", end of input releases up to {plan.final}")
        )
    )
    extra = ""
    if report.late:
        extra += f", late {report.late}"
    if report.expired:
        extra += f", expired {report.expired}"
    if report.dead_lettered:
        extra += f", [yellow]dead-lettered {report.dead_lettered}[/]"
    replay = " [dim](replayed plan)[/]" if report.replayed_plan else ""
    alert = ""
    if report.bound_alert:
        alert = f"\n  [bold red]ALERT: {report.bound_alert}; evicted {report.evicted}[/]"
    return (
        f"[bold]join[/] batch {report.batch_id}: arrived {report.arrived}, released "
        f"{report.released}, matched {report.matched}, pending {report.pending}{extra}{wm}"
        f", {report.seconds:.1f}s{replay}{alert}"
    )


def quiet(report: JoinBatchReport) -> bool:
    """A join batch that changed nothing a reader of the output sees: no probe row arrived,
    none was released or dead-lettered, no alert (a processing-time trigger's tick while the
    probe is idle)."""
    return not (
        report.skipped
        or report.arrived
        or report.released
        or report.dead_lettered
        or report.late
        or report.expired
        or report.bound_alert
    )


class Progress:
    """Prints batch reports as they come (the ``on_batch`` callback of the sinks) and feeds
    them to ``metrics``.

    One line per batch, except a join's quiet ticks (:func:`quiet`) unless ``verbose``; with
    ``log_format="json"`` the line is the batch's record (:mod:`lakehouse.metrics`) as one JSON
    object. ``pipeline`` names the job in records and metrics.
    """

    def __init__(
        self,
        console: Console | None = None,
        *,
        verbose: bool = False,
        log_format: str = "text",
        metrics: Metrics | None = None,
        pipeline: str = "",
    ) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.verbose = verbose
        self.log_format = log_format
        self.metrics = metrics
        self.pipeline = pipeline

    def ingest(self, report: BatchReport) -> None:
        """Print an ingest batch."""
        record = ingest_record(report, pipeline=self.pipeline, now_ms=_now_ms())
        if self.metrics is not None:
            self.metrics.observe(record)
        self._print(ingest_line(report), record)

    def join(self, report: JoinBatchReport) -> None:
        """Print a join batch, unless it is a quiet tick and not ``verbose``."""
        record = join_record(report, pipeline=self.pipeline, now_ms=_now_ms())
        if self.metrics is not None:
            self.metrics.observe(record)
        if self.verbose or not quiet(report):
            self._print(join_line(report), record)

    def _print(self, line: str, record: dict[str, Any]) -> None:
        if self.log_format == "json":
            self.console.print(json.dumps(record), markup=False, highlight=False, soft_wrap=True)
        else:
            self.console.print(line)


def _now_ms() -> int:
    return int(time.time() * 1000)


def describe_watermark(value: str | None) -> str:
    """Render a stored watermark (ms as text, or a Watermark dict as JSON) for humans."""
    import json

    if value in (None, ""):
        return "-"
    assert value is not None
    try:
        return watermark_text(int(value))
    except ValueError:
        return str(Watermark.from_dict(json.loads(value)))
