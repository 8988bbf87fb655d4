"""The join's decisions, in pure code: plain values in, a plan out. No Spark, no I/O.

A micro-batch of the temporal join (:mod:`lakehouse.join.operator`) reads its tables once,
then asks this module three questions:

1. **Where does the join stand?** :func:`recover` finds, among the recent commits of the
   join's tables, the state after the newest batch before this one (:class:`JoinState`) and,
   for a replayed batch, the plan its first attempt recorded.
2. **What does this batch do?** :func:`decide` combines the probe watermark (from the
   strategy and the largest probe time seen) with the build channel's in a valve restored
   from the last combined watermark: the :class:`ReleasePlan`.
3. **How much work is it?** :func:`releases_everything` says when a batch provably releases
   every row it holds (the processing-time fast path: no pass over the rows to count them);
   :func:`idle` says when a batch has nothing to write at all.
4. **What do its commits record?** Once the rows are staged and counted (:class:`BatchCounts`),
   :func:`outcome` says what each write records (the state after the batch, the accounting,
   the pending-bound alert) or refuses the batch before any write.

Worked example (row time, bounded out-of-orderness 5 ms): the join has seen probe times up
to 100, the build watermark is 90.

>>> from lakehouse.join.build_channel import BuildChannelState
>>> from lakehouse.join.options import JoinOptions
>>> options = JoinOptions(build_table="b", output_table="o", pending_table="p",
...     dead_letter_table="d", pipeline_id="j", probe_schema="k string, t bigint",
...     probe_key=("k",), probe_time="t", out_of_orderness_ms=5)
>>> build = BuildChannelState(version=3, snapshot_complete=True, completed_version=1,
...     event_watermark_ms=90, last_commit_ms=0, key_columns=("k",))
>>> plan = decide(options, batch_id=7, now_ms=1_000, state=JoinState(probe_max_ts_ms=100),
...     batch_max_ts_ms=120, build=build)
>>> plan.probe.timestamp, plan.build.timestamp, plan.combined.timestamp
(114, 90, 90)

The probe watermark moved to 120 - 5 - 1 = 114 (Flink's bounded out-of-orderness), the build
side holds the combined watermark at 90: rows with ``t <= 90`` are released, as of their own
time, joined with build version 3. Before the snapshot marker the build channel is MIN and
nothing is released, in either mode:

>>> from dataclasses import replace
>>> decide(options, batch_id=7, now_ms=1_000, state=JoinState(), batch_max_ts_ms=120,
...     build=replace(build, snapshot_complete=False)).combined == Watermark.MIN
True
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakehouse.errors import PendingBoundError, SchemaMismatchError
from lakehouse.join.build_channel import BuildChannelState
from lakehouse.join.layout import (
    META_ARRIVED,
    META_BATCH_ID,
    META_DEAD_LETTERED,
    META_EVICTED,
    META_PENDING_BOUND_ALERT,
    META_PENDING_ROWS,
    META_PLAN,
    META_RELEASED,
    META_STATE,
)
from lakehouse.join.options import JoinOptions
from lakehouse.time import (
    WATERMARK_MAX,
    CombinedWatermark,
    ManualClock,
    RecordingWatermarkOutput,
    Watermark,
    WatermarkStatus,
    WatermarkStrategy,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinState:
    """Where a join stands after a batch; recorded with each of its commits.

    Attributes:
        batch_id: the batch it is the state after (None: no batch yet).
        combined: the combined watermark (never decreases).
        probe_max_ts_ms: the largest probe time seen (None: none yet).
        build_version: the build version the batch pinned.
        pending_rows: rows in the pending table after the batch.
        evicted_total: rows evicted by the pending bound over the join's life.
    """

    batch_id: int | None = None
    combined: Watermark = Watermark.MIN
    probe_max_ts_ms: int | None = None
    build_version: int | None = None
    pending_rows: int = 0
    evicted_total: int = 0

    def to_json(self) -> str:
        """Serialise for commit metadata.

        >>> print(JoinState(batch_id=2, pending_rows=3).to_json())  # doctest: +ELLIPSIS
        {"batchId": 2, "combined": {...}, "probeMaxTs": null, "buildVersion": null, \
"pendingRows": 3, "evictedTotal": 0}
        """
        return json.dumps(
            {
                "batchId": self.batch_id,
                "combined": self.combined.to_dict(),
                "probeMaxTs": self.probe_max_ts_ms,
                "buildVersion": self.build_version,
                "pendingRows": self.pending_rows,
                "evictedTotal": self.evicted_total,
            }
        )

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str]) -> JoinState | None:
        """The state a commit recorded (None when it recorded none). Reads the state of
        tables written before the state carried ``batchId`` and ``pendingRows`` too (they
        were separate keys of the pending table's commits).

        >>> state = JoinState(batch_id=4, probe_max_ts_ms=7)
        >>> JoinState.from_metadata({"lakehouse.state": state.to_json()}) == state
        True
        """
        text = metadata.get(META_STATE)
        if not text:
            return None
        d = json.loads(text)
        batch = d.get("batchId", metadata.get(META_BATCH_ID))
        pending = d.get("pendingRows", metadata.get(META_PENDING_ROWS, 0))
        return cls(
            batch_id=None if batch is None else int(batch),
            combined=Watermark.from_dict(d["combined"]),
            probe_max_ts_ms=d.get("probeMaxTs"),
            build_version=d.get("buildVersion"),
            pending_rows=int(pending),
            evicted_total=int(d.get("evictedTotal", 0)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleasePlan:
    """The decisions of one micro-batch; recorded so that a replay makes the same ones.

    Attributes:
        batch_id: the micro-batch.
        build_version: the pinned build table version (None: no build table yet).
        combined: the combined watermark that decides the release.
        previous: the combined watermark before this batch (late rows are at or below it).
        probe: the probe channel's watermark.
        build: the build channel's watermark.
        build_status: ACTIVE or IDLE.
        probe_max_ts_ms: the largest probe time seen up to and including this batch.
        decided_at_ms: the decision time (arrival time of new rows, TTL reference).
        pending_max_rows: the pending bound in rows this batch applies (None: unbounded).
        pending_max_age_ms: the pending bound in age this batch applies (None: unbounded);
            age is measured against the probe watermark, or ``decided_at_ms`` when that is
            processing time (:class:`~lakehouse.join.JoinOptions`).
        final: an end-of-input batch (``JoinOptions.until_complete``): the watermark that
            releases its rows, the probe side having ended (None: not such a batch, or one
            the end changes nothing for). ``combined`` stays what the next batch continues
            from.
    """

    batch_id: int
    build_version: int | None
    combined: Watermark
    previous: Watermark
    probe: Watermark
    build: Watermark
    build_status: WatermarkStatus
    probe_max_ts_ms: int | None
    decided_at_ms: int
    pending_max_rows: int | None = None
    pending_max_age_ms: int | None = None
    final: Watermark | None = None

    @property
    def releasing(self) -> Watermark:
        """The watermark that releases this batch's rows: ``final`` when set."""
        return self.final if self.final is not None else self.combined

    def to_json(self) -> str:
        """Serialise for commit metadata."""
        return json.dumps(
            {
                "batchId": self.batch_id,
                "buildVersion": self.build_version,
                "combined": self.combined.to_dict(),
                "previous": self.previous.to_dict(),
                "probe": self.probe.to_dict(),
                "build": self.build.to_dict(),
                "buildStatus": self.build_status.name,
                "probeMaxTs": self.probe_max_ts_ms,
                "decidedAt": self.decided_at_ms,
                "pendingBound": {
                    "maxRows": self.pending_max_rows,
                    "maxAgeMs": self.pending_max_age_ms,
                },
                "final": None if self.final is None else self.final.to_dict(),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> ReleasePlan:
        """Parse :meth:`to_json` output."""
        d = json.loads(text)
        bound = d.get("pendingBound") or {}  # absent in plans written before the bound
        return cls(
            batch_id=int(d["batchId"]),
            build_version=d["buildVersion"],
            combined=Watermark.from_dict(d["combined"]),
            previous=Watermark.from_dict(d["previous"]),
            probe=Watermark.from_dict(d["probe"]),
            build=Watermark.from_dict(d["build"]),
            build_status=WatermarkStatus[d["buildStatus"]],
            probe_max_ts_ms=d["probeMaxTs"],
            decided_at_ms=int(d["decidedAt"]),
            pending_max_rows=bound.get("maxRows"),
            pending_max_age_ms=bound.get("maxAgeMs"),
            final=None if d.get("final") is None else Watermark.from_dict(d["final"]),
        )

    def after(self, *, pending_rows: int, evicted: int, before: JoinState) -> JoinState:
        """The state after this batch, given what it kept and evicted."""
        return JoinState(
            batch_id=self.batch_id,
            combined=self.combined,
            probe_max_ts_ms=self.probe_max_ts_ms,
            build_version=self.build_version,
            pending_rows=pending_rows,
            evicted_total=before.evicted_total + evicted,
        )


# ---------------------------------------------------------------------------------- deciding


def probe_strategy(options: JoinOptions) -> WatermarkStrategy[int]:
    """The probe's :class:`~lakehouse.time.WatermarkStrategy` (events are epoch ms)."""
    if options.watermark == "none":
        return WatermarkStrategy.no_watermarks()
    if options.watermark == "ascending":
        return WatermarkStrategy.for_monotonous_timestamps()
    return WatermarkStrategy.for_bounded_out_of_orderness(options.out_of_orderness_ms)


def needs_batch_max(options: JoinOptions) -> bool:
    """Whether the plan depends on the batch's largest probe time (event-time strategies);
    a processing-time probe is decided before any row is looked at."""
    return options.watermark != "none"


def probe_watermark(options: JoinOptions, probe_max_ts_ms: int | None, now_ms: int) -> Watermark:
    """Run the strategy's generator over the largest probe time seen so far.

    The generator sees one event per batch — the largest time up to and including the
    batch (kept in the join's state across restarts) — which is exact for the strategies the
    join offers: bounded out-of-orderness and ascending watermarks depend only on the
    maximum, and processing time on nothing.

    >>> from lakehouse.join.options import JoinOptions
    >>> o = JoinOptions(build_table="b", output_table="o", pending_table="p", dead_letter_table="d",
    ...     pipeline_id="j", probe_schema="k string, t bigint", probe_key=("k",),
    ...     probe_time="t", watermark="ascending")
    >>> probe_watermark(o, 50, 0).timestamp, probe_watermark(o, None, 0) == Watermark.MIN
    (49, True)
    """
    clock = ManualClock(now_ms)
    output = RecordingWatermarkOutput(clock=clock)
    generator = probe_strategy(options).create_watermark_generator(clock=clock)
    if probe_max_ts_ms is not None:
        generator.on_event(probe_max_ts_ms, probe_max_ts_ms, output)
    generator.on_periodic_emit(output)
    return output.current_watermark


def decide(
    options: JoinOptions,
    *,
    batch_id: int,
    now_ms: int,
    state: JoinState,
    batch_max_ts_ms: int | None,
    build: BuildChannelState,
) -> ReleasePlan:
    """The plan of a batch decided afresh (module docstring)."""
    probe_max = state.probe_max_ts_ms
    if batch_max_ts_ms is not None:
        probe_max = batch_max_ts_ms if probe_max is None else max(probe_max, batch_max_ts_ms)
    probe_wm = probe_watermark(options, probe_max, now_ms)
    build_wm = build.watermark(processing_time=options.mode == "proctime")
    build_status = build.status(now_ms=now_ms, idle_timeout_ms=options.build_idle_timeout_ms)
    combined = _combine(state.combined, probe_wm, build_wm, build_status, now_ms)
    return ReleasePlan(
        batch_id=batch_id,
        build_version=build.version,
        combined=combined,
        previous=state.combined,
        probe=probe_wm,
        build=build_wm,
        build_status=build_status,
        probe_max_ts_ms=probe_max,
        decided_at_ms=now_ms,
        pending_max_rows=options.pending_max_rows,
        pending_max_age_ms=options.pending_max_age_ms,
        final=final_watermark(options, combined, build, build_wm, build_status, now_ms),
    )


def final_watermark(
    options: JoinOptions,
    combined: Watermark,
    build: BuildChannelState,
    build_wm: Watermark,
    build_status: WatermarkStatus,
    now_ms: int,
) -> Watermark | None:
    """The end-of-input watermark of a batch (``ReleasePlan.final``), or None.

    Flink ends a bounded source with ``Watermark(MAX)``; the valve then holds only at the
    build channel: its watermark, nothing while it is idle, ``MAX`` when the options declare
    it complete, and still ``MIN`` before the snapshot marker (which nothing overrides).
    None when the run does not end its input, when the combined watermark is processing
    time already (it releases everything), or when the end would release nothing more.

    >>> from lakehouse.join.build_channel import BuildChannelState
    >>> from lakehouse.join.options import JoinOptions
    >>> o = JoinOptions(build_table="b", output_table="o", pending_table="p", dead_letter_table="d",
    ...     pipeline_id="j", probe_schema="k string, t bigint", probe_key=("k",),
    ...     probe_time="t", until_complete=True)
    >>> b = BuildChannelState(version=3, snapshot_complete=True, completed_version=1,
    ...     event_watermark_ms=90, last_commit_ms=0, key_columns=("k",))
    >>> active = WatermarkStatus.ACTIVE
    >>> str(final_watermark(o, Watermark(40), b, Watermark(90), active, 0))
    '1970-01-01T00:00:00.090Z'
    >>> final_watermark(o, Watermark(90), b, Watermark(90), active, 0) is None
    True
    """
    if not options.until_complete or combined.use_processing_time:
        return None
    if options.build_complete and build.snapshot_complete:
        build_wm = Watermark(WATERMARK_MAX)
    final = _combine(combined, Watermark(WATERMARK_MAX), build_wm, build_status, now_ms)
    return None if final == combined else final


def _combine(
    initial: Watermark,
    probe: Watermark,
    build: Watermark,
    build_status: WatermarkStatus,
    now_ms: int,
) -> Watermark:
    """The valve's output over the probe and build channels, starting from ``initial`` (it
    never goes below it); an idle build channel is left out."""
    valve = CombinedWatermark(clock=ManualClock(now_ms), initial_output=initial)
    valve.input_watermark("probe", probe)
    valve.input_watermark("build", build)
    if build_status is WatermarkStatus.IDLE:
        valve.input_status("build", WatermarkStatus.IDLE)
    return valve.current()


def late_rule_applies(options: JoinOptions, plan: ReleasePlan) -> bool:
    """Whether new rows at or below the previous watermark are dead-lettered as late."""
    return options.late_policy == "dead-letter" and not plan.previous.use_processing_time


def releases_everything(options: JoinOptions, plan: ReleasePlan, state: JoinState) -> bool:
    """Whether the batch provably releases every row it holds: processing time with a
    joinable build (the marker is set), nothing pending, and no late rule that could catch a
    new row. Then no row is late, expired, evicted or kept, and the batch needs no pass over
    its rows before writing them.

    >>> from lakehouse.time import Watermark as W, WatermarkStatus as S
    >>> from lakehouse.join.options import JoinOptions
    >>> o = JoinOptions(build_table="b", output_table="o", pending_table="p", dead_letter_table="d",
    ...     pipeline_id="j", probe_schema="k string", probe_key=("k",), mode="proctime",
    ...     watermark="none")
    >>> pt = W.PROCESSING_TIME
    >>> plan = ReleasePlan(batch_id=1, build_version=2, combined=pt, previous=pt, probe=pt,
    ...     build=pt, build_status=S.ACTIVE, probe_max_ts_ms=None, decided_at_ms=0)
    >>> releases_everything(o, plan, JoinState()), releases_everything(o, plan,
    ...     JoinState(pending_rows=1))
    (True, False)
    """
    return (
        plan.combined.use_processing_time
        and plan.build_version is not None
        and state.pending_rows == 0
        and not late_rule_applies(options, plan)
    )


def idle(
    *, arrived: int, malformed: int, state: JoinState, plan: ReleasePlan, options: JoinOptions
) -> bool:
    """Whether a batch would write nothing new: no row arrived, and either nothing is
    pending or nothing that could release, expire or evict a waiting row changed since the
    last batch (the combined watermark and the pinned build version are the same, no TTL or
    arrival-time age bound ticks with the clock, the row bound is not exceeded). Such a batch
    commits nothing; a replay of it decides afresh, which is the same decision.
    """
    if arrived or malformed:
        return False
    if state.pending_rows == 0:
        return True
    if plan.final is not None:
        return False  # the end of input may release waiting rows
    if options.pending_max_rows is not None and state.pending_rows > options.pending_max_rows:
        return False  # the bound was lowered since the last batch: apply it now
    if options.pending_max_age_ms is not None and plan.probe.use_processing_time:
        return False  # arrival-time age grows with the clock, like the TTL
    return (
        options.pending_ttl_ms is None
        and state.batch_id is not None
        and plan.combined == state.combined
        and plan.build_version == state.build_version
    )


def changes_nothing(counts: BatchCounts, *, arrived: int, malformed: int) -> bool:
    """Whether a counted batch would leave every table as it is: no row arrived, none was
    malformed, and every waiting row stays pending (a TTL that has not run out, a watermark
    that moved short of any row). It then commits nothing, so a trigger that changes
    nothing costs no table version; a replay of it finds nothing recorded and decides
    afresh, which is safe because nothing of the first attempt is visible.

    >>> changes_nothing(BatchCounts(total=3), arrived=0, malformed=0)
    True
    >>> changes_nothing(BatchCounts(total=3, expired=1), arrived=0, malformed=0)
    False
    """
    return not arrived and not malformed and counts.pending == counts.total


# ---------------------------------------------------------------------------------- recovery


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    """What the join's recent commits say before batch ``batch_id`` runs.

    Attributes:
        state: the state after the newest recorded batch before ``batch_id``.
        plan: the plan recorded for ``batch_id`` by an earlier attempt (None: none).
        recorded_in: the tables (URIs) that already record ``batch_id``.
    """

    state: JoinState
    plan: ReleasePlan | None
    recorded_in: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True, kw_only=True)
class TableCommits:
    """The recent commits of one of the join's tables that its pipeline made, newest first,
    as ``(version, metadata)``; ``complete`` says the list reaches back to the pipeline's
    first commit there (or the table holds none of its commits)."""

    uri: str
    commits: tuple[tuple[int, Mapping[str, str]], ...]
    complete: bool


def recover(tables: Iterable[TableCommits], *, batch_id: int) -> Recovery:
    """The state before ``batch_id`` and its recorded plan, from the join's tables.

    Every commit of the join carries the batch id, the plan and the state after the batch,
    so the newest commit of a batch older than ``batch_id`` in any table gives the state, and
    any commit of ``batch_id`` itself gives the plan a replay must reuse.

    >>> s = JoinState(batch_id=4, pending_rows=2).to_json()
    >>> out = TableCommits(uri="o", complete=False, commits=(
    ...     (9, {"lakehouse.batchId": "5", "lakehouse.state": JoinState(batch_id=5).to_json()}),
    ...     (8, {"lakehouse.batchId": "4", "lakehouse.state": s})))
    >>> recover([out], batch_id=6).state.batch_id, recover([out], batch_id=5).state.batch_id
    (5, 4)

    Raises:
        SchemaMismatchError: a table holds commits of the pipeline but none of them, within
            what was read, has a state from before ``batch_id``: the state cannot be found.
    """
    best: JoinState | None = None
    plan: ReleasePlan | None = None
    recorded: list[str] = []
    lost: list[TableCommits] = []
    for table in tables:
        found = False
        for _version, meta in table.commits:
            batch = _int(meta.get(META_BATCH_ID))
            if batch is None:
                continue
            if batch == batch_id:
                if table.uri not in recorded:
                    recorded.append(table.uri)
                if plan is None and meta.get(META_PLAN):
                    plan = ReleasePlan.from_json(meta[META_PLAN])
                continue
            if batch > batch_id:
                continue  # a later batch than Spark replays: Spark decides what runs
            state = JoinState.from_metadata(meta)
            if state is None:
                continue  # dead letters and outputs of older versions carry no state
            found = True
            if best is None or (state.batch_id or -1) > (best.batch_id or -1):
                best = state
            break
        if not found and table.commits and not table.complete:
            lost.append(table)
    if best is None and lost:
        table = lost[0]
        newest = table.commits[0][0]
        raise SchemaMismatchError(
            f"table '{table.uri}' holds commits of this join up to version {newest}, but none "
            f"within the {len(table.commits)} read records the state before batch {batch_id}; "
            "the table was changed by something else (many commits since the join's last "
            "batch). Restore it, or start the join over with a new pipeline_id",
            table_uri=table.uri,
        )
    return Recovery(state=best or JoinState(), plan=plan, recorded_in=tuple(recorded))


def _int(value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(json.loads(value)) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        return None


# ------------------------------------------------------------------------------------ counts


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchCounts:
    """How the candidate rows of a batch (pending plus new) split.

    Attributes:
        total: candidate rows.
        release: rows the watermark releases.
        late: new rows dead-lettered as late.
        expired: pending rows past their TTL.
        evicted_age / evicted_rows: waiting rows evicted by the pending bound's age / rows.
    """

    total: int
    release: int = 0
    late: int = 0
    expired: int = 0
    evicted_age: int = 0
    evicted_rows: int = 0

    @property
    def evicted(self) -> int:
        return self.evicted_age + self.evicted_rows

    @property
    def pending(self) -> int:
        """Rows that stay pending after the batch."""
        return self.total - self.release - self.late - self.expired - self.evicted


def age_reference(plan: ReleasePlan) -> str:
    """What a pending row's age is measured against (for messages)."""
    if plan.probe.use_processing_time:
        return f"arrival time, against the decision time {plan.decided_at_ms} ms"
    return f"event time, against the probe watermark {plan.probe}"


def bound_alert(pipeline: str, plan: ReleasePlan, counts: BatchCounts) -> str | None:
    """The alert text of a batch that hit the pending bound (None when it did not).

    >>> from lakehouse.time import Watermark as W, WatermarkStatus as S
    >>> plan = ReleasePlan(batch_id=3, build_version=1, combined=W(5), previous=W(5),
    ...     probe=W(90), build=W(5), build_status=S.ACTIVE, probe_max_ts_ms=91,
    ...     decided_at_ms=0, pending_max_rows=10)
    >>> print(bound_alert("j", plan, BatchCounts(total=12, evicted_rows=2)))
    pending bound hit by join 'j' batch 3: 12 row(s) waiting, over pending_max_rows = 10 by 2 \
(watermarks: combined 1970-01-01T00:00:00.005Z, probe 1970-01-01T00:00:00.090Z, build \
1970-01-01T00:00:00.005Z)
    """
    if not counts.evicted:
        return None
    parts = []
    if counts.evicted_age:
        parts.append(
            f"{counts.evicted_age} row(s) more than pending_max_age_ms = "
            f"{plan.pending_max_age_ms} behind the probe's time ({age_reference(plan)})"
        )
    if counts.evicted_rows:
        parts.append(
            f"{counts.pending + counts.evicted_rows} row(s) waiting, over pending_max_rows = "
            f"{plan.pending_max_rows} by {counts.evicted_rows}"
        )
    return (
        f"pending bound hit by join '{pipeline}' batch {plan.batch_id}: "
        + "; ".join(parts)
        + f" (watermarks: combined {plan.combined}, probe {plan.probe}, build {plan.build})"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchOutcome:
    """What a counted batch's writes record (:func:`outcome`).

    Attributes:
        after: the join's state after the batch (in every commit).
        released: rows the output gets: those the watermark releases, and expired rows
            under the ``release`` expiry policy.
        dead_lettered: rows the dead-letter table gets: malformed, late, expired under the
            ``dead-letter`` expiry policy, and evicted by the pending bound.
        alert: the pending-bound alert of the batch, if it hit the bound.
        accounting: the counts every commit of the batch records (the quality report's
            ledger: arrived = released + dead-lettered + pending, over the batches).
        writes_pending: the pending table changes (rows wait now, or waited before).
    """

    after: JoinState
    released: int
    dead_lettered: int
    alert: str | None
    accounting: Mapping[str, Any]
    writes_pending: bool


def outcome(
    options: JoinOptions,
    *,
    plan: ReleasePlan,
    state: JoinState,
    counts: BatchCounts,
    arrived: int,
    malformed: int,
) -> BatchOutcome:
    """What the batch's commits record, from its counts.

    >>> from lakehouse.time import Watermark as W, WatermarkStatus as S
    >>> options = JoinOptions(build_table="b", output_table="o", pending_table="p",
    ...     dead_letter_table="d", pipeline_id="j", probe_schema="k string, t bigint",
    ...     probe_key=("k",), probe_time="t", expiry_policy="dead-letter")
    >>> plan = ReleasePlan(batch_id=3, build_version=1, combined=W(5), previous=W(5),
    ...     probe=W(90), build=W(5), build_status=S.ACTIVE, probe_max_ts_ms=91,
    ...     decided_at_ms=0)
    >>> done = outcome(options, plan=plan, state=JoinState(pending_rows=4),
    ...     counts=BatchCounts(total=10, release=5, late=1, expired=2), arrived=6, malformed=1)
    >>> done.released, done.dead_lettered, done.after.pending_rows, done.writes_pending
    (5, 4, 2, True)

    Raises:
        PendingBoundError: the batch hit the pending bound and ``on_pending_bound`` is
            ``fail``: nothing may be written, so a restart meets the same bound.
    """
    alert = bound_alert(options.pipeline_id, plan, counts)
    if alert is not None and options.on_pending_bound == "fail":
        raise PendingBoundError(
            f"{alert}. on_pending_bound = 'fail' stopped the join before it wrote "
            "anything. Raise the bound, set join.on_pending_bound = 'dead-letter' to move "
            "the oldest rows to the dead-letter table, or get the build side moving (its "
            "watermark holds the rows back; join.build_idle_timeout_ms for a quiet "
            "dimension)",
            setting="join.pending_max_age_ms" if counts.evicted_age else "join.pending_max_rows",
        )
    expired_dead = counts.expired if options.expiry_policy == "dead-letter" else 0
    released = counts.release + counts.expired - expired_dead
    dead = malformed + counts.late + expired_dead + counts.evicted
    accounting: dict[str, Any] = {
        META_ARRIVED: arrived,
        META_RELEASED: released,
        META_PENDING_ROWS: counts.pending,
        META_DEAD_LETTERED: dead,
        META_EVICTED: counts.evicted,
    }
    if alert is not None:
        accounting[META_PENDING_BOUND_ALERT] = alert
    return BatchOutcome(
        after=plan.after(pending_rows=counts.pending, evicted=counts.evicted, before=state),
        released=released,
        dead_lettered=dead,
        alert=alert,
        accounting=accounting,
        writes_pending=bool(counts.pending or state.pending_rows),
    )
