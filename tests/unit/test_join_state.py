"""The join's decisions without Spark (lakehouse.join.state): deciding, recovering, idling."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import join_options
from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.errors import ConfigError, PendingBoundError, SchemaMismatchError
from lakehouse.join.build_channel import BuildChannelState
from lakehouse.join.options import JoinOptions
from lakehouse.join.state import (
    BatchCounts,
    JoinState,
    ReleasePlan,
    TableCommits,
    decide,
    idle,
    outcome,
    recover,
    releases_everything,
)
from lakehouse.time import Watermark, WatermarkStatus

BUILD = BuildChannelState(
    version=3,
    snapshot_complete=True,
    completed_version=1,
    event_watermark_ms=90,
    last_commit_ms=0,
    key_columns=("k",),
)


def _options(**kw) -> JoinOptions:
    return join_options(**{**dict(probe_schema="k string, t bigint", probe_time="t"), **kw})


def _meta(batch: int, state: JoinState | None = None, plan: ReleasePlan | None = None):
    meta = {"lakehouse.batchId": str(batch), "lakehouse.pipeline": "j"}
    if state is not None:
        meta["lakehouse.state"] = state.to_json()
    if plan is not None:
        meta["lakehouse.plan"] = plan.to_json()
    return meta


def _plan(batch: int, combined: Watermark = Watermark.MIN) -> ReleasePlan:
    return ReleasePlan(
        batch_id=batch,
        build_version=1,
        combined=combined,
        previous=Watermark.MIN,
        probe=combined,
        build=combined,
        build_status=WatermarkStatus.ACTIVE,
        probe_max_ts_ms=None,
        decided_at_ms=0,
    )


# ----------------------------------------------------------------------------------- decide


def test_processing_time_waits_for_the_marker_then_releases_everything():
    o = _options(mode="proctime", watermark="none", probe_time=None)
    loading = replace(BUILD, snapshot_complete=False)
    before = decide(o, batch_id=0, now_ms=5, state=JoinState(), batch_max_ts_ms=None, build=loading)
    assert before.combined == Watermark.MIN  # a half-loaded dimension holds everything back
    after = decide(o, batch_id=1, now_ms=6, state=JoinState(), batch_max_ts_ms=None, build=BUILD)
    assert after.combined == Watermark.PROCESSING_TIME
    assert releases_everything(o, after, JoinState())
    assert not releases_everything(o, after, JoinState(pending_rows=2))


def test_an_idle_build_side_lets_the_probe_watermark_through():
    o = _options(build_idle_timeout_ms=100)
    quiet = replace(BUILD, event_watermark_ms=10, last_commit_ms=0)
    plan = decide(o, batch_id=0, now_ms=1_000, state=JoinState(), batch_max_ts_ms=500, build=quiet)
    assert plan.build_status is WatermarkStatus.IDLE and plan.combined == Watermark(499)


@settings(max_examples=200, deadline=None)
@given(
    maxima=st.lists(st.one_of(st.none(), st.integers(-(10**6), 10**6)), min_size=1, max_size=8),
    builds=st.lists(st.integers(-(10**6), 10**6), min_size=8, max_size=8),
)
def test_the_combined_watermark_never_decreases(maxima, builds):
    # whatever the batches bring and however the build watermark moves, the recorded state
    # carries the combined watermark forward without going back
    o = _options(out_of_orderness_ms=3)
    state = JoinState()
    for batch, (batch_max, build_wm) in enumerate(zip(maxima, builds, strict=False)):
        plan = decide(
            o,
            batch_id=batch,
            now_ms=0,
            state=state,
            batch_max_ts_ms=batch_max,
            build=replace(BUILD, event_watermark_ms=build_wm),
        )
        assert plan.combined >= state.combined and plan.previous == state.combined
        assert plan.combined <= plan.probe
        state = plan.after(pending_rows=0, evicted=0, before=state)


# ----------------------------------------------------------------------------- end of input


@settings(max_examples=200, deadline=None)
@given(
    maxima=st.lists(st.one_of(st.none(), st.integers(-(10**6), 10**6)), min_size=1, max_size=6),
    builds=st.lists(st.integers(-(10**6), 10**6), min_size=6, max_size=6),
    ooo=st.integers(0, 10),
)
def test_the_end_of_input_releases_up_to_the_build_watermark_and_leaves_the_state_alone(
    maxima, builds, ooo
):
    # Flink ends a bounded probe with Watermark(MAX): the valve then holds at the build
    # channel alone. The state the next run continues from is the one without the end, so
    # the same batches decide the same combined watermark with or without it.
    ended, plain = (
        _options(out_of_orderness_ms=ooo, until_complete=True),
        _options(out_of_orderness_ms=ooo),
    )
    state = JoinState()
    for batch, (batch_max, build_wm) in enumerate(zip(maxima, builds, strict=False)):
        build = replace(BUILD, event_watermark_ms=build_wm)
        kw = dict(batch_id=batch, now_ms=0, state=state, batch_max_ts_ms=batch_max, build=build)
        plan, without = decide(ended, **kw), decide(plain, **kw)
        assert replace(plan, final=None) == without and without.final is None
        expected = max(Watermark(build_wm), plan.combined)
        assert plan.releasing == expected
        assert plan.final == (None if expected == plan.combined else expected)
        state = plan.after(pending_rows=1, evicted=0, before=state)


def test_the_end_of_input_never_passes_the_snapshot_marker():
    loading = replace(BUILD, snapshot_complete=False)
    for o in (_options(until_complete=True), _options(until_complete=True, build_complete=True)):
        plan = decide(o, batch_id=0, now_ms=0, state=JoinState(), batch_max_ts_ms=50, build=loading)
        assert plan.releasing == Watermark.MIN and plan.final is None


def test_a_complete_or_idle_build_side_lets_the_end_of_input_release_everything():
    end = Watermark(2**63 - 1)
    complete = _options(until_complete=True, build_complete=True)
    plan = decide(
        complete, batch_id=0, now_ms=0, state=JoinState(), batch_max_ts_ms=500, build=BUILD
    )
    assert plan.final == end and plan.combined == Watermark(90)
    idle_build = _options(until_complete=True, build_idle_timeout_ms=100)
    quiet = replace(BUILD, last_commit_ms=0)
    plan = decide(
        idle_build, batch_id=0, now_ms=1_000, state=JoinState(), batch_max_ts_ms=500, build=quiet
    )
    assert plan.final == end


def test_processing_time_needs_no_end_of_input():
    o = _options(mode="proctime", watermark="none", probe_time=None, until_complete=True)
    plan = decide(o, batch_id=0, now_ms=5, state=JoinState(), batch_max_ts_ms=None, build=BUILD)
    assert plan.combined == Watermark.PROCESSING_TIME and plan.final is None


def test_build_complete_without_the_end_of_input_is_refused():
    with pytest.raises(ConfigError, match="needs until_complete"):
        _options(build_complete=True)


# ------------------------------------------------------------------------------------- idle


def test_a_batch_without_rows_and_nothing_pending_writes_nothing():
    plan = _plan(4)
    assert idle(arrived=0, malformed=0, state=JoinState(), plan=plan, options=_options())
    assert not idle(arrived=1, malformed=0, state=JoinState(), plan=plan, options=_options())
    assert not idle(arrived=0, malformed=1, state=JoinState(), plan=plan, options=_options())


def test_waiting_rows_are_looked_at_again_only_when_something_moved():
    plan = _plan(5, Watermark(10))
    same = JoinState(batch_id=4, combined=Watermark(10), build_version=1, pending_rows=3)
    assert idle(arrived=0, malformed=0, state=same, plan=plan, options=_options())
    moved = replace(same, combined=Watermark(9))
    assert not idle(arrived=0, malformed=0, state=moved, plan=plan, options=_options())
    new_build = replace(same, build_version=0)
    assert not idle(arrived=0, malformed=0, state=new_build, plan=plan, options=_options())
    ttl = _options(pending_ttl_ms=10)
    assert not idle(arrived=0, malformed=0, state=same, plan=plan, options=ttl)
    lowered = _options(pending_max_rows=2)
    assert not idle(arrived=0, malformed=0, state=same, plan=plan, options=lowered)
    ending = replace(plan, final=Watermark(50))
    assert not idle(arrived=0, malformed=0, state=same, plan=ending, options=_options())


# --------------------------------------------------------------------------------- recover


def test_recover_takes_the_newest_state_of_any_table_before_the_batch():
    pending = TableCommits(
        uri="p", complete=True, commits=((3, _meta(2, JoinState(batch_id=2, pending_rows=4))),)
    )
    output = TableCommits(
        uri="o", complete=True, commits=((7, _meta(5, JoinState(batch_id=5, pending_rows=0))),)
    )
    recovered = recover([pending, output], batch_id=6)
    assert recovered.state.batch_id == 5 and recovered.plan is None
    assert recovered.recorded_in == ()


def test_a_replay_reuses_the_plan_its_first_attempt_recorded():
    plan = _plan(6, Watermark(40))
    dead = TableCommits(uri="d", complete=True, commits=((2, _meta(6, None, plan)),))
    output = TableCommits(
        uri="o",
        complete=True,
        commits=(
            (9, _meta(6, JoinState(batch_id=6), plan)),
            (8, _meta(5, JoinState(batch_id=5, combined=Watermark(30)))),
        ),
    )
    recovered = recover([dead, output], batch_id=6)
    assert recovered.plan == plan
    assert set(recovered.recorded_in) == {"d", "o"}
    assert recovered.state.batch_id == 5 and recovered.state.combined == Watermark(30)


def test_a_fresh_join_starts_from_the_initial_state():
    empty = TableCommits(uri="p", complete=True, commits=())
    assert recover([empty], batch_id=0).state == JoinState()


def test_a_state_that_cannot_be_found_fails_naming_the_table():
    # the join's commits are there, but only of the replayed batch, and older ones were not read
    only_replay = TableCommits(
        uri="out", complete=False, commits=((40, _meta(9, JoinState(batch_id=9))),)
    )
    with pytest.raises(SchemaMismatchError, match=r"table 'out'.*version 40.*before batch 9"):
        recover([only_replay], batch_id=9)


def test_states_written_before_the_state_carried_its_batch_id_are_read():
    old = {
        "lakehouse.batchId": "3",
        "lakehouse.pendingRows": "2",
        "lakehouse.state": '{"combined": {"timestamp": "5", "use_processing_time": "false"}, '
        '"probeMaxTs": 9, "buildVersion": 1, "evictedTotal": 1}',
    }
    state = JoinState.from_metadata(old)
    assert state == JoinState(
        batch_id=3,
        combined=Watermark(5),
        probe_max_ts_ms=9,
        build_version=1,
        pending_rows=2,
        evicted_total=1,
    )


@given(
    batch=st.integers(0, 10**6),
    pending=st.integers(0, 10**6),
    evicted=st.integers(0, 10**6),
    ts=st.one_of(st.none(), st.integers(-(2**62), 2**62)),
)
def test_state_and_plan_survive_their_commit_metadata(batch, pending, evicted, ts):
    state = JoinState(
        batch_id=batch,
        combined=Watermark(7),
        probe_max_ts_ms=ts,
        pending_rows=pending,
        evicted_total=evicted,
    )
    assert JoinState.from_metadata({"lakehouse.state": state.to_json()}) == state
    plan = replace(_plan(batch, Watermark.PROCESSING_TIME), probe_max_ts_ms=ts)
    assert ReleasePlan.from_json(plan.to_json()) == plan
    ended = replace(_plan(batch, Watermark(7)), final=Watermark(2**63 - 1))
    assert ReleasePlan.from_json(ended.to_json()) == ended


counts_strategy = st.builds(
    lambda release, late, expired, age, rows, pending: BatchCounts(
        total=release + late + expired + age + rows + pending,
        release=release,
        late=late,
        expired=expired,
        evicted_age=age,
        evicted_rows=rows,
    ),
    *[st.integers(0, 50)] * 6,
)


@given(
    counts=counts_strategy,
    malformed=st.integers(0, 20),
    expiry=st.sampled_from(["release", "dead-letter"]),
    waited=st.integers(0, 50),
)
def test_every_candidate_row_is_released_dead_lettered_or_kept_exactly_once(
    counts, malformed, expiry, waited
):
    options = _options(expiry_policy=expiry, on_pending_bound="dead-letter")
    done = outcome(
        options,
        plan=_plan(4),
        state=JoinState(pending_rows=waited),
        counts=counts,
        arrived=counts.total - waited,
        malformed=malformed,
    )
    # the ledger the quality report checks, per batch
    assert done.released + done.dead_lettered + counts.pending == counts.total + malformed
    assert done.accounting["lakehouse.released"] == done.released
    assert done.accounting["lakehouse.deadLettered"] == done.dead_lettered
    assert done.accounting["lakehouse.pendingRows"] == done.after.pending_rows == counts.pending
    assert done.after.evicted_total == counts.evicted
    assert done.writes_pending == bool(counts.pending or waited)
    assert (done.alert is None) == (counts.evicted == 0)
    expired_out = counts.expired if expiry == "release" else 0
    assert done.released == counts.release + expired_out


def test_a_batch_over_the_pending_bound_is_refused_before_any_write_when_told_to_fail():
    options = _options(on_pending_bound="fail", pending_max_rows=10)
    plan = replace(_plan(4), pending_max_rows=10)
    over = BatchCounts(total=12, evicted_rows=2)
    with pytest.raises(PendingBoundError, match="on_pending_bound = 'fail'") as raised:
        outcome(options, plan=plan, state=JoinState(), counts=over, arrived=12, malformed=0)
    assert raised.value.setting == "join.pending_max_rows"
    within = BatchCounts(total=10)
    done = outcome(options, plan=plan, state=JoinState(), counts=within, arrived=10, malformed=0)
    assert done.alert is None and "lakehouse.pendingBoundAlert" not in done.accounting
