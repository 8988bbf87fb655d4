"""What one batch commits to one build table, without Spark (lakehouse.dimension.commit)."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from lakehouse.dimension.commit import RowStats, build_watermark, plan_commit
from lakehouse.dimension.layout import (
    META_BATCH_ID,
    META_END_OFFSETS,
    META_MAX_EVENT_TIME,
    META_PIPELINE,
    META_ROWS,
    META_SCHEMA_BLOCKED,
    META_SCHEMA_BLOCKED_TOTAL,
    META_SNAPSHOT_ENDED,
    META_SNAPSHOT_STATE,
    META_WATERMARK,
    PROP_PRIMARY_KEY,
    PROP_SCHEMA_BLOCK,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_STATE,
    PROP_SOURCE_TABLE,
)
from lakehouse.dimension.look import NO_TABLE, TargetLook
from lakehouse.dimension.plan import BlockEvidence, TargetPlan
from lakehouse.dimension.schema_block import SchemaBlock
from lakehouse.dimension.signals import (
    Decision,
    SignalEvidence,
    SignalState,
    SnapshotOptions,
)
from lakehouse.dimension.targets import BuildTarget
from lakehouse.time import WATERMARK_MIN

TARGET = BuildTarget(table_uri="/t/rates", source_table="public.rates", out_of_orderness_ms=1_000)
NOW = "2026-03-02T08:00:00.000+00:00"
FIRED = SignalEvidence(signal="last", detail="last row", covered={}, batch_id=3)
TIMES = st.none() | st.integers(0, 10**13)


def _plan(**kw) -> TargetPlan:
    return TargetPlan(**{"target": TARGET, "key_columns": ("currency",), **kw})


def _look(**kw) -> TargetLook:
    props = {PROP_PRIMARY_KEY: "currency", PROP_SNAPSHOT_COMPLETE: "false"}
    base = dict(exists=True, version=5, properties=props)
    return TargetLook(**{**base, "replay": False, **kw})


def _commit(look: TargetLook, plan: TargetPlan | None = None, **kw):
    args = dict(
        decision=Decision(state=SignalState()),
        rows=RowStats(count=2, max_event_time_ms=10_000),
        batch_id=4,
        pipeline_id="rates",
        end_offsets={"cdc": {"0": 7}},
        now_iso=NOW,
    )
    return plan_commit(look=look, plan=plan or _plan(), **{**args, **kw})


_EVIDENCE = BlockEvidence(
    column="rate",
    table_type="decimal(10,4)",
    record_type="string",
    reason="column rate: 'n/a' is not decimal(10,4)",
    first_offset={"topic": "cdc", "partition": 0, "offset": 9},
    first_event_time_ms=6_000,
)


def test_a_new_table_is_created_with_its_key_and_loading_marker_and_learns_nothing_after():
    commit = _commit(NO_TABLE)
    assert commit.create is not None
    assert commit.create[PROP_PRIMARY_KEY] == "currency"
    assert commit.create[PROP_SOURCE_TABLE] == "public.rates"
    assert commit.create[PROP_SNAPSHOT_COMPLETE] == "false"
    assert commit.create[PROP_SNAPSHOT_STATE] == "loading"
    assert commit.learn_key is None


def test_a_table_a_signal_created_learns_its_key_from_its_first_rows_but_not_on_replay():
    # created with the loading marker and no key (the batch that created it had no rows)
    keyless = _look(properties={PROP_PRIMARY_KEY: "", PROP_SNAPSHOT_COMPLETE: "false"})
    assert _commit(keyless).learn_key == "currency"
    assert _commit(replace(keyless, replay=True)).learn_key is None
    assert _commit(_look()).learn_key is None  # it has one
    assert _commit(keyless, _plan(key_columns=())).learn_key is None  # none to learn


def test_a_creation_a_crash_cut_before_its_properties_is_finished_without_touching_the_rest():
    # the empty commit of the creation is there, its properties commit is not (a kill between
    # the two): the next batch sets the creation's properties, and only those it lacks
    cut = _look(version=0, properties={"delta.enableChangeDataFeed": "false"})
    commit = _commit(cut)
    assert commit.finishes_create and commit.create is not None
    assert commit.create == _commit(NO_TABLE).create
    assert commit.learn_key is None  # the creation's properties carry the key
    assert not commit.changes_nothing
    # on replay as well: the batch that was killed comes again
    assert _commit(replace(cut, replay=True)).create == commit.create
    # a finished table is left alone, whatever it holds
    done = _look(properties={PROP_SNAPSHOT_COMPLETE: "true", PROP_PRIMARY_KEY: "id"})
    assert _commit(done).create is None and not _commit(done).finishes_create
    assert not _commit(NO_TABLE).finishes_create


def test_the_watermark_trails_the_largest_committed_time_by_the_out_of_orderness():
    # committed up to 20 s; this batch's rows end at 10 s: the watermark stays at 20 s - 1 s
    commit = _commit(_look(max_event_time_ms=20_000))
    assert commit.max_event_time_ms == 20_000
    assert commit.watermark_ms == 18_999
    assert commit.metadata[META_WATERMARK] == 18_999
    assert commit.metadata[META_MAX_EVENT_TIME] == 20_000
    # nothing committed ever and no rows: the minimum, and no max event time
    empty = _commit(NO_TABLE, rows=RowStats())
    assert empty.watermark_ms == WATERMARK_MIN
    assert empty.metadata[META_MAX_EVENT_TIME] == ""


@given(committed=TIMES, batch=TIMES, ooo=st.integers(0, 10**6))
def test_the_watermark_never_falls_below_what_was_committed(committed, batch, ooo):
    look = _look(max_event_time_ms=committed, watermark_ms=build_watermark(committed, ooo))
    plan = _plan(target=replace(TARGET, out_of_orderness_ms=ooo))
    commit = _commit(look, plan, rows=RowStats(count=1, max_event_time_ms=batch))
    assert commit.watermark_ms >= look.watermark_ms
    if batch is not None:
        assert commit.watermark_ms >= batch - ooo - 1


def test_the_data_commit_carries_the_batch_its_offsets_rows_and_signal_state():
    state = SignalState(phase="complete", fired=FIRED)
    commit = _commit(_look(), decision=Decision(state=state, fire=FIRED))
    meta = commit.metadata
    assert meta[META_BATCH_ID] == 4 and meta[META_PIPELINE] == "rates"
    assert meta[META_END_OFFSETS] == {"cdc": {"0": 7}}
    assert meta[META_ROWS] == 2
    assert meta[META_SNAPSHOT_STATE] == state.to_json()
    assert meta[META_SNAPSHOT_ENDED] == "last"  # heals the marker after a crash
    assert META_SCHEMA_BLOCKED not in meta
    quiet = _commit(_look()).metadata
    assert META_SNAPSHOT_ENDED not in quiet


def test_an_incompatible_record_starts_a_block_recorded_before_the_data_commit():
    # committed up to 5 s (watermark 3999); the batch reaches 10 s, its first bad record 6 s
    look = _look(max_event_time_ms=5_000, watermark_ms=3_999)
    commit = _commit(look, _plan(evidence=_EVIDENCE, blocked_count=3))
    block = commit.block
    assert block is not None and commit.starts_block and commit.record_block
    assert block.watermark_ms == 5_999  # below the record's time, not the batch's 8999
    assert commit.watermark_ms == 5_999
    assert (block.column, block.batch_id, block.pipeline) == ("rate", 4, "rates")
    assert block.since_version == 6 and block.blocked_at == NOW
    assert commit.metadata[META_SCHEMA_BLOCKED] == 3
    assert commit.metadata[META_SCHEMA_BLOCKED_TOTAL] == 3
    # a retry of the batch finds its own block in the table and does not record it again
    retry = _look(
        max_event_time_ms=5_000,
        watermark_ms=3_999,
        properties={
            PROP_PRIMARY_KEY: "currency",
            PROP_SNAPSHOT_COMPLETE: "false",
            PROP_SCHEMA_BLOCK: block.to_json(),
        },
    )
    again = _commit(retry, _plan(evidence=_EVIDENCE, blocked_count=3), now_iso="later")
    assert again.block == block and again.starts_block and not again.record_block
    # a replay records nothing before its (skipped) data commit
    assert not _commit(replace(look, replay=True), _plan(evidence=_EVIDENCE)).record_block


@given(committed_wm=st.integers(0, 10**9), first=st.none() | st.integers(0, 10**9))
def test_a_new_block_never_lowers_the_committed_watermark(committed_wm, first):
    look = _look(max_event_time_ms=committed_wm + 1_001, watermark_ms=committed_wm)
    evidence = replace(_EVIDENCE, first_event_time_ms=first)
    commit = _commit(look, _plan(evidence=evidence), rows=RowStats(count=1))
    assert commit.block is not None
    assert commit.watermark_ms == commit.block.watermark_ms >= committed_wm
    if first is not None and first - 1 >= committed_wm:
        assert commit.watermark_ms <= first - 1


def test_an_open_block_holds_the_watermark_and_counts_every_blocked_record():
    block = SchemaBlock(
        column="rate",
        table_type="decimal(10,4)",
        record_type="string",
        since_version=3,
        batch_id=1,
        pipeline="rates",
        first_offset={"topic": "cdc", "partition": 0, "offset": 2},
        first_event_time_ms=2_000,
        watermark_ms=1_999,
        blocked_at=NOW,
        reason="...",
    )
    look = _look(max_event_time_ms=50_000, blocked_total=10)
    commit = _commit(look, _plan(active_block=block, blocked_count=4))
    assert commit.block is block and not commit.starts_block and not commit.record_block
    assert commit.watermark_ms == 1_999
    assert commit.blocked_so_far == 14
    assert commit.metadata[META_SCHEMA_BLOCKED_TOTAL] == 14


def test_only_a_completing_resnapshot_ends_the_keys_it_did_not_reread():
    resnapshot = _look(
        properties={PROP_SNAPSHOT_STATE: "resnapshot", PROP_SNAPSHOT_COMPLETE: "false"}
    )
    fires = Decision(state=SignalState(), fire=FIRED)
    assert _commit(resnapshot, decision=fires).ghost_deletes
    # not before the signal, not for a filtered re-snapshot, not on replay
    assert not _commit(resnapshot).ghost_deletes
    keep = _plan(target=replace(TARGET, snapshot=SnapshotOptions(resnapshot_deletes=False)))
    assert not _commit(resnapshot, keep, decision=fires).ghost_deletes
    assert not _commit(replace(resnapshot, replay=True), decision=fires).ghost_deletes
    # the first snapshot's end is not a re-snapshot's
    assert not _commit(_look(), decision=fires).ghost_deletes
    # a re-snapshot that starts and completes in one batch
    both = Decision(state=SignalState(), fire=FIRED, start_resnapshot=True)
    commit = _commit(_look(), decision=both)
    assert commit.ghost_deletes and commit.start_resnapshot
    assert not _commit(replace(_look(), replay=True), decision=both).start_resnapshot


def test_the_look_reads_the_newest_value_of_each_key_and_the_block_count_only_when_blocked():
    metadata = [
        {"lakehouse.reason": "marker"},
        {META_WATERMARK: "90", META_MAX_EVENT_TIME: "", META_SNAPSHOT_STATE: "{}"},
        {META_WATERMARK: "40", META_MAX_EVENT_TIME: "50", META_SCHEMA_BLOCKED_TOTAL: "7"},
    ]
    look = TargetLook.from_history(version=9, properties={}, replay=False, metadata=metadata)
    assert (look.max_event_time_ms, look.watermark_ms, look.blocked_total) == (50, 90, 0)
    assert look.snapshot_state == "{}"
    blocked = {PROP_SCHEMA_BLOCK: json.dumps({"column": "x"})}
    look = TargetLook.from_history(version=9, properties=blocked, replay=True, metadata=metadata)
    assert look.blocked_total == 7 and look.replay and look.version == 9

    read: list[int] = []

    def lazily():
        for i, m in enumerate(metadata * 20):
            read.append(i)
            yield m

    TargetLook.from_history(version=9, properties={}, replay=False, metadata=lazily())
    assert read == [0, 1, 2]  # stops once it has every value it wants


def _quiet_look(state: SignalState) -> TargetLook:
    """A complete table whose last data commit recorded up to 20 s and ``state``."""
    return _look(max_event_time_ms=20_000, watermark_ms=18_999, snapshot_state=state.to_json())


def test_a_batch_that_changes_nothing_commits_nothing():
    # Debezium's heartbeats alone, after the marker: no row, the same bookkeeping
    state = SignalState(phase="complete", positions={"cdc": {"0": 7}})
    quiet = _commit(_quiet_look(state), decision=Decision(state=state), rows=RowStats())
    assert quiet.changes_nothing
    # other tables' records moved the consumed offsets: a complete table does not record
    # them for that (its decisions never read them)
    moved = SignalState(phase="complete", positions={"cdc": {"0": 9}})
    untouched = _commit(_quiet_look(state), decision=Decision(state=moved), rows=RowStats())
    assert untouched.changes_nothing
    # anything that changes the table commits
    look = _quiet_look(state)
    loading = SignalState(phase="loading", positions={"cdc": {"0": 7}})
    loading_look = replace(look, snapshot_state=loading.to_json())
    noted = SignalState(phase="complete", positions={"cdc": {"0": 9}}, alert="connector down")
    changed = {
        "a row": _commit(look, decision=Decision(state=state)),
        "moved offsets while loading": _commit(
            loading_look,
            decision=Decision(state=replace(loading, positions={"cdc": {"0": 9}})),
            rows=RowStats(),
        ),
        "moved bookkeeping": _commit(look, decision=Decision(state=noted), rows=RowStats()),
        "a fired signal": _commit(
            look, decision=Decision(state=state, fire=FIRED), rows=RowStats()
        ),
        "a rejected row": _commit(
            look, _plan(rejected_count=1), decision=Decision(state=state), rows=RowStats()
        ),
        "a schema change": _commit(
            look,
            _plan(schema_changes=({"ddl": "ALTER TABLE rates ADD c int"},)),
            decision=Decision(state=state),
            rows=RowStats(),
        ),
        "a new block": _commit(
            look, _plan(evidence=_EVIDENCE), decision=Decision(state=state), rows=RowStats()
        ),
        "a table to create": _commit(NO_TABLE, decision=Decision(state=state), rows=RowStats()),
        "no recorded state": _commit(
            replace(look, snapshot_state=None), decision=Decision(state=state), rows=RowStats()
        ),
    }
    assert {why: c.changes_nothing for why, c in changed.items()} == dict.fromkeys(changed, False)
    # a replay decides its data commit as the first attempt did (Delta skips it)
    replay = _commit(replace(look, replay=True), decision=Decision(state=state), rows=RowStats())
    assert not replay.changes_nothing


def test_the_look_reads_the_recorded_bookkeeping_from_the_last_data_commit():
    state = SignalState(phase="complete").to_json()
    look = TargetLook.from_history(
        version=9,
        properties={},
        replay=False,
        metadata=[
            {"lakehouse.reason": "marker"},
            {META_WATERMARK: "90", META_MAX_EVENT_TIME: "100", META_SNAPSHOT_STATE: state},
        ],
    )
    assert look.snapshot_state == state
