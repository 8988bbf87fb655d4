"""Why a probe row did not match, or is still pending: the decisions, in pure Python.

The quality report (:mod:`lakehouse.quality.unmatched`) hands every unmatched output row the
build table's changes of its key *as the join saw them* (the build version it was joined at),
and every pending row the watermarks of the join's last batch; these functions name the
reason. They follow the join's own rules, so a reason is never a guess:

* **as of a time** (row time, and the processing-time join's "latest" when ``time_us`` is
  None): the version of the key with the greatest ``(start, seq)`` at or before the time; a
  delete ends it, and so does a truncate ordered after it (``tests/reference.py: as_of``).
  An unmatched row therefore has exactly one of the reasons ``no_key``,
  ``key_never_in_dimension``, ``before_first_version``, ``deleted`` and ``truncated`` — or
  ``matches_at_its_version``, which would be a defect of the join (the build version it was
  joined at holds a live version of its key at its time) and is reported as such;
* **release** (:func:`lakehouse.join.release.covers`): nothing is released before the
  snapshot marker; a row of event time ``t`` is released once the combined watermark covers
  ``t``, and the combined watermark is held back by the channel that is behind.

Times are epoch microseconds for build changes (the resolution of ``_event_time``, which the
join compares at) and epoch milliseconds for probe rows, as the tables hold them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from lakehouse.time import WATERMARK_MAX, WATERMARK_MIN, Watermark, format_epoch_ms

Reason = Literal[
    "no_key",
    "key_never_in_dimension",
    "before_first_version",
    "deleted",
    "truncated",
    "matches_at_its_version",
    "snapshot_incomplete",
    "build_watermark_behind",
    "probe_watermark_behind",
    "next_batch",
]

#: Every reason, with what it means to the person reading the report.
REASONS: Final[Mapping[Reason, str]] = MappingProxyType(
    {
        "no_key": "a probe key column is NULL: it matches no build row",
        "key_never_in_dimension": "the build table held no version of the key",
        "before_first_version": "the row is older than the key's first version",
        "deleted": "the key was deleted at the row's time",
        "truncated": "the build table was truncated before the row's time",
        "matches_at_its_version": "DEFECT: the build version it was joined at matches it",
        "snapshot_incomplete": "pending: the build table's snapshot is not complete",
        "build_watermark_behind": "pending: the build watermark is behind the row's time",
        "probe_watermark_behind": "pending: the probe watermark is behind the row's time",
        "next_batch": "pending: the watermark has passed it; the next batch releases it",
    }
)

#: Reasons of rows that are still pending (the others are of unmatched output rows).
PENDING_REASONS: Final = frozenset(
    {"snapshot_incomplete", "build_watermark_behind", "probe_watermark_behind", "next_batch"}
)


@dataclass(frozen=True, slots=True)
class Change:
    """One build table row: a change of the key (or a truncate of the table).

    Attributes:
        time_us: ``_event_time``, epoch microseconds (the start of the version).
        seq: ``_seq``; orders changes with the same start.
        op: ``_op``: ``r``, ``c``, ``u``, ``d`` or ``t``.
        position: where the change came from (``topic/partition@offset``), for the reader.
    """

    time_us: int
    seq: str
    op: str
    position: str | None = None


@dataclass(frozen=True, slots=True)
class Explanation:
    """A reason and one sentence with its numbers."""

    reason: Reason
    detail: str


def _at(time_us: int) -> str:
    return format_epoch_ms(time_us // 1000)


def _change(c: Change) -> str:
    return f"{_at(c.time_us)}" + (f" ({c.position})" if c.position else "")


def explain_unmatched(
    *,
    time_us: int | None,
    key_is_null: bool,
    changes: Sequence[Change],
    truncates: Sequence[Change] = (),
    build_version: int | None,
) -> Explanation:
    """Why a row did not match the build table at ``build_version``.

    Args:
        time_us: the row's time in epoch µs (row time), or None for the latest version
            (processing time).
        key_is_null: a probe key column of the row is NULL.
        changes: the key's build rows visible at ``build_version`` (truncates excluded).
        truncates: the table's truncates visible at ``build_version``.
        build_version: the build table version the changes were read at (named in the
            detail); None when there is no build table.

    >>> d = Change(3_000_000, "2", "d", "cdc/0@7")
    >>> explain_unmatched(time_us=5_000_000, key_is_null=False, build_version=4,
    ...     changes=[Change(1_000_000, "1", "r"), d]).reason
    'deleted'
    >>> import textwrap
    >>> print(textwrap.fill(explain_unmatched(time_us=500_000, key_is_null=False,
    ...     build_version=4, changes=[Change(1_000_000, "1", "r")]).detail, 80))
    the row's time 1970-01-01T00:00:00.500Z is before the key's first version, which
    starts at 1970-01-01T00:00:01.000Z at build version 4
    """
    where = "(no build table)" if build_version is None else f"at build version {build_version}"
    if key_is_null:
        return Explanation("no_key", "a probe key column is NULL; NULL matches no build key")
    if not changes:
        return Explanation(
            "key_never_in_dimension", f"no version of the key in the build table {where}"
        )
    visible = [c for c in changes if time_us is None or c.time_us <= time_us]
    if not visible:
        first = min(changes, key=lambda c: (c.time_us, c.seq))
        assert time_us is not None
        return Explanation(
            "before_first_version",
            f"the row's time {_at(time_us)} is before the key's first version, which starts "
            f"at {_change(first)} {where}",
        )
    best = max(visible, key=lambda c: (c.time_us, c.seq))
    after_best = [t for t in truncates if (t.time_us, t.seq) > (best.time_us, best.seq)]
    ending = [t for t in after_best if time_us is None or t.time_us <= time_us]
    if ending:
        first_end = min(ending, key=lambda c: (c.time_us, c.seq))
        return Explanation(
            "truncated",
            f"the table was truncated at {_change(first_end)}, after the key's version of "
            f"{_at(best.time_us)} {where}",
        )
    if best.op == "d":
        return Explanation(
            "deleted",
            f"the key was deleted at {_change(best)}"
            + (f", before the row's time {_at(time_us)}" if time_us is not None else "")
            + f" {where}",
        )
    return Explanation(
        "matches_at_its_version",
        f"the key's version of {_change(best)} is live {where}: the join should have matched "
        "this row; please report it with the tables",
    )


def _watermark(w: Watermark) -> str:
    if w.use_processing_time:
        return "processing time"
    if w.timestamp == WATERMARK_MIN:
        return "none yet"
    if w.timestamp == WATERMARK_MAX:
        return "end of input"
    return format_epoch_ms(w.timestamp)


def _covers(w: Watermark, time_ms: int) -> bool:
    """The rule of :func:`lakehouse.join.release.covers`, for one value."""
    if w.use_processing_time:
        return True
    return w.timestamp != WATERMARK_MIN and time_ms <= w.timestamp


def explain_pending(
    *,
    time_ms: int | None,
    marker_complete: bool,
    combined: Watermark,
    probe: Watermark,
    build: Watermark,
) -> Explanation:
    """Why a row is still pending after the join's last batch.

    Args:
        time_ms: the row's event time (``_t_ms``), or None (a processing-time join without
            ``probe_time``).
        marker_complete: the build table's snapshot marker is set (or a re-snapshot keeps the
            last complete version readable).
        combined: the combined watermark of the last batch (the one that released).
        probe: the probe channel's watermark of the last batch.
        build: the build channel's watermark of the last batch.

    >>> from lakehouse.time import Watermark
    >>> explain_pending(time_ms=5_000, marker_complete=True, combined=Watermark(2_000),
    ...     probe=Watermark(9_000), build=Watermark(2_000)).reason
    'build_watermark_behind'
    """
    if not marker_complete:
        return Explanation(
            "snapshot_incomplete",
            "the build table's snapshot is still loading (no lakehouse.snapshot.complete "
            "marker): no row is joined before it is complete",
        )
    if time_ms is None or _covers(combined, time_ms):
        return Explanation(
            "next_batch",
            f"the combined watermark ({_watermark(combined)}) has passed it since the last "
            "batch; the next batch releases it",
        )
    at = format_epoch_ms(time_ms)
    if not _covers(build, time_ms):
        return Explanation(
            "build_watermark_behind",
            f"its time {at} is after the build watermark ({_watermark(build)}): waiting for "
            "the dimension's changes up to that time",
        )
    return Explanation(
        "probe_watermark_behind",
        f"its time {at} is after the probe watermark ({_watermark(probe)}): waiting for later "
        "probe rows, or the end of the input (lakehouse join --until-complete)",
    )
