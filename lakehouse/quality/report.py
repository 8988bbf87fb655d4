"""The data-quality report of a temporal join's tables, validated with Great Expectations.

A run reads the join's tables at one consistent pair of versions, validates them with the
suites in ``expectations/`` (one JSON file per concern) on Spark, and writes to a report
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

The checks (each is a suite file of the same name):

========================== =================================================================
``probe_ids_unique``       no probe id twice across output UNION ALL pending (by ``probe_id``)
``probe_rows_accounted``   none lost: arrivals = released + dead-lettered + pending, from the
                           pending table's commit metadata
``output_matched``         every output row has ``_matched = true`` (a left join's unmatched
                           rows fail, listed by probe id, key and time)
``proctime_build_version`` processing-time rows were joined at a build version >= the build
                           table's ``lakehouse.snapshot.completedVersion`` (no marker: every
                           processing-time row fails)
``pending_age``            no pending row arrived more than ``max_pending_age_ms`` before the
                           report time (skipped without ``max_pending_age_ms``)
``watermark_monotonic``    the combined watermark recorded per batch never decreases
                           (processing time ranks above every event time)
========================== =================================================================

Consistency: the pending table is pinned at its latest version, and the output table at the
newest version written by a batch at or before the pending version's batch (the join writes
output before pending), so a pipeline running during the report cannot make a released row
look duplicated.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal

from lakehouse import delta
from lakehouse.dimension import layout as L
from lakehouse.errors import ConfigError, TableNotFoundError
from lakehouse.join import layout as J
from lakehouse.quality import _ledger
from lakehouse.quality._gx import (
    DOCS_DIR,
    ExpectationOutcome,
    GxSession,
    SuiteFile,
    default_suites_dir,
)
from lakehouse.quality._gx import load_suite_file as _load_suite_file
from lakehouse.quality._ledger import Accounting, Ledger
from lakehouse.quality._plot import plot_watermarks
from lakehouse.quality.unmatched import REASON, LastBatch, Unmatched, explain_rows
from lakehouse.quality.unmatched import TABLE_NAME as UNMATCHED_TABLE
from lakehouse.time import WATERMARK_MAX, format_epoch_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from lakehouse.join.options import JoinOptions

CheckName = Literal[
    "probe_ids_unique",
    "probe_rows_accounted",
    "output_matched",
    "proctime_build_version",
    "pending_age",
    "watermark_monotonic",
]
CheckStatus = Literal["passed", "failed", "skipped"]

#: The checks, in report order, with a one-line title each.
CHECKS: Final[Mapping[CheckName, str]] = MappingProxyType(
    {
        "probe_ids_unique": "no probe id twice across output and pending",
        "probe_rows_accounted": "no probe row lost: arrived = released + dead-lettered + pending",
        "output_matched": "every output row matched a build row",
        "proctime_build_version": "processing-time rows joined at or after the snapshot",
        "pending_age": "no pending row older than max_pending_age_ms",
        "watermark_monotonic": "combined watermark never decreases",
    }
)

SUMMARY_FILE: Final = "summary.json"
PLOT_FILE: Final = "watermarks.png"

# Join lineage columns the checks read (lakehouse.join.layout).
_MATCHED = J.MATCHED
_BUILD_VERSION = J.BUILD_VERSION
_JOIN_MODE = J.JOIN_MODE
_BATCH_ID = J.BATCH_ID
_ARRIVED_AT = J.ARRIVED_AT
_ARRIVAL_BATCH = J.ARRIVAL_BATCH
#: Computed by the report: how long a pending row has waited.
_PENDING_AGE = "_pending_age_ms"
#: Computed by the report: NULL for a matched output row, else the row and why it did not.
_UNMATCHED = "_unmatched"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: the check (and its suite file's name).
        title: one line saying what it checks.
        status: ``passed``, ``failed``, or ``skipped`` (not configured for this run).
        message: the finding in one sentence, with the numbers.
        observed: the values the check saw (counts, versions, sums), JSON-friendly.
        failing_rows: a sample of the rows that failed (at most ``sample_rows`` per
            expectation), each as ``{column: value}``; empty when it passed.
        suite: the suite file validated; None when skipped.
        expectations: per expectation of the suite: ``type``, ``success`` and GX's result.
    """

    name: CheckName
    title: str
    status: CheckStatus
    message: str
    observed: Mapping[str, Any] = field(default_factory=dict)
    failing_rows: tuple[Mapping[str, Any], ...] = ()
    suite: Path | None = None
    expectations: tuple[Mapping[str, Any], ...] = ()

    @property
    def success(self) -> bool:
        """False only when the check failed (a skipped check does not fail the report)."""
        return self.status != "failed"

    def to_dict(self) -> dict[str, Any]:
        """The check as it appears in ``summary.json``."""
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "success": self.success,
            "message": self.message,
            "observed": dict(self.observed),
            "failing_rows": [dict(r) for r in self.failing_rows],
            "suite": str(self.suite) if self.suite else None,
            "expectations": [dict(e) for e in self.expectations],
        }


@dataclass(frozen=True, slots=True)
class TableVersion:
    """A table the report read and the version it read (None: the table does not exist or
    holds nothing of the validated batches)."""

    uri: str
    version: int | None


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
    spark: SparkSession,
    join: JoinOptions,
    *,
    report_dir: str | os.PathLike[str],
    max_pending_age_ms: int | None = None,
    now_ms: int | None = None,
    sample_rows: int = 20,
    suites_dir: str | os.PathLike[str] | None = None,
) -> QualityReport:
    """Validate a temporal join's output and pending tables and write the report.

    Runs on the driver with the caller's SparkSession (no session is created or changed).
    Reads the tables only; may run while the join pipeline runs (see the module docstring on
    consistency). A failing check is a result, not an exception: look at
    :attr:`QualityReport.success` (the CLI turns it into the exit code).

    Args:
        spark: the active SparkSession.
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

    Returns:
        The report; its files are written before it is returned.

    Raises:
        ConfigError: an argument is invalid, or a named column is not in the tables (checked
            before any Spark work).
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
    pinned = _pin(
        output_table=output_table,
        pending_table=pending_table,
        build_table=build_table,
        dead_letter_table=dead_letter_table,
        probe_id=probe_id,
        probe_key=probe_key,
        probe_time=probe_time,
    )

    # the two tables the checks scan are read once, at the pinned versions
    pending = delta.read(spark, pending_table, version=pinned.pending_version).persist()
    if pinned.output_version is not None:
        output = delta.read(spark, output_table, version=pinned.output_version).persist()
    else:
        output = _empty_output(spark, pinned.pending_schema, pinned.id_columns)
    try:
        docs_dir = out_dir / DOCS_DIR
        if docs_dir.exists():
            shutil.rmtree(docs_dir)  # the site shows this run only
        out_dir.mkdir(parents=True, exist_ok=True)
        last = pinned.ledger.records[-1] if pinned.ledger.records else None
        unmatched = explain_rows(
            spark,
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
        checks = _Checks(
            spark=spark,
            session=GxSession(docs_dir),
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
        pending.unpersist()
        output.unpersist()

    plot_path = plot_watermarks(
        pinned.ledger.records,
        out_dir / PLOT_FILE,
        title=(
            f"{pending_table.rstrip('/').rsplit('/', 1)[-1]} @ v{pinned.pending_version}: "
            "watermarks and pending backlog"
        ),
        source=f"pending table: {pending_table}",
        snapshot_completed_at=(
            pinned.build.properties.get(L.PROP_SNAPSHOT_COMPLETED_AT)
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


# ----------------------------------------------------------------------------- the checks


class _Checks:
    """Runs each check's suite on its asset and turns GX's outcome into a CheckResult."""

    def __init__(
        self,
        *,
        spark: SparkSession,
        session: GxSession,
        suites: Mapping[CheckName, SuiteFile],
        pinned: _Pinned,
        output: DataFrame,
        pending: DataFrame,
        sample_rows: int,
        reasons: str,
    ) -> None:
        self.spark = spark
        self.session = session
        self.suites = suites
        self.pinned = pinned
        self.output = output
        self.pending = pending
        self.sample_rows = sample_rows
        self.reasons = reasons
        # identify an output row in a failing sample: probe id, key, time, batch
        self.row_ids = [*pinned.id_columns, _BATCH_ID]

    def _run(
        self, name: CheckName, asset: str, df: DataFrame, **kw: Any
    ) -> list[ExpectationOutcome]:
        return self.session.validate(
            self.suites[name],
            asset=asset,
            df=df,
            sample_rows=self.sample_rows,
            described=self._describe(asset),
            **kw,
        )

    def _describe(self, asset: str) -> str:
        """What an asset is, for the Data Docs' "Data asset" line."""
        p = self.pinned
        tables = {
            "output": f"output table {p.output_table} @ v{p.output_version}",
            "pending": f"pending table {p.pending_table} @ v{p.pending_version}",
            "probe_ids": f"probe ids of {p.output_table} and {p.pending_table}",
            "accounting": f"per-batch counts in the commits of {p.pending_table}",
            "watermarks": f"combined watermark per batch, from the commits of {p.pending_table}",
        }
        return tables.get(asset, asset)

    def probe_ids_unique(self) -> CheckResult:
        """Exactly once, part 1: no probe id twice over output UNION ALL pending."""
        from pyspark.sql import functions as F

        probe_id = self.pinned.id_columns[0]
        ids = self.output.select(
            F.col(probe_id).alias("probe_id"),
            F.lit("output").alias("_table"),
            F.col(_BATCH_ID).cast("bigint").alias("_batch_id"),
        ).unionByName(
            self.pending.select(
                F.col(probe_id).alias("probe_id"),
                F.lit("pending").alias("_table"),
                F.col(_ARRIVAL_BATCH).cast("bigint").alias("_batch_id"),
            )
        )
        outcomes = self._run(
            "probe_ids_unique", "probe_ids", ids, index_columns=["_table", "_batch_id"]
        )
        return _unique_result(self.suites["probe_ids_unique"].path, outcomes)

    def probe_rows_accounted(self) -> CheckResult:
        """Exactly once, part 2: arrivals = released + dead-lettered + pending (metadata)."""
        p = self.pinned
        malformed = (
            _malformed_dead_letters(
                self.spark, p.dead_letter_table, p.dead_letter_version, p.ledger
            )
            if p.dead_letter_table
            else None
        )
        accounting = _ledger.account(
            p.ledger, pending_rows=self.pending.count(), malformed_by_batch=malformed
        )
        outcomes = self._run(
            "probe_rows_accounted", "accounting", _accounting_frame(self.spark, accounting)
        )
        return _accounted_result(self.suites["probe_rows_accounted"].path, outcomes, accounting)

    def _with_reason(self, df: DataFrame, state: str) -> tuple[DataFrame, list[str]]:
        """``df`` with the ``_reason`` of its unmatched/pending rows (NULL for the others),
        joined by source position (unique per probe row; the table is deduplicated on it so
        no row of ``df`` is repeated); unchanged when ``df`` has no position columns."""
        from pyspark.sql import functions as F

        from lakehouse.quality.unmatched import STATE

        if not set(J.POSITION) <= set(df.columns):
            return df, []
        why = (
            delta.read(self.spark, self.reasons)
            .filter(F.col(STATE) == F.lit(state))
            .select(*J.POSITION, REASON)
            .dropDuplicates(list(J.POSITION))
        )
        return df.join(why, list(J.POSITION), "left"), [REASON]

    def output_matched(self) -> CheckResult:
        """Every output row matched. The column validated, ``_unmatched``, is NULL for a
        matched row and otherwise names the row and the reason it did not match, so the
        Data Docs' sample of unexpected values lists the failing rows with their reasons."""
        from pyspark.sql import functions as F

        output, reason = self._with_reason(self.output, "unmatched")
        named = [
            F.concat(F.lit(f"{c}="), F.coalesce(F.col(c).cast("string"), F.lit("NULL")))
            for c in self.pinned.id_columns
        ]
        why = F.col(REASON) if reason else F.lit(None).cast("string")
        output = output.withColumn(
            _UNMATCHED,
            F.when(F.coalesce(F.col(_MATCHED), F.lit(False)), F.lit(None).cast("string")).otherwise(
                F.concat_ws(
                    " ",
                    *named,
                    F.concat(F.lit("(batch "), F.col(_BATCH_ID).cast("string"), F.lit("):")),
                    F.coalesce(why, F.lit("reason not recorded")),
                )
            ),
        )
        outcomes = self._run(
            "output_matched", "output", output, index_columns=[*self.row_ids, *reason]
        )
        late = 0
        if J.RELEASED_BY in self.output.columns:
            late = self.output.filter(F.col(J.RELEASED_BY) == F.lit(J.LATE)).count()
        return _matched_result(self.suites["output_matched"].path, outcomes, late=late)

    def proctime_build_version(self) -> CheckResult:
        """Processing-time rows joined at or after the snapshot-complete version."""
        completed = self.pinned.build.completed_version
        outcomes = self._run(
            "proctime_build_version",
            "output",
            self.output,
            # no marker: no version is complete, so every processing-time row fails
            parameters={"completed_version": WATERMARK_MAX if completed is None else completed},
            index_columns=self.row_ids,
        )
        return _proctime_result(
            self.suites["proctime_build_version"].path, outcomes, self.pinned.build
        )

    def pending_age(self, *, max_pending_age_ms: int | None, now_ms: int) -> CheckResult:
        """No pending row arrived more than ``max_pending_age_ms`` before ``now_ms``."""
        from pyspark.sql import functions as F

        if max_pending_age_ms is None:
            return CheckResult(
                name="pending_age",
                title=CHECKS["pending_age"],
                status="skipped",
                message="skipped: no max_pending_age_ms given",
            )
        aged, reason = self._with_reason(self.pending, "pending")
        aged = aged.withColumn(
            _PENDING_AGE, F.lit(now_ms).cast("bigint") - F.unix_millis(F.col(_ARRIVED_AT))
        )
        outcomes = self._run(
            "pending_age",
            "pending",
            aged,
            parameters={"max_pending_age_ms": max_pending_age_ms},
            index_columns=[*self.pinned.id_columns, _ARRIVED_AT, _ARRIVAL_BATCH, *reason],
        )
        oldest = aged.agg(F.max(_PENDING_AGE)).first()
        return _age_result(
            self.suites["pending_age"].path,
            outcomes,
            max_pending_age_ms=max_pending_age_ms,
            oldest_ms=None if oldest is None else oldest[0],
            now_ms=now_ms,
        )

    def watermark_monotonic(self) -> CheckResult:
        """The combined watermark recorded per batch never decreases."""
        outcomes = self._run(
            "watermark_monotonic",
            "watermarks",
            _watermark_frame(self.spark, self.pinned.ledger),
            index_columns=["batch_id", "version", "combined", "previous_combined"],
        )
        return _monotonic_result(
            self.suites["watermark_monotonic"].path, outcomes, self.pinned.ledger
        )


# ------------------------------------------------------------------------------ versions


@dataclass(frozen=True, slots=True)
class _Pinned:
    """The table versions a run validates, and what was read from metadata to choose them."""

    output_table: str
    output_version: int | None
    pending_table: str
    pending_version: int
    pending_schema: StructType
    ledger: Ledger
    build_table: str
    build: _BuildMarker
    dead_letter_table: str | None
    dead_letter_version: int | None
    id_columns: tuple[str, ...]  # probe id first, then key and time columns

    def tables(self) -> dict[str, TableVersion]:
        tables = {
            "output": TableVersion(self.output_table, self.output_version),
            "pending": TableVersion(self.pending_table, self.pending_version),
            "build": TableVersion(self.build_table, self.build.version),
        }
        if self.dead_letter_table:
            tables["dead_letter"] = TableVersion(self.dead_letter_table, self.dead_letter_version)
        return tables


def _pin(
    *,
    output_table: str,
    pending_table: str,
    build_table: str,
    dead_letter_table: str | None,
    probe_id: str,
    probe_key: Sequence[str],
    probe_time: str | None,
) -> _Pinned:
    """Choose the versions to validate and check the named columns (metadata only).

    Pending at its latest version, output at the newest version of a batch at or before the
    pending version's last batch (see the module docstring), build and dead-letter at their
    latest versions.
    """
    if not delta.table_exists(pending_table):
        raise TableNotFoundError(
            f"no pending table at '{pending_table}': the quality report needs the join's "
            "pending table (pending_table); check the path or run the join first",
            table_uri=pending_table,
        )
    ledger = _ledger.read_ledger(
        pending_table, output_table=output_table, dead_letter_table=dead_letter_table
    )
    pending_version = (
        ledger.version if ledger.version is not None else delta.latest_version(pending_table)
    )
    output_version = ledger.output_version
    dead_letter_version = (
        delta.latest_version(dead_letter_table)
        if dead_letter_table and delta.table_exists(dead_letter_table)
        else None
    )
    id_columns = tuple(dict.fromkeys([probe_id, *probe_key, *([probe_time] if probe_time else [])]))
    settings = {
        **({probe_time: "probe_time"} if probe_time else {}),
        **dict.fromkeys(probe_key, "probe_key"),
        probe_id: "probe_id",
    }
    pending_schema = delta.table_schema(pending_table, version=pending_version)
    _require_columns(
        "pending",
        pending_table,
        pending_schema.fieldNames(),
        {**settings, _ARRIVED_AT: "pending_table", _ARRIVAL_BATCH: "pending_table"},
    )
    if output_version is not None:
        _require_columns(
            "output",
            output_table,
            delta.table_schema(output_table, version=output_version).fieldNames(),
            {
                **settings,
                **dict.fromkeys((_MATCHED, _BUILD_VERSION, _JOIN_MODE, _BATCH_ID), "output_table"),
            },
        )
    return _Pinned(
        output_table=output_table,
        output_version=output_version,
        pending_table=pending_table,
        pending_version=pending_version,
        pending_schema=pending_schema,
        ledger=ledger,
        build_table=build_table,
        build=_build_marker(build_table),
        dead_letter_table=dead_letter_table,
        dead_letter_version=dead_letter_version,
        id_columns=id_columns,
    )


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


def _require_columns(
    table: str, uri: str, available: Sequence[str], required: Mapping[str, str]
) -> None:
    """Raise ConfigError naming the setting of the first required column that is missing.

    ``required`` maps each column to the setting that names it."""
    missing = [c for c in required if c not in available]
    if missing:
        raise ConfigError(
            f"{table} table '{uri}' has no column(s) {missing} (columns: {sorted(available)}); "
            "check probe_id, probe_key and probe_time against the join's configuration, and "
            f"that '{uri}' is the join's {table} table",
            setting=required[missing[0]],
        )


# ---------------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True)
class _BuildMarker:
    version: int | None
    complete: bool
    completed_version: int | None
    properties: Mapping[str, str]
    key: tuple[str, ...] = ()  # lakehouse.primaryKey


def _build_marker(uri: str) -> _BuildMarker:
    """The build table's snapshot marker at its latest version.

    The version no processing-time row may be older than is the one at which the snapshot
    first completed (``lakehouse.snapshot.firstCompletedVersion``): a later re-snapshot moves
    ``completedVersion`` forward, but rows joined before it were joined against a complete
    dimension, and during a re-snapshot the join stays on the last complete version. It counts
    while the marker is set or a re-snapshot runs; tables written before that property
    existed fall back to ``completedVersion`` when the marker is set."""
    if not delta.table_exists(uri):
        return _BuildMarker(None, False, None, {})
    version = delta.latest_version(uri)
    props = delta.get_properties(uri, version=version)
    marker = {k: v for k, v in props.items() if k.startswith("lakehouse.snapshot.")}
    complete = props.get(L.PROP_SNAPSHOT_COMPLETE, "false").strip().lower() == "true"
    first = props.get(L.PROP_SNAPSHOT_FIRST_COMPLETED_VERSION, "").strip()
    raw = props.get(L.PROP_SNAPSHOT_COMPLETED_VERSION, "").strip()
    # a re-snapshot clears `complete` but the join stays on the last complete version; a
    # marker taken back in any other way means no processing-time row may exist
    resnapshot = props.get(L.PROP_SNAPSHOT_STATE, "").strip() == "resnapshot"
    completed: int | None = None
    if (complete or resnapshot) and first.lstrip("-").isdigit():
        completed = int(first)
    elif complete and raw.lstrip("-").isdigit():
        completed = int(raw)
    key = tuple(k.strip() for k in props.get(L.PROP_PRIMARY_KEY, "").split(",") if k.strip())
    return _BuildMarker(version, completed is not None, completed, marker, key)


def _empty_output(
    spark: SparkSession, pending_schema: StructType, id_keys: Sequence[str]
) -> DataFrame:
    """An empty stand-in for an output table that does not exist (nothing released yet),
    with the columns the checks read."""
    from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

    fields = [pending_schema[c] for c in id_keys]
    fields += [
        StructField(_MATCHED, BooleanType(), True),
        StructField(_BUILD_VERSION, LongType(), True),
        StructField(_JOIN_MODE, StringType(), True),
        StructField(_BATCH_ID, LongType(), True),
    ]
    return spark.createDataFrame([], StructType(fields))


def _malformed_dead_letters(
    spark: SparkSession, uri: str | None, version: int | None, ledger: Ledger
) -> dict[int, int]:
    """Dead letters of the ledger's batches that never counted as arrived: rows of the
    join's pipeline(s) whose ``_error_kind`` is not one of a probe row that had arrived
    (``late``, ``expired``, or evicted by the pending bound)."""
    if uri is None or version is None or not ledger.records:
        return {}
    from pyspark.sql import functions as F

    pipelines = sorted({r.pipeline for r in ledger.records if r.pipeline})
    batches = sorted({r.batch_id for r in ledger.records})
    df = delta.read(spark, uri, version=version).filter(
        F.col("_batch_id").isin(batches)
        & ~F.col("_error_kind").isin("late", "expired", "pending_bound_age", "pending_bound_rows")
    )
    if pipelines:
        df = df.filter(F.col("_pipeline").isin(pipelines))
    return {int(r[0]): int(r[1]) for r in df.groupBy("_batch_id").count().collect()}


def _accounting_frame(spark: SparkSession, a: Accounting) -> DataFrame:
    from pyspark.sql.types import LongType, StructField, StructType

    values = {
        "arrived": a.arrived,
        "accounted": a.accounted,
        "baseline": a.baseline,
        "arrived_sum": a.arrived_sum,
        "released_sum": a.released_sum,
        "dead_lettered_sum": a.dead_lettered_sum,
        "malformed": a.malformed,
        "pending_rows": a.pending_rows,
        "pending_rows_recorded": a.pending_rows_recorded,
        "batches": a.batches,
    }
    schema = StructType([StructField(k, LongType(), True) for k in values])
    return spark.createDataFrame([tuple(values.values())], schema)


def _watermark_frame(spark: SparkSession, ledger: Ledger) -> DataFrame:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    orders = _ledger.watermark_orders(r.combined for r in ledger.records)
    rows = []
    previous = None
    for r in ledger.records:
        rows.append(
            (
                r.batch_id,
                r.version,
                str(r.combined),
                None if previous is None else str(previous),
                orders[r.combined],
                None if previous is None else orders[previous],
                str(r.probe),
                str(r.build),
            )
        )
        previous = r.combined
    schema = StructType(
        [
            StructField("batch_id", LongType(), False),
            StructField("version", LongType(), False),
            StructField("combined", StringType(), False),
            StructField("previous_combined", StringType(), True),
            StructField("combined_order", LongType(), False),
            StructField("previous_combined_order", LongType(), True),
            StructField("probe", StringType(), False),
            StructField("build", StringType(), False),
        ]
    )
    return spark.createDataFrame(rows, schema)


# --------------------------------------------------------------------------------- results


def _expectations(outcomes: Sequence[ExpectationOutcome]) -> tuple[Mapping[str, Any], ...]:
    return tuple(
        {"type": o.type, "kwargs": dict(o.kwargs), "success": o.success, "result": dict(o.result)}
        for o in outcomes
    )


def _failing_rows(outcomes: Sequence[ExpectationOutcome]) -> tuple[Mapping[str, Any], ...]:
    rows: list[Mapping[str, Any]] = []
    for o in outcomes:
        if not o.success:
            rows.extend({"expectation": o.type, **r} for r in o.unexpected_rows)
    return tuple(rows)


def _result(
    name: CheckName,
    suite: Path,
    outcomes: Sequence[ExpectationOutcome],
    *,
    message: str,
    observed: Mapping[str, Any],
) -> CheckResult:
    ok = all(o.success for o in outcomes)
    return CheckResult(
        name=name,
        title=CHECKS[name],
        status="passed" if ok else "failed",
        message=message,
        observed=observed,
        failing_rows=() if ok else _failing_rows(outcomes),
        suite=suite,
        expectations=_expectations(outcomes),
    )


def _count(o: ExpectationOutcome, key: str) -> int:
    value = o.result.get(key)
    return int(value) if value is not None else 0


def _unique_result(suite: Path, outcomes: Sequence[ExpectationOutcome]) -> CheckResult:
    not_null, unique = outcomes
    rows = _count(unique, "element_count")
    nulls = _count(not_null, "unexpected_count")
    dup = _count(unique, "unexpected_count")
    problems = []
    if dup:
        problems.append(f"{dup} row(s) share their probe id with another row")
    if nulls:
        problems.append(f"{nulls} row(s) have a NULL probe id")
    message = f"{rows} probe rows in output and pending, " + (
        "; ".join(problems) if problems else "all with distinct, non-NULL ids"
    )
    return _result(
        "probe_ids_unique",
        suite,
        outcomes,
        message=message,
        observed={"rows": rows, "duplicated_rows": dup, "null_ids": nulls},
    )


def _accounted_result(
    suite: Path, outcomes: Sequence[ExpectationOutcome], a: Accounting
) -> CheckResult:
    return _result(
        "probe_rows_accounted",
        suite,
        outcomes,
        message=a.message(),
        observed={
            "batches": a.batches,
            "baseline_pending": a.baseline,
            "arrived": a.arrived_sum,
            "released": a.released_sum,
            "dead_lettered": a.dead_lettered_sum,
            "malformed_dead_letters": a.malformed,
            "pending_rows": a.pending_rows,
            "pending_rows_recorded": a.pending_rows_recorded,
            "arrived_total": a.arrived,
            "accounted_total": a.accounted,
            "history_from_creation": a.from_creation,
        },
    )


def _matched_result(
    suite: Path, outcomes: Sequence[ExpectationOutcome], *, late: int = 0
) -> CheckResult:
    """``late``: output rows released late (``_released_by = 'late'``): the watermark had
    passed their time when they arrived; they count, and the finding says how many."""
    (in_set,) = outcomes
    rows = _count(in_set, "element_count")
    unmatched = _count(in_set, "unexpected_count")
    message = (
        f"{unmatched} of {rows} output rows did not match (_matched = false)"
        if unmatched
        else f"all {rows} output rows matched"
    )
    if late:
        message += (
            f"; {late} released late (_released_by = 'late': the watermark had passed their "
            "time when they arrived)"
        )
    return _result(
        "output_matched",
        suite,
        outcomes,
        message=message,
        observed={"rows": rows, "unmatched": unmatched, "late": late},
    )


def _proctime_result(
    suite: Path, outcomes: Sequence[ExpectationOutcome], build: _BuildMarker
) -> CheckResult:
    (between,) = outcomes
    rows = _count(between, "element_count")
    bad = _count(between, "unexpected_count")
    if build.completed_version is None:
        marker = "the build table has no snapshot-complete marker"
        message = (
            f"{marker}, and {rows} processing-time output row(s) exist"
            if rows
            else f"{marker}; no processing-time output rows"
        )
    elif bad:
        message = (
            f"{bad} of {rows} processing-time output rows were joined against a build version "
            f"older than the snapshot-complete version {build.completed_version}"
        )
    else:
        message = (
            f"{rows} processing-time output rows, all joined at build version >= "
            f"{build.completed_version} (snapshot complete)"
        )
    return _result(
        "proctime_build_version",
        suite,
        outcomes,
        message=message,
        observed={
            "proctime_rows": rows,
            "joined_before_snapshot": bad,
            "completed_version": build.completed_version,
            "build_version_read": build.version,
            "marker": dict(build.properties),
        },
    )


def _age_result(
    suite: Path,
    outcomes: Sequence[ExpectationOutcome],
    *,
    max_pending_age_ms: int,
    oldest_ms: int | None,
    now_ms: int,
) -> CheckResult:
    (between,) = outcomes
    rows = _count(between, "element_count")
    old = _count(between, "unexpected_count")
    if old:
        message = (
            f"{old} of {rows} pending rows arrived more than {max_pending_age_ms} ms before "
            f"{format_epoch_ms(now_ms)} (oldest: {oldest_ms} ms)"
        )
    elif rows:
        message = f"{rows} pending rows, the oldest {oldest_ms} ms old (limit {max_pending_age_ms})"
    else:
        message = "no pending rows"
    return _result(
        "pending_age",
        suite,
        outcomes,
        message=message,
        observed={
            "pending_rows": rows,
            "too_old": old,
            "oldest_age_ms": oldest_ms,
            "max_pending_age_ms": max_pending_age_ms,
            "now_ms": now_ms,
        },
    )


def _monotonic_result(
    suite: Path, outcomes: Sequence[ExpectationOutcome], ledger: Ledger
) -> CheckResult:
    (pair,) = outcomes
    decreases = _count(pair, "unexpected_count")
    n = len(ledger.records)
    if decreases:
        worst = ", ".join(
            f"batch {r.get('batch_id')}: {r.get('combined')} after {r.get('previous_combined')}"
            for r in pair.unexpected_rows[:3]
        )
        message = f"the combined watermark decreased {decreases} time(s) over {n} batches ({worst})"
    elif n:
        message = (
            f"combined watermark non-decreasing over {n} batch(es), from "
            f"{ledger.records[0].combined} to {ledger.records[-1].combined}"
        )
    else:
        message = "no batch recorded yet"
    return _result(
        "watermark_monotonic",
        suite,
        outcomes,
        message=message,
        observed={
            "batches": n,
            "decreases": decreases,
            "first": str(ledger.records[0].combined) if n else None,
            "last": str(ledger.records[-1].combined) if n else None,
        },
    )


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


def _write_summary(report: QualityReport, build: _BuildMarker) -> None:
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
