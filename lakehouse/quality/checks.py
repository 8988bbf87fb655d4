"""The checks of the quality report and how each outcome becomes a :class:`CheckResult`.

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

from lakehouse.join.layout import ARRIVAL_BATCH, ARRIVED_AT, BATCH_ID
from lakehouse.quality import _ledger
from lakehouse.quality._gx import (
    ExpectationOutcome,
    GxSession,
    SuiteFile,
)
from lakehouse.quality._ledger import Accounting, Ledger
from lakehouse.quality.frames import Frames
from lakehouse.quality.pin import (
    BuildMarker,
    Pinned,
    accounting_rows,
    watermark_rows,
)
from lakehouse.time import WATERMARK_MAX, format_epoch_ms

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


# ----------------------------------------------------------------------------- the checks


class Checks:
    """Runs each check's suite on its asset and turns GX's outcome into a CheckResult.

    ``output`` and ``pending`` are the two tables at the pinned versions, as frames of
    ``frames``' engine; ``reasons`` is the unmatched-rows table written for this run."""

    def __init__(
        self,
        *,
        frames: Frames,
        session: GxSession,
        suites: Mapping[CheckName, SuiteFile],
        pinned: Pinned,
        output: Any,
        pending: Any,
        sample_rows: int,
        reasons: str,
    ) -> None:
        self.frames = frames
        self.session = session
        self.suites = suites
        self.pinned = pinned
        self.output = output
        self.pending = pending
        self.sample_rows = sample_rows
        self.reasons = reasons
        # identify an output row in a failing sample: probe id, key, time, batch
        self.row_ids = [*pinned.id_columns, BATCH_ID]

    def _run(self, name: CheckName, asset: str, df: Any, **kw: Any) -> list[ExpectationOutcome]:
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
        ids = self.frames.probe_ids(self.output, self.pending, self.pinned.id_columns[0])
        outcomes = self._run(
            "probe_ids_unique", "probe_ids", ids, index_columns=["_table", "_batch_id"]
        )
        return _unique_result(self.suites["probe_ids_unique"].path, outcomes)

    def probe_rows_accounted(self) -> CheckResult:
        """Exactly once, part 2: arrivals = released + dead-lettered + pending (metadata)."""
        p = self.pinned
        malformed: dict[int, int] | None = None
        if p.dead_letter_table:
            malformed = (
                self.frames.malformed_dead_letters(
                    p.dead_letter_table, p.dead_letter_version, p.ledger
                )
                if p.dead_letter_version is not None and p.ledger.records
                else {}
            )
        accounting = _ledger.account(
            p.ledger, pending_rows=self.frames.count(self.pending), malformed_by_batch=malformed
        )
        outcomes = self._run(
            "probe_rows_accounted", "accounting", self.frames.rows(*accounting_rows(accounting))
        )
        return _accounted_result(self.suites["probe_rows_accounted"].path, outcomes, accounting)

    def output_matched(self) -> CheckResult:
        """Every output row matched. The column validated, ``_unmatched``, is NULL for a
        matched row and otherwise names the row and the reason it did not match, so the
        Data Docs' sample of unexpected values lists the failing rows with their reasons."""
        output, reason = self.frames.with_reason(self.output, self.reasons, "unmatched")
        output = self.frames.with_unmatched(output, self.pinned.id_columns, bool(reason))
        outcomes = self._run(
            "output_matched", "output", output, index_columns=[*self.row_ids, *reason]
        )
        late = self.frames.released_late(self.output)
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
        if max_pending_age_ms is None:
            return CheckResult(
                name="pending_age",
                title=CHECKS["pending_age"],
                status="skipped",
                message="skipped: no max_pending_age_ms given",
            )
        aged, reason = self.frames.with_reason(self.pending, self.reasons, "pending")
        aged, oldest = self.frames.with_pending_age(aged, now_ms)
        outcomes = self._run(
            "pending_age",
            "pending",
            aged,
            parameters={"max_pending_age_ms": max_pending_age_ms},
            index_columns=[*self.pinned.id_columns, ARRIVED_AT, ARRIVAL_BATCH, *reason],
        )
        return _age_result(
            self.suites["pending_age"].path,
            outcomes,
            max_pending_age_ms=max_pending_age_ms,
            oldest_ms=oldest,
            now_ms=now_ms,
        )

    def watermark_monotonic(self) -> CheckResult:
        """The combined watermark recorded per batch never decreases."""
        outcomes = self._run(
            "watermark_monotonic",
            "watermarks",
            self.frames.rows(*watermark_rows(self.pinned.ledger)),
            index_columns=["batch_id", "version", "combined", "previous_combined"],
        )
        return _monotonic_result(
            self.suites["watermark_monotonic"].path, outcomes, self.pinned.ledger
        )


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
    suite: Path, outcomes: Sequence[ExpectationOutcome], build: BuildMarker
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
