"""The temporal join operator on real Spark and real Delta tables, against the reference."""

from __future__ import annotations

import itertools

import pytest
from helpers import assert_rows_equal, raw_records, write_build_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import ProbeRow, Version, rowtime_join

from lakehouse import delta
from lakehouse.join import JoinOptions, TemporalJoin
from lakehouse.time import ManualClock

pytestmark = pytest.mark.spark

PROBE_SCHEMA = "id bigint, k string, ts bigint"


def _options(tmp, **kw) -> JoinOptions:
    base = dict(
        build_uri=str(tmp / "build"),
        output_uri=str(tmp / "out"),
        pending_uri=str(tmp / "pending"),
        dead_letter_uri=str(tmp / "dlq"),
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
    if not delta.table_exists(opts.output_uri):
        return []
    return [(r.id, r.value) for r in delta.read(spark, opts.output_uri).collect()]


def _pending_ids(spark, opts):
    return sorted(r.id for r in delta.read(spark, opts.pending_uri).select("id").collect())


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
    write_build_table(spark, opts.build_uri, versions, watermark_ms=10**12)
    op = TemporalJoin(opts, num_buckets=2)
    bounds = [0, *cuts, len(probes)]
    for batch_id, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        op.process(_probe(spark, [p for p in probes[lo:hi] if p.key is not None]), batch_id)
    sent = [p for p in probes if p.key is not None]
    final_wm = max(p.time for p in sent) - ooo - 1 if sent else -(2**63)
    expected, pending = rowtime_join(sent, versions, watermark=final_wm, left=left)
    assert_rows_equal(_output(spark, opts), expected)
    assert _pending_ids(spark, opts) == sorted(pending)


def test_processing_time_waits_for_snapshot_then_joins_latest(spark, tmp_path):
    # FLINK-19830: probe rows processed before the build snapshot completes must not be joined
    # against a half-loaded dimension; they wait, then all join the latest version
    opts = _options(tmp_path, mode="proctime", watermark="none", probe_time=None)
    half = [Version("a", 1, "1", "r", 10)]
    write_build_table(spark, opts.build_uri, half, complete=False)
    op = TemporalJoin(opts)
    report = op.process(_probe(spark, [ProbeRow(1, "a", 5), ProbeRow(2, "b", 6)]), 0)
    assert (report.released, report.pending) == (0, 2)
    assert _output(spark, opts) == []
    # the rest of the snapshot arrives, still no marker: still nothing
    write_build_table(
        spark, opts.build_uri, [Version("b", 2, "2", "r", 20)], complete=False, batch_id=1
    )
    assert op.process(_probe(spark, [ProbeRow(3, "a", 7)]), 1).released == 0
    # a log-phase update then the marker: everything joins the latest version
    write_build_table(
        spark, opts.build_uri, [Version("a", 3, "3", "u", 11)], complete=True, batch_id=2
    )
    report = op.process(_probe(spark, [ProbeRow(4, "b", 8)]), 2)
    assert (report.released, report.matched, report.pending) == (4, 4, 0)
    assert_rows_equal(_output(spark, opts), [(1, 11), (2, 20), (3, 11), (4, 20)])
    completed = int(delta.get_properties(opts.build_uri)["lakehouse.snapshot.completedVersion"])
    versions = {r._build_version for r in delta.read(spark, opts.output_uri).collect()}
    assert min(versions) >= completed


def test_rowtime_holds_everything_before_snapshot_marker(spark, tmp_path):
    opts = _options(tmp_path)
    write_build_table(
        spark, opts.build_uri, [Version("a", 1, "1", "r", 10)], complete=False, watermark_ms=10**12
    )
    report = TemporalJoin(opts).process(
        _probe(spark, [ProbeRow(1, "a", 5), ProbeRow(2, "a", 50)]), 0
    )
    assert (report.released, report.pending) == (0, 2)


def test_replayed_batch_is_a_no_op(spark, tmp_path):
    opts = _options(tmp_path, join_type="left")
    write_build_table(spark, opts.build_uri, [Version("a", 1, "1", "r", 10)], watermark_ms=10**12)
    op = TemporalJoin(opts)
    rows = [ProbeRow(1, "a", 5), ProbeRow(2, "a", 9), ProbeRow(3, "a", 100)]
    op.process(_probe(spark, rows), 0)
    versions = (delta.latest_version(opts.output_uri), delta.latest_version(opts.pending_uri))
    assert op.process(_probe(spark, rows), 0).skipped
    assert (
        delta.latest_version(opts.output_uri),
        delta.latest_version(opts.pending_uri),
    ) == versions
    # probe watermark is 100 - 0 - 1 = 99: rows at 5 and 9 were released, 100 waits
    assert_rows_equal(_output(spark, opts), [(1, 10), (2, 10)])
    assert _pending_ids(spark, opts) == [3]


def test_crash_between_output_and_pending_replays_with_recorded_plan(spark, tmp_path, monkeypatch):
    opts = _options(tmp_path, join_type="left")
    write_build_table(spark, opts.build_uri, [Version("a", 1, "1", "r", 10)], watermark_ms=10**12)
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
        spark, opts.build_uri, [Version("a", 2, "2", "u", 11)], batch_id=1, watermark_ms=10**12
    )
    clock.advance(60_000)
    report = op.process(_probe(spark, rows), 0)
    assert report.replayed_plan
    # probe watermark 99: rows at 5 and 8 released once (by the first attempt), as of version
    # 0 of the build table even though a newer one exists now
    assert_rows_equal(_output(spark, opts), [(1, 10), (2, 10)])
    assert _pending_ids(spark, opts) == [3]
