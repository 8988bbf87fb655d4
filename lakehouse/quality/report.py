"""The data-quality report of a temporal join's tables, validated with Great Expectations.

A run reads the join's tables at one consistent pair of versions, validates them with the
suites in ``expectations/`` (one JSON file per concern) on pandas or Spark
(:mod:`lakehouse.quality.frames`: local tables need no JVM), and writes to a report
directory:

* ``data_docs/index.html``: Great Expectations Data Docs of the run's validations;
* ``summary.json``: each check with pass/fail, observed values, a sample of failing rows,
  the table versions validated and the run time;
* ``watermarks.png``: the probe, build and combined watermarks (for a processing-time join,
  each channel's watermark state) and the pending backlog over batch commit time, with the
  build snapshot's completion marked;
* ``unmatched_rows/``: a Delta table of every unmatched output row and every pending row with
  the reason (:mod:`lakehouse.quality.unmatched`): the key never in the dimension, older than
  its first version, deleted or truncated at that time, or (pending) the snapshot incomplete
  or a watermark behind the row. The reasons also appear with the failing rows of
  ``output_matched`` and ``pending_age`` in the Data Docs, the console and ``summary.json``.

The checks are in :mod:`lakehouse.quality.checks`; what a run reads, at which versions, in
:mod:`lakehouse.quality.pin`; the two engines' frames in :mod:`lakehouse.quality.frames`
(Spark) and :mod:`lakehouse.quality._pandas` (pandas).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal

from lakehouse.dimension.layout import PROP_SNAPSHOT_COMPLETED_AT
from lakehouse.errors import ConfigError
from lakehouse.quality._gx import (
    DOCS_DIR,
    GxSession,
    default_suites_dir,
)
from lakehouse.quality._gx import load_suite_file as _load_suite_file
from lakehouse.quality._plot import plot_watermarks
from lakehouse.quality.checks import CHECKS as CHECKS
from lakehouse.quality.checks import CheckName as CheckName
from lakehouse.quality.checks import CheckResult as CheckResult
from lakehouse.quality.checks import Checks
from lakehouse.quality.checks import CheckStatus as CheckStatus
from lakehouse.quality.frames import Engine, Frames, SparkFrames
from lakehouse.quality.pin import BuildMarker, pin_tables
from lakehouse.quality.pin import TableVersion as TableVersion
from lakehouse.quality.unmatched import TABLE_NAME as UNMATCHED_TABLE
from lakehouse.quality.unmatched import LastBatch, Unmatched
from lakehouse.time import format_epoch_ms

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.join.options import JoinOptions

#: How :func:`run_quality_report` computes: an engine, or ``auto`` (:func:`choose_engine`).
EngineChoice = Literal["auto", "pandas", "spark"]

SUMMARY_FILE: Final = "summary.json"
PLOT_FILE: Final = "watermarks.png"


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityReport:
    """The result of :func:`run_quality_report`.

    Attributes:
        success: True when no check failed (skipped checks do not count).
        checks: one result per check, in :data:`CHECKS` order.
        tables: ``output``, ``pending``, ``build`` and (when given) ``dead_letter``, with the
            version validated.
        report_dir: where the artifacts are.
        summary_path: ``summary.json``.
        data_docs_path: the Data Docs ``index.html``.
        plot_path: ``watermarks.png``.
        unmatched: the table of unmatched and pending rows with their reasons.
        now_ms: the report time (pending ages are measured against it).
        started_at_ms: wall-clock start of the run, epoch ms.
        duration_s: how long the run took.
    """

    success: bool
    checks: tuple[CheckResult, ...]
    tables: Mapping[str, TableVersion]
    report_dir: Path
    summary_path: Path
    data_docs_path: Path
    plot_path: Path
    unmatched: Unmatched
    now_ms: int
    started_at_ms: int
    duration_s: float

    def check(self, name: CheckName) -> CheckResult:
        """The result of check ``name``.

        Raises:
            KeyError: no such check.
        """
        for result in self.checks:
            if result.name == name:
                return result
        raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self.checks]}")

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        """The failed checks."""
        return tuple(c for c in self.checks if c.status == "failed")


def run_quality_report(
    spark: SparkSession | None,
    join: JoinOptions,
    *,
    report_dir: str | os.PathLike[str],
    max_pending_age_ms: int | None = None,
    now_ms: int | None = None,
    sample_rows: int = 20,
    suites_dir: str | os.PathLike[str] | None = None,
    engine: EngineChoice = "auto",
) -> QualityReport:
    """Validate a temporal join's output and pending tables and write the report.

    Computes on pandas (the tables read by delta-rs, no JVM) or on Spark, as ``engine``
    says; both give the same report. On Spark it uses the caller's SparkSession (no session
    is created or changed; with ``spark`` None, the active or a new one). Reads the tables
    only; may run while the join pipeline runs (see the module docstring on
    consistency). A failing check is a result, not an exception: look at
    :attr:`QualityReport.success` (the CLI turns it into the exit code).

    Args:
        spark: the session the Spark engine runs on; None: the active session, or a new one
            when the report runs on Spark (the pandas engine starts none).
        join: the join's options; the report reads its tables and columns:
            ``output_table``; ``pending_table``, whose history is the per-batch ledger;
            ``build_table``, whose ``lakehouse.snapshot.*`` properties (latest version) drive
            the processing-time check (a missing table counts as "no marker");
            ``dead_letter_table``, which tells malformed probe records (dead-lettered without
            counting as arrived) apart in the accounting; ``probe_id`` (required here: it
            identifies a probe row), ``probe_key`` and ``probe_time`` (shown with failing
            rows; None for a join without one), ``probe_time_unit`` (to find an unmatched
            row's time) and ``build_key`` (default the build table's ``lakehouse.primaryKey``).
        report_dir: directory for ``data_docs/``, ``summary.json``, ``watermarks.png`` and
            ``unmatched_rows/``; created if missing. Artifacts of an earlier run there are replaced.
        max_pending_age_ms: the oldest a pending row may be; None skips the check.
        now_ms: the report time, epoch ms; default the wall clock. Pass it to make a run
            reproducible.
        sample_rows: failing rows kept per expectation.
        suites_dir: directory of the suite files; default ``$LAKEHOUSE_EXPECTATIONS_DIR`` or
            the repository's ``expectations/``.
        engine: ``pandas``, ``spark``, or ``auto``: pandas when every table is on this
            machine's file system and delta-rs reads it, else Spark
            (:func:`choose_engine`).

    Returns:
        The report; its files are written before it is returned.

    Raises:
        ConfigError: an argument is invalid, a named column is not in the tables (checked
            before any Spark work), or ``engine="pandas"`` for a table it cannot read.
        TableNotFoundError: there is no pending table at ``pending_table``.
        QualityError: Great Expectations failed (chained), or a suite file or the tables'
            commit metadata is unusable.
    """
    started = time.monotonic()
    started_at_ms = int(time.time() * 1000)
    now = started_at_ms if now_ms is None else now_ms
    output_table, pending_table = join.output_table, join.pending_table
    build_table, dead_letter_table = join.build_table, join.dead_letter_table
    probe_id, probe_key, probe_time = join.probe_id, join.probe_key, join.probe_time
    _check_arguments(probe_id, probe_key, probe_time, max_pending_age_ms, sample_rows)
    assert probe_id is not None  # checked above
    out_dir = Path(report_dir).absolute()  # Great Expectations wants an absolute path
    suites_path = Path(suites_dir) if suites_dir is not None else default_suites_dir()
    suites = {name: _load_suite_file(suites_path, name) for name in CHECKS}
    pinned = pin_tables(
        output_table=output_table,
        pending_table=pending_table,
        build_table=build_table,
        dead_letter_table=dead_letter_table,
        probe_id=probe_id,
        probe_key=probe_key,
        probe_time=probe_time,
    )

    frames = _frames(spark, join, engine)
    # the two tables the checks scan are read once, at the pinned versions
    pending = frames.read(pending_table, pinned.pending_version)
    if pinned.output_version is not None:
        output = frames.read(output_table, pinned.output_version)
    else:
        output = frames.empty_output(pinned.pending_schema, pinned.id_columns)
    try:
        docs_dir = out_dir / DOCS_DIR
        if docs_dir.exists():
            shutil.rmtree(docs_dir)  # the site shows this run only
        out_dir.mkdir(parents=True, exist_ok=True)
        last = pinned.ledger.records[-1] if pinned.ledger.records else None
        unmatched = frames.explain_rows(
            output=output,
            pending=pending,
            build_table=build_table,
            build_key=join.build_key or pinned.build.key,
            probe_id=probe_id,
            probe_key=probe_key,
            probe_time=probe_time,
            probe_time_unit=join.probe_time_unit,
            last_batch=None
            if last is None
            else LastBatch(
                combined=last.combined,
                probe=last.probe,
                build=last.build,
                marker_complete=pinned.build.complete,
            ),
            uri=str(out_dir / UNMATCHED_TABLE),
            examples=sample_rows,
        )
        checks = Checks(
            frames=frames,
            session=GxSession(docs_dir, engine=frames.engine),
            suites=suites,
            pinned=pinned,
            output=output,
            pending=pending,
            sample_rows=sample_rows,
            reasons=unmatched.uri,
        )
        results = [
            checks.probe_ids_unique(),
            checks.probe_rows_accounted(),
            checks.output_matched(),
            checks.proctime_build_version(),
            checks.pending_age(max_pending_age_ms=max_pending_age_ms, now_ms=now),
            checks.watermark_monotonic(),
        ]
        docs_index = checks.session.build_docs()
    finally:
        frames.release(pending, output)

    plot_path = plot_watermarks(
        pinned.ledger.records,
        out_dir / PLOT_FILE,
        title=(
            f"{pending_table.rstrip('/').rsplit('/', 1)[-1]} @ v{pinned.pending_version}: "
            "watermarks and pending backlog"
        ),
        source=f"pending table: {pending_table}",
        snapshot_completed_at=(
            pinned.build.properties.get(PROP_SNAPSHOT_COMPLETED_AT)
            if pinned.build.complete
            else None
        ),
    )
    report = QualityReport(
        success=all(r.success for r in results),
        checks=tuple(results),
        tables=MappingProxyType(pinned.tables()),
        report_dir=out_dir,
        summary_path=out_dir / SUMMARY_FILE,
        data_docs_path=docs_index,
        plot_path=plot_path,
        unmatched=unmatched,
        now_ms=now,
        started_at_ms=started_at_ms,
        duration_s=time.monotonic() - started,
    )
    _write_summary(report, pinned.build)
    return report


# ------------------------------------------------------------------------------- engines


def _tables(join: JoinOptions) -> dict[str, str]:
    """The join's tables the report reads, by setting."""
    tables = {
        "join.output_table": join.output_table,
        "join.pending_table": join.pending_table,
        "join.build_table": join.build_table,
    }
    if join.dead_letter_table:
        tables["join.dead_letter_table"] = join.dead_letter_table
    return tables


def unreadable_locally(join: JoinOptions) -> tuple[str, str] | None:
    """The first of the join's tables the pandas engine cannot read, as (setting, why); None
    when it reads them all. Reads table logs only (no Spark): a table on other storage than
    this machine's file system, or one delta-rs cannot open."""
    from lakehouse.delta.inspect import open_view
    from lakehouse.storage import local_path

    for setting, uri in _tables(join).items():
        if local_path(uri) is None:
            return setting, f"'{uri}' is not on this machine's file system"
        if open_view(uri) is None:
            return setting, f"delta-rs cannot open '{uri}'"
    return None


def choose_engine(join: JoinOptions, engine: EngineChoice = "auto") -> Engine:
    """The engine a report of ``join`` runs on: ``engine``, or for ``auto`` pandas when every
    table is local and delta-rs reads it, else Spark (object storage, a cluster's tables, a
    protocol feature delta-rs lacks), as ``lakehouse sql`` chooses DuckDB or Spark.

    Raises:
        ConfigError: ``engine`` is not one of auto, pandas, spark; or pandas was asked for
            and a table is out of its reach.
    """
    if engine not in ("auto", "pandas", "spark"):
        raise ConfigError(
            f"quality.engine (--engine) must be auto, pandas or spark, got {engine!r}",
            setting="quality.engine",
        )
    if engine == "spark":
        return "spark"
    blocked = unreadable_locally(join)
    if blocked is None:
        return "pandas"
    if engine == "auto":
        return "spark"
    setting, why = blocked
    raise ConfigError(
        f"quality.engine (--engine) pandas cannot read {setting}: {why}; use --engine spark "
        "(or auto)",
        setting="quality.engine",
    )


def _frames(spark: SparkSession | None, join: JoinOptions, engine: EngineChoice) -> Frames:
    if choose_engine(join, engine) == "pandas":
        from lakehouse.quality._pandas import PandasFrames

        return PandasFrames()
    if spark is None:
        from lakehouse.spark import get_spark

        spark = get_spark()
    return SparkFrames(spark)


# ------------------------------------------------------------------------------- arguments


def _check_arguments(
    probe_id: str | None,
    probe_key: Sequence[str],
    probe_time: str | None,
    max_pending_age_ms: int | None,
    sample_rows: int,
) -> None:
    def bad(setting: str, message: str) -> ConfigError:
        return ConfigError(f"quality setting '{setting}': {message}", setting=setting)

    if not isinstance(probe_id, str) or not probe_id:
        raise bad("probe_id", "name the probe column that identifies a probe row (join.probe_id)")
    if (
        isinstance(probe_key, str)
        or not probe_key
        or not all(isinstance(k, str) and k for k in probe_key)
    ):
        raise bad("probe_key", f"give the probe key columns as a tuple, got {probe_key!r}")
    if probe_time is not None and (not isinstance(probe_time, str) or not probe_time):
        raise bad("probe_time", "name the probe's event-time column, or pass None")
    if max_pending_age_ms is not None and (
        isinstance(max_pending_age_ms, bool) or max_pending_age_ms <= 0
    ):
        raise bad("max_pending_age_ms", f"must be > 0 (or None to skip), got {max_pending_age_ms}")
    if sample_rows < 0:
        raise bad("sample_rows", f"must be >= 0, got {sample_rows}")


# --------------------------------------------------------------------------------- summary


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    return value


def _write_summary(report: QualityReport, build: BuildMarker) -> None:
    summary = {
        "success": report.success,
        "failed_checks": [c.name for c in report.failed],
        "run": {
            "started_at": datetime.fromtimestamp(report.started_at_ms / 1000, UTC).isoformat(),
            "duration_s": round(report.duration_s, 3),
            "now_ms": report.now_ms,
            "now": format_epoch_ms(report.now_ms),
        },
        "tables": {name: {"uri": t.uri, "version": t.version} for name, t in report.tables.items()},
        "build_marker": dict(build.properties),
        "checks": [c.to_dict() for c in report.checks],
        "unmatched_rows": {
            "table": report.unmatched.uri,
            "unmatched": report.unmatched.unmatched,
            "pending": report.unmatched.pending,
            "by_reason": dict(report.unmatched.by_reason),
            "build_versions_read": list(report.unmatched.versions_read),
            "explained_at_a_later_version": report.unmatched.explained_later,
            "examples": [dict(r) for r in report.unmatched.examples],
        },
        "artifacts": {
            "data_docs": str(report.data_docs_path),
            "plot": str(report.plot_path),
            "summary": str(report.summary_path),
            "unmatched_rows": report.unmatched.uri,
        },
    }
    tmp = report.summary_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_jsonable(summary), indent=2, allow_nan=False) + "\n")
    os.replace(tmp, report.summary_path)  # a reader never sees half a summary
