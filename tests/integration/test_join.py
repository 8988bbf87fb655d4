"""The temporal join operator on real Spark and real Delta tables, against the reference."""

from __future__ import annotations

import itertools

import pytest
from helpers import assert_rows_equal, raw_records, write_build_table
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from reference import ProbeRow, Version, rowtime_join

from lakehouse import delta
from lakehouse.join import JoinOptions, TemporalJoin
from lakehouse.join.operator import last_state
from lakehouse.time import ManualClock

pytestmark = pytest.mark.spark

PROBE_SCHEMA = "id bigint, k string, ts bigint"


def _options(tmp, **kw) -> JoinOptions:
    base = dict(
        build_table=str(tmp / "build"),
        output_table=str(tmp / "out"),
        pending_table=str(tmp / "pending"),
        dead_letter_table=str(tmp / "dlq"),
        pipeline_id="join-test",
        probe_schema=PROBE_SCHEMA,
        probe_key=("k",),
        probe_time="ts",
        probe_id="id",
    )
    base.update(kw)
    return JoinOptions(**base)


def _probe(spark, rows):
    return raw_records(spark, [{"id": p.id, "k": p.key, "ts": p.time} for p in rows])


def _output(spark, opts):
    if not delta.table_exists(opts.output_table):
        return []
    return [(r.id, r.value) for r in delta.read(spark, opts.output_table).collect()]


def _pending_ids(spark, opts):
    return sorted(r.id for r in delta.read(spark, opts.pending_table).select("id").collect())


@st.composite
def scenario(draw):
    n = draw(st.integers(1, 12))
    versions = []
    for i in range(n):
        op = draw(st.sampled_from(["r", "c", "u", "u", "d", "t"] if i else ["r"]))
        versions.append(
            Version(
                None if op == "t" else draw(st.sampled_from("ab")),
                draw(st.integers(0, 20)),
                f"{draw(st.integers(0, 9))}.{i:03d}",
                op,
                value=100 + i,
            )
        )
    probes = [
        ProbeRow(i, draw(st.sampled_from(["a", "b", "z", None])), draw(st.integers(-1, 25)))
        for i in range(draw(st.integers(1, 12)))
    ]
    cuts = sorted(draw(st.lists(st.integers(0, len(probes)), min_size=1, max_size=2)))
    return versions, probes, cuts, draw(st.integers(0, 5)), draw(st.booleans())


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=scenario())
def test_rowtime_join_matches_reference_across_batches(spark, tmp_path_factory, case):
    # out-of-order probe rows over several batches, equal timestamps, rows before any version,
    # deletes and re-inserts, truncates, keys never seen, NULL keys; inner and left
    versions, probes, cuts, ooo, left = case
    tmp = tmp_path_factory.mktemp("j")
    opts = _options(tmp, join_type="left" if left else "inner", out_of_orderness_ms=ooo)
    write_build_table(spark, opts.build_table, versions, watermark_ms=10**12)
    op = TemporalJoin(opts, num_buckets=2)
    bounds = [0, *cuts, len(probes)]
    for batch_id, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        op.process(_probe(spark, [p for p in probes[lo:hi] if p.key is not None]), batch_id)
    sent = [p for p in probes if p.key is not None]
    final_wm = max(p.time for p in sent) - ooo - 1 if sent else -(2**63)
    expected, pending = rowtime_join(sent, versions, watermark=final_wm, left=left)
    assert_rows_equal(_output(spark, opts), expected)
    assert _pending_ids(spark, opts) == sorted(pending)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=scenario())
# every probe key NULL: nothing is sent, released or committed (CI's random draws found it)
@example(case=([Version("a", 0, "0.000", "r", 100)], [ProbeRow(0, None, 0)], [0], 0, False))
def test_a_run_that_ends_its_input_leaves_nothing_pending_and_equals_the_reference(
    spark, tmp_path_factory, case
):
    # Flink's bounded temporal join: the final watermark releases every row, each joined as
    # of its own time. Here the last batch of a run ends the probe input (--until-complete):
    # nothing stays pending, and the output is the reference's complete answer row for row,
    # each row saying whether the watermark or the end of input released it.
    versions, probes, cuts, ooo, left = case
    tmp = tmp_path_factory.mktemp("end")
    opts = _options(tmp, join_type="left" if left else "inner", out_of_orderness_ms=ooo)
    write_build_table(spark, opts.build_table, versions, watermark_ms=10**12)
    sent = [p for p in probes if p.key is not None]
    bounds = [0, *cuts, len(probes)]
    for batch_id, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        batch = [p for p in probes[lo:hi] if p.key is not None]
        TemporalJoin(opts, num_buckets=2).process(_probe(spark, batch), batch_id)
    # the run that ends the input: no new probe row (the tick batch of an available-now run)
    ended = TemporalJoin(opts.model_copy(update={"until_complete": True}), num_buckets=2)
    report = ended.process(_probe(spark, []), len(bounds) - 1)
    expected, pending = rowtime_join(sent, versions, watermark=2**63 - 1, left=left)
    assert pending == [] and _pending_ids(spark, opts) == []
    assert_rows_equal(_output(spark, opts), expected)
    final_wm = max(p.time for p in sent) - ooo - 1 if sent else -(2**63)
    by = (  # no row ever released (every probe key NULL): no output table either
        {r.id: r._released_by for r in delta.read(spark, opts.output_table).collect()}
        if delta.table_exists(opts.output_table)
        else {}
    )
    # a row at or below the watermark the batches before its own had made arrived late
    late, seen = set(), None
    for lo, hi in itertools.pairwise(bounds):
        batch = [p for p in probes[lo:hi] if p.key is not None]
        if seen is not None:
            late |= {p.id for p in batch if p.time <= min(seen - ooo - 1, 10**12)}
        seen = max([p.time for p in batch] + ([seen] if seen is not None else []), default=None)

    def released_by(i: int) -> str:
        if i in late:
            return "late"
        t = next(p.time for p in sent if p.id == i)
        return "watermark" if t <= final_wm else "end_of_input"

    assert by == {i: released_by(i) for i, _ in expected}
    if sent and report.plan is not None and report.plan.final is not None:
        # the next run continues from the watermark the batches made, not from the end (a
        # run that never had a row to release committed nothing: no state, nothing to keep)
        state = last_state(
            output_table=opts.output_table,
            pending_table=opts.pending_table,
            dead_letter_table=opts.dead_letter_table,
            pipeline_id=opts.pipeline_id,
        )
        assert state is not None and state.combined == report.plan.combined


def test_the_end_of_input_waits_for_the_build_watermark_unless_the_build_side_is_complete(
    spark, tmp_path
):
    # the build table is still being written: its watermark (9) says nothing about later
    # times, so the end of input releases rows up to 9 only; a backfill against a finished
    # dimension says so (build_complete) and gets everything
    opts = _options(tmp_path, join_type="left", until_complete=True)
    write_build_table(
        spark,
        opts.build_table,
        [Version("a", 1, "1", "r", 10), Version("a", 20, "2", "u", 11)],
        watermark_ms=9,
    )
    rows = [ProbeRow(1, "a", 5), ProbeRow(2, "a", 25), ProbeRow(3, "a", 30)]
    report = TemporalJoin(opts).process(_probe(spark, rows), 0)
    assert (report.released, report.pending) == (1, 2)
    assert _pending_ids(spark, opts) == [2, 3]
    complete = opts.model_copy(update={"build_complete": True})
    report = TemporalJoin(complete).process(_probe(spark, []), 1)
    assert (report.released, report.pending) == (2, 0)
    assert_rows_equal(_output(spark, opts), [(1, 10), (2, 11), (3, 11)])
    out = {
        r.id: (r._released_by, r._watermark) for r in delta.read(spark, opts.output_table).collect()
    }
    assert out[2] == ("end_of_input", None) and out[1][0] == "watermark"


def test_processing_time_waits_for_snapshot_then_joins_latest(spark, tmp_path):
    # FLINK-19830: probe rows processed before the build snapshot completes must not be joined
    # against a half-loaded dimension; they wait, then all join the latest version
    opts = _options(tmp_path, mode="proctime", watermark="none", probe_time=None)
    half = [Version("a", 1, "1", "r", 10)]
    write_build_table(spark, opts.build_table, half, complete=False)
    op = TemporalJoin(opts)
    report = op.process(_probe(spark, [ProbeRow(1, "a", 5), ProbeRow(2, "b", 6)]), 0)
    assert (report.released, report.pending) == (0, 2)
    assert _output(spark, opts) == []
    # the rest of the snapshot arrives, still no marker: still nothing
    write_build_table(
        spark, opts.build_table, [Version("b", 2, "2", "r", 20)], complete=False, batch_id=1
    )
    assert op.process(_probe(spark, [ProbeRow(3, "a", 7)]), 1).released == 0
    # a log-phase update then the marker: everything joins the latest version
    write_build_table(
        spark, opts.build_table, [Version("a", 3, "3", "u", 11)], complete=True, batch_id=2
    )
    report = op.process(_probe(spark, [ProbeRow(4, "b", 8)]), 2)
    assert (report.released, report.matched, report.pending) == (4, 4, 0)
    assert_rows_equal(_output(spark, opts), [(1, 11), (2, 20), (3, 11), (4, 20)])
    completed = int(delta.get_properties(opts.build_table)["lakehouse.snapshot.completedVersion"])
    versions = {r._build_version for r in delta.read(spark, opts.output_table).collect()}
    assert min(versions) >= completed


def test_rowtime_holds_everything_before_snapshot_marker(spark, tmp_path):
    opts = _options(tmp_path)
    write_build_table(
        spark,
        opts.build_table,
        [Version("a", 1, "1", "r", 10)],
        complete=False,
        watermark_ms=10**12,
    )
    report = TemporalJoin(opts).process(
        _probe(spark, [ProbeRow(1, "a", 5), ProbeRow(2, "a", 50)]), 0
    )
    assert (report.released, report.pending) == (0, 2)


def test_replayed_batch_is_a_no_op(spark, tmp_path):
    opts = _options(tmp_path, join_type="left")
    write_build_table(spark, opts.build_table, [Version("a", 1, "1", "r", 10)], watermark_ms=10**12)
    op = TemporalJoin(opts)
    rows = [ProbeRow(1, "a", 5), ProbeRow(2, "a", 9), ProbeRow(3, "a", 100)]
    op.process(_probe(spark, rows), 0)
    versions = (delta.latest_version(opts.output_table), delta.latest_version(opts.pending_table))
    assert op.process(_probe(spark, rows), 0).skipped
    assert (
        delta.latest_version(opts.output_table),
        delta.latest_version(opts.pending_table),
    ) == versions
    # probe watermark is 100 - 0 - 1 = 99: rows at 5 and 9 were released, 100 waits
    assert_rows_equal(_output(spark, opts), [(1, 10), (2, 10)])
    assert _pending_ids(spark, opts) == [3]


def test_crash_between_output_and_pending_replays_with_recorded_plan(spark, tmp_path, monkeypatch):
    opts = _options(tmp_path, join_type="left")
    write_build_table(spark, opts.build_table, [Version("a", 1, "1", "r", 10)], watermark_ms=10**12)
    rows = [ProbeRow(1, "a", 5), ProbeRow(2, "a", 8), ProbeRow(3, "a", 100)]
    clock = ManualClock(1_000_000)
    op = TemporalJoin(opts, clock=clock)

    import lakehouse.join.operator as operator_module

    real_overwrite = operator_module.delta.overwrite

    def crash(*args, **kwargs):
        raise RuntimeError("killed between the output and the pending write")

    monkeypatch.setattr(operator_module.delta, "overwrite", crash)
    with pytest.raises(RuntimeError):
        op.process(_probe(spark, rows), 0)
    monkeypatch.setattr(operator_module.delta, "overwrite", real_overwrite)
    # the build table moves on and the clock too: the replay must still decide as before
    write_build_table(
        spark, opts.build_table, [Version("a", 2, "2", "u", 11)], batch_id=1, watermark_ms=10**12
    )
    clock.advance(60_000)
    report = op.process(_probe(spark, rows), 0)
    assert report.replayed_plan
    # probe watermark 99: rows at 5 and 8 released once (by the first attempt), as of version
    # 0 of the build table even though a newer one exists now
    assert_rows_equal(_output(spark, opts), [(1, 10), (2, 10)])
    assert _pending_ids(spark, opts) == [3]


@pytest.mark.parametrize("policy", ["join", "dead-letter"])
def test_late_rows_are_joined_or_dead_lettered_by_policy(spark, tmp_path, policy):
    opts = _options(tmp_path, join_type="left", late_policy=policy)
    write_build_table(spark, opts.build_table, [Version("a", 1, "1", "r", 10)], watermark_ms=10**12)
    op = TemporalJoin(opts)
    op.process(_probe(spark, [ProbeRow(1, "a", 50)]), 0)  # watermark 49
    # row 2 arrives with time 20 <= 49: late. Row 3 at 60 is on time; the watermark moves to
    # 59, which releases row 1 (50); row 3 waits.
    report = op.process(_probe(spark, [ProbeRow(2, "a", 20), ProbeRow(3, "a", 60)]), 1)
    if policy == "join":
        assert report.late == 0
        assert_rows_equal(_output(spark, opts), [(1, 10), (2, 10)])  # 2 joined as of 20
        # ... and says it was late; the quality report counts it
        by = {r.id: r._released_by for r in delta.read(spark, opts.output_table).collect()}
        assert by == {1: "watermark", 2: "late"}
        from lakehouse.quality import run_quality_report

        quality = run_quality_report(spark, opts, report_dir=tmp_path / "quality")
        matched = next(c for c in quality.checks if c.name == "output_matched")
        assert matched.observed["late"] == 1 and "1 released late" in matched.message
    else:
        assert (report.late, report.dead_lettered) == (1, 1)
        assert_rows_equal(_output(spark, opts), [(1, 10)])
        dead = delta.read(spark, opts.dead_letter_table).collect()
        assert [(r._error_kind, r._offset) for r in dead] == [("late", 0)]
        assert b'"id": 2' in dead[0]._raw_value
    assert _pending_ids(spark, opts) == [3]


@pytest.mark.parametrize("policy", ["release", "dead-letter"])
def test_pending_rows_expire_after_ttl(spark, tmp_path, policy):
    # processing time waiting for a snapshot that never completes: the TTL lets rows go
    opts = _options(
        tmp_path,
        mode="proctime",
        watermark="none",
        probe_time=None,
        join_type="inner",
        pending_ttl_ms=60_000,
        expiry_policy=policy,
    )
    write_build_table(spark, opts.build_table, [Version("a", 1, "1", "r", 10)], complete=False)
    clock = ManualClock(1_000_000)
    op = TemporalJoin(opts, clock=clock)
    op.process(_probe(spark, [ProbeRow(1, "a", 5)]), 0)
    clock.advance(30_000)
    assert op.process(_probe(spark, [ProbeRow(2, "a", 6)]), 1).expired == 0  # 30 s: waits
    # triggers while the TTLs run and nothing moves commit nothing: no version per tick
    before = delta.latest_version(opts.pending_table)
    for batch in (2, 3):
        clock.advance(10_000)
        assert op.process(_probe(spark, []), batch).pending == 2
    assert delta.latest_version(opts.pending_table) == before
    assert not delta.table_exists(opts.output_table)
    clock.advance(10_000)
    report = op.process(_probe(spark, []), 4)  # row 1 has waited 60 s, row 2 only 30 s
    assert report.expired == 1
    assert _pending_ids(spark, opts) == [2]
    if policy == "release":
        # released by its TTL, it is joined all the same: the best answer the table holds
        rows = delta.read(spark, opts.output_table).collect()
        assert [(r.id, r._matched, r.value, r._released_by) for r in rows] == [
            (1, True, 10, "expiry")
        ]
    else:
        assert _output(spark, opts) == []
        assert [r._error_kind for r in delta.read(spark, opts.dead_letter_table).collect()] == [
            "expired"
        ]


def test_an_expiring_row_is_joined_as_of_its_time_and_the_watermark_wins_over_expiry(
    spark, tmp_path
):
    # row time; the build watermark (9) holds both rows back until their TTL runs out. In
    # the batch where it does, the build watermark moves to 30: row 1 (t=15) is covered and
    # released by the watermark; row 2 (t=40) is not, and its TTL releases it, joined as of
    # 40 like any row (not blanked)
    opts = _options(tmp_path, join_type="inner", pending_ttl_ms=60_000)
    write_build_table(
        spark,
        opts.build_table,
        [Version("a", 1, "1", "r", 10), Version("a", 20, "2", "u", 11)],
        watermark_ms=9,
    )
    clock = ManualClock(1_000_000)
    op = TemporalJoin(opts, clock=clock)
    assert op.process(_probe(spark, [ProbeRow(1, "a", 15), ProbeRow(2, "a", 40)]), 0).pending == 2
    write_build_table(spark, opts.build_table, [], watermark_ms=30, batch_id=1)
    clock.advance(60_000)
    report = op.process(_probe(spark, []), 1)
    assert (report.released, report.expired, report.pending) == (2, 1, 0)
    rows = delta.read(spark, opts.output_table).collect()
    assert sorted((r.id, r.value, r._matched, r._released_by) for r in rows) == [
        (1, 10, True, "watermark"),
        (2, 11, True, "expiry"),
    ]


def test_idle_build_table_stops_holding_back_the_watermark(spark, tmp_path):
    # the build watermark is stuck at 9 (no new changes); the probe is at 99
    opts = _options(tmp_path, build_idle_timeout_ms=60_000)
    write_build_table(spark, opts.build_table, [Version("a", 1, "1", "r", 10)], watermark_ms=9)

    last_commit = delta.history(opts.build_table, limit=1)[0].timestamp_ms
    clock = ManualClock(last_commit + 1_000)
    op = TemporalJoin(opts, clock=clock)
    report = op.process(
        _probe(spark, [ProbeRow(1, "a", 5), ProbeRow(2, "a", 50), ProbeRow(3, "a", 100)]), 0
    )
    assert report.released == 1  # only ts 5 <= build watermark 9
    clock.advance(60_000)  # a minute without build commits: the build input is idle
    report = op.process(_probe(spark, []), 1)
    assert report.plan.build_status.name == "IDLE"
    assert report.released == 1  # ts 50 <= probe watermark 99; 100 still waits
    assert _pending_ids(spark, opts) == [3]


def test_malformed_probe_records_are_dead_lettered_and_batch_goes_on(spark, tmp_path):
    opts = _options(tmp_path, join_type="left")
    write_build_table(spark, opts.build_table, [Version("a", 1, "1", "r", 10)], watermark_ms=10**12)
    raw = raw_records(
        spark,
        [
            {"id": 1, "k": "a", "ts": 5},
            "{not json",
            {"id": 2, "ts": 3},
            {"id": 3, "k": "a", "ts": "yesterday"},
            {"id": 4, "k": "a", "ts": 9},
        ],
    )
    report = TemporalJoin(opts).process(raw, 0)
    assert (report.arrived, report.dead_lettered) == (2, 3)
    dead = {
        r._offset: (r._error_kind, r._error)
        for r in delta.read(spark, opts.dead_letter_table).collect()
    }
    assert dead[1][0] == "malformed_json"
    assert dead[2] == ("missing_field", "required column 'k' is missing or NULL")
    # a JSON object whose value contradicts probe_schema names the column and the value
    assert dead[3] == (
        "schema_mismatch",
        "column 'ts' holds 'yesterday', which probe_schema reads as bigint",
    )
    assert_rows_equal(_output(spark, opts), [(1, 10)])  # 4 (ts 9 > wm 8) waits


def test_options_are_validated_before_any_spark_work(tmp_path):
    from pydantic import ValidationError

    from lakehouse.errors import ConfigError

    with pytest.raises(ConfigError, match="join setting 'probe_time': row-time joins need"):
        _options(tmp_path, probe_time=None)
    with pytest.raises(ValidationError, match="mode\n  Input should be 'rowtime' or 'proctime'"):
        _options(tmp_path, mode="eventtime")
    with pytest.raises(ConfigError, match="four different locations"):
        _options(tmp_path, pending_table=str(tmp_path / "out"))
