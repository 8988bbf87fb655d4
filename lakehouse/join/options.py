"""Options of the temporal join, validated when constructed (before any Spark work)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lakehouse.errors import ConfigError

JoinMode = Literal["rowtime", "proctime"]
JoinType = Literal["inner", "left"]
WatermarkKind = Literal["bounded", "ascending", "none"]
LatePolicy = Literal["join", "dead-letter"]
ExpiryPolicy = Literal["release", "dead-letter"]
PendingBoundPolicy = Literal["dead-letter", "fail"]
TimeUnit = Literal["s", "ms", "us"]
#: Milliseconds per unit of an epoch number in a time column.
MS_PER_UNIT: dict[str, float] = {"s": 1000.0, "ms": 1.0, "us": 0.001}
#: Default of ``max_future_ms``: a day past the wall clock.
DEFAULT_MAX_FUTURE_MS = 86_400_000


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinOptions:
    """How a probe stream joins a build table.

    Attributes:
        build_table: the versioned build table (written by the CDC ingest).
        output_table: where joined rows are appended.
        pending_table: probe rows waiting for the watermark (overwritten every batch).
        dead_letter_table: malformed probe records, and rows the late/expiry policies reject.
        pipeline_id: application id of the Delta transactions; stable across restarts.
        probe_schema: DDL of the probe records' JSON (e.g. ``"order_id bigint, currency
            string, amount double, order_ts timestamp"``).
        probe_key: probe columns that match the build table's key columns, in key order.
        probe_time: the probe's event-time column (timestamp, or epoch ms as a number);
            required in row-time mode and by event-time watermark strategies.
        probe_id: a column identifying a probe row (used by the quality report); optional.
        build_key: the build table's key; default its ``lakehouse.primaryKey`` property.
        mode: ``rowtime`` joins each row as of its own time; ``proctime`` joins the latest
            version, and only once the build table's snapshot is complete.
        join_type: ``inner`` emits matched rows only; ``left`` emits every released row,
            with NULL build columns and ``_matched = false`` when nothing matched.
        watermark: the probe's watermark strategy: ``bounded`` (max time seen minus
            ``out_of_orderness_ms``), ``ascending`` (bounded with 0), or ``none``
            (processing time, per FLIP-326).
        out_of_orderness_ms: see ``watermark``.
        late_policy: what to do with a row that arrives with time <= the watermark already
            passed: ``join`` it (as Flink's temporal join does) or ``dead-letter`` it.
        build_idle_timeout_ms: when the build table has had no commit for this long (and its
            snapshot is complete), it stops holding back the watermark. None: never.
        pending_ttl_ms: a row pending longer than this (since it arrived) is expired:
            released unmatched or dead-lettered, by ``expiry_policy``. None: never.
        expiry_policy: see ``pending_ttl_ms``.
        build_prefix: prefix for the build table's columns in the output (needed when a
            build column has the name of a probe column).
        pending_max_rows: the most rows the pending table may hold after a batch. When more
            would stay, the oldest (see ``pending_max_age_ms`` for "old") go to the
            dead-letter table (``_error_kind = 'pending_bound_rows'``) or the batch fails, by
            ``on_pending_bound``. None: unbounded.
        pending_max_age_ms: the oldest a pending row may be, measured in the probe's own
            time: in event time, how far its time is behind the probe watermark (the probe
            stream's progress, which does not wait for the build side); when the probe
            watermark is processing time (``watermark = 'none'``), how long ago it arrived.
            Rows older go to the dead-letter table (``pending_bound_age``) or fail the
            batch. None: unbounded.
        on_pending_bound: ``dead-letter`` (move the rows over the bound to the dead-letter
            table, whence they can be replayed) or ``fail`` (stop the query with
            :class:`~lakehouse.errors.PendingBoundError` before the batch writes anything).
        probe_time_unit: the unit of an epoch number in ``probe_time`` (``s``, ``ms`` or
            ``us``), whether the column is declared a number or a timestamp: a JSON number in
            a timestamp column is never guessed (Spark would read it as seconds).
        max_future_ms: a probe row whose time is further than this past the wall clock is
            dead-lettered (``future_time``) instead of moving the probe watermark, which
            never goes back: one bad clock or unit must not release or evict everything
            after it. None: no bound.
        until_complete: the run ends the probe input (``lakehouse join --until-complete``):
            each batch is decided as if the probe stream had ended after it, as Flink ends a
            bounded source with the final watermark. A batch then also releases every
            waiting row the build side can answer: at or below the build watermark, or all
            of them when the build side is idle (``build_idle_timeout_ms``) or declared
            complete (``build_complete``); never before the snapshot marker. Each row is
            joined as of its own time, as any release is. The end belongs to the run, not
            the pipeline: the watermark recorded for the next run is the one the batch
            would have had without it, so a later run's rows are not late because of it.
        build_complete: with ``until_complete``: the build table already holds every change
            up to the probe's times (a backfill against a finished dimension), so the end
            of input releases every waiting row once the snapshot marker is set.
        allow_dead_letters: accept batches that dead-letter every probe record. Without
            it, the join's first records contradicting ``probe_schema`` (every one a
            ``schema_mismatch``) stop it before it writes anything, with the column and a
            value; the CLI warns of any batch whose records all failed and fails an
            available-now run that had one.
    """

    build_table: str
    output_table: str
    pending_table: str
    dead_letter_table: str
    pipeline_id: str
    probe_schema: str
    probe_key: tuple[str, ...]
    probe_time: str | None = None
    probe_id: str | None = None
    build_key: tuple[str, ...] = ()
    mode: JoinMode = "rowtime"
    join_type: JoinType = "inner"
    watermark: WatermarkKind = "bounded"
    out_of_orderness_ms: int = 0
    late_policy: LatePolicy = "join"
    build_idle_timeout_ms: int | None = None
    pending_ttl_ms: int | None = None
    expiry_policy: ExpiryPolicy = "release"
    build_prefix: str = ""
    pending_max_rows: int | None = None
    pending_max_age_ms: int | None = None
    on_pending_bound: PendingBoundPolicy = "dead-letter"
    probe_time_unit: TimeUnit = "ms"
    max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS
    until_complete: bool = False
    build_complete: bool = False
    allow_dead_letters: bool = False

    def __post_init__(self) -> None:
        def bad(setting: str, message: str) -> ConfigError:
            return ConfigError(f"join setting '{setting}': {message}", setting=setting)

        if self.mode not in ("rowtime", "proctime"):
            raise bad("mode", f"must be 'rowtime' or 'proctime', got {self.mode!r}")
        if self.join_type not in ("inner", "left"):
            raise bad("join_type", f"must be 'inner' or 'left', got {self.join_type!r}")
        if self.watermark not in ("bounded", "ascending", "none"):
            raise bad(
                "watermark", f"must be 'bounded', 'ascending' or 'none', got {self.watermark!r}"
            )
        if self.late_policy not in ("join", "dead-letter"):
            raise bad("late_policy", f"must be 'join' or 'dead-letter', got {self.late_policy!r}")
        if self.expiry_policy not in ("release", "dead-letter"):
            raise bad(
                "expiry_policy", f"must be 'release' or 'dead-letter', got {self.expiry_policy!r}"
            )
        if not self.probe_key:
            raise bad("probe_key", "name the probe column(s) that match the build key")
        if not self.probe_schema.strip():
            raise bad(
                "probe_schema",
                "give the probe records' schema as DDL, e.g. "
                "'id bigint, currency string, ts timestamp'",
            )
        if self.mode == "rowtime" and not self.probe_time:
            raise bad("probe_time", "row-time joins need the probe's event-time column")
        if self.watermark != "none" and not self.probe_time:
            raise bad(
                "probe_time",
                f"the '{self.watermark}' watermark needs the probe's "
                "event-time column; set probe_time or use watermark='none'",
            )
        if self.out_of_orderness_ms < 0:
            raise bad("out_of_orderness_ms", f"must be >= 0, got {self.out_of_orderness_ms}")
        if self.probe_time_unit not in MS_PER_UNIT:
            raise bad(
                "probe_time_unit",
                f"must be 's', 'ms' or 'us', got {self.probe_time_unit!r}",
            )
        if self.on_pending_bound not in ("dead-letter", "fail"):
            raise bad(
                "on_pending_bound",
                f"must be 'dead-letter' or 'fail', got {self.on_pending_bound!r}",
            )
        for name in (
            "build_idle_timeout_ms",
            "pending_ttl_ms",
            "pending_max_rows",
            "pending_max_age_ms",
            "max_future_ms",
        ):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise bad(name, f"must be > 0 (or unset to disable), got {value}")
        if self.build_key and len(self.build_key) != len(self.probe_key):
            raise bad(
                "build_key",
                f"has {len(self.build_key)} column(s) but probe_key has "
                f"{len(self.probe_key)}; they pair up in order",
            )
        if self.build_complete and not self.until_complete:
            raise bad(
                "build_complete",
                "says the build side is complete at the end of the probe input; it needs "
                "until_complete (lakehouse join --until-complete --build-complete)",
            )
        if (
            len({self.build_table, self.output_table, self.pending_table, self.dead_letter_table})
            < 4
        ):
            raise bad(
                "output_table",
                "build, output, pending and dead-letter tables must be four different locations",
            )
