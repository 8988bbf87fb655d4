"""Both row-time execution paths of ``join_as_of`` (narrow Arrow UDF, shuffle cogroup) on real
Spark and real Delta tables, against the plain-Python reference, and the path choice."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from helpers import assert_rows_equal, raw_records, write_build_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from reference import ProbeRow, Version, as_of

from lakehouse import delta
from lakehouse.dimension.layout import OP
from lakehouse.join import JoinOptions, TemporalJoin
from lakehouse.join.asof import (
    NARROW_MAX_BUILD_ROWS_CONF,
    PROBE_TIME_US,
    NarrowPathUnavailable,
    join_as_of,
    plan_narrow,
)

pytestmark = pytest.mark.spark

BUILD_DDL = "region string, id bigint, value bigint, _op string, _event_time timestamp, _seq string"
OUT = ["pid", "region", "id", "value", "_event_time", "_matched"]


def _write_build(spark, uri, versions, batch_id=0):
    """Append versions with a two-column key (``region``, ``id``); ``Version.key`` is the
    tuple, None for a truncate."""
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(BUILD_DDL)
    rows = [
        (
            *(v.key if v.key is not None else (None, None)),
            v.value,
            v.op,
            datetime.fromtimestamp(v.time / 1000, UTC),
            v.seq,
        )
        for v in versions
    ]
    delta.append(spark.createDataFrame(rows, schema), uri, txn=("paths-test", batch_id))


def _released(spark, probes):
    rows = [(p.id, *(p.key if p.key is not None else (None, None)), p.time * 1000) for p in probes]
    return spark.createDataFrame(rows, f"pid bigint, region string, id int, {PROBE_TIME_US} bigint")


def _join(released, build, path, left=True):
    joined = join_as_of(
        released,
        build,
        probe_key=["region", "id"],
        build_key=["region", "id"],
        value_columns=["value"],
        output_names=OUT,
        latest=False,
        num_buckets=2,
        path=path,
    )
    return joined


def _expected(probes, versions):
    out = []
    for p in probes:
        key = None if p.key is None or None in p.key else p.key
        v = as_of(versions, key, p.time)
        out.append((p.id, None if v is None else v.value, v is not None))
    return out


def _plan_text(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


KEYS = st.sampled_from([("eu", 1), ("eu", 2), ("us", 1)])


@st.composite
def histories(draw):
    versions = []
    for i in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(["r", "c", "u", "u", "d", "t"] if i else ["r"]))
        versions.append(
            Version(
                None if op == "t" else draw(KEYS),
                draw(st.integers(0, 20)),
                f"{draw(st.integers(0, 9))}.{i:03d}",  # equal starts: seq breaks the tie
                op,
                value=100 + i,
            )
        )
    probe_keys = st.one_of(KEYS, st.just(("eu", 9)), st.just(("eu", None)), st.just((None, 1)))
    probes = [
        ProbeRow(i, draw(probe_keys), draw(st.integers(-1, 25)))
        for i in range(draw(st.integers(1, 12)))
    ]
    cut = draw(st.integers(1, len(versions)))  # the first version has files
    return versions[:cut], versions[cut:], probes


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=histories())
def test_narrow_and_shuffle_paths_give_the_reference_rows(spark, tmp_path_factory, case):
    # multi-column keys, NULL key parts, deletes, truncates, seq tie-breaks; the build is
    # written as two Delta versions and joined at both, so the narrow path meets a second
    # file set (a superset) after the first
    first, second, probes = case
    uri = str(tmp_path_factory.mktemp("b") / "build")
    released = _released(spark, probes)
    seen: list[Version] = []
    for batch_id, versions in enumerate([first, second]):
        _write_build(spark, uri, versions, batch_id)
        seen += versions
        snap = delta.snapshot(uri)
        build = delta.read_files(spark, snap, version=snap.version)
        expected = _expected(probes, seen)
        results = {}
        for path in ("narrow", "shuffle"):
            df = _join(released, build, path)
            results[path] = df.schema
            rows = [(r.pid, r.value, r._matched) for r in df.collect()]
            assert_rows_equal(rows, expected)
        assert results["narrow"] == results["shuffle"]  # names, types, nullability, order


def test_auto_takes_the_narrow_path_for_a_delta_version_and_falls_back_otherwise(spark, tmp_path):
    uri = str(tmp_path / "build")
    versions = [
        Version(("eu", 1), 1, "1", "r", 10),
        Version(("eu", 1), 5, "2", "u", 11),
        Version(("us", 1), 2, "3", "r", 20),
    ]
    _write_build(spark, uri, versions)
    probes = [ProbeRow(1, ("eu", 1), 4), ProbeRow(2, ("eu", 1), 6), ProbeRow(3, ("us", 1), 0)]
    released = _released(spark, probes)
    expected = _expected(probes, versions)
    # the join reads a pinned version by its files (a plain parquet scan) when Delta allows;
    # Delta's own scan of the same version takes the shuffle path
    snap = delta.snapshot(uri)
    assert (
        plan_narrow(delta.read(spark, uri), build_key=["region", "id"], value_columns=["value"])[0]
        is None
    )
    build = delta.read_files(spark, snap, version=snap.version)

    narrow, reason = plan_narrow(build, build_key=["region", "id"], value_columns=["value"])
    assert narrow is not None and reason == ""
    assert narrow.rows == 3 and narrow.files == tuple(sorted(build.inputFiles()))
    auto = _join(released, build, "auto")
    # an Arrow UDF over the keys, or on pyspark 4.0 (no arrow_udf) the same lookup in mapInArrow
    narrow_node = "ArrowEvalPython" if hasattr(F, "arrow_udf") else "MapInArrow"
    assert narrow_node in _plan_text(auto)
    assert "CoGroup" not in _plan_text(auto) and "Exchange" not in _plan_text(auto)
    assert_rows_equal([(r.pid, r.value, r._matched) for r in auto.collect()], expected)

    # a build that is not a plain scan of files (here: filtered) takes the shuffle path
    filtered = build.filter(build[OP] != "x")
    assert plan_narrow(filtered, build_key=["region", "id"], value_columns=["value"])[0] is None
    fallback = _join(released, filtered, "auto")
    assert "FlatMapCoGroupsInArrow" in _plan_text(fallback)
    assert_rows_equal([(r.pid, r.value, r._matched) for r in fallback.collect()], expected)
    with pytest.raises(NarrowPathUnavailable, match="not a plain parquet scan"):
        _join(released, filtered, "narrow")

    # so does a build above the size bound
    spark.conf.set(NARROW_MAX_BUILD_ROWS_CONF, "2")
    try:
        plan, why = plan_narrow(build, build_key=["region", "id"], value_columns=["value"])
        assert plan is None and "3 rows, more than 2" in why
        assert "FlatMapCoGroupsInArrow" in _plan_text(_join(released, build, "auto"))
    finally:
        spark.conf.unset(NARROW_MAX_BUILD_ROWS_CONF)


def test_unreadable_file_uri_is_refused_before_any_spark_work():
    # the driver opens every build file with pyarrow before choosing the narrow path; a
    # scheme pyarrow has no filesystem for (Databricks' dbfs:/) raises there, so the
    # join takes the shuffle path instead of failing in the workers
    import pyarrow as pa

    from lakehouse.join.asof.narrow import _FOOTERS

    with pytest.raises(pa.ArrowInvalid, match=r"(?i)unrecognized filesystem"):
        _FOOTERS.rows("dbfs:/tables/build/part-0.parquet")


def _options(tmp, **kw) -> JoinOptions:
    return JoinOptions(
        build_table=str(tmp / "build"),
        output_table=str(tmp / "out"),
        pending_table=str(tmp / "pending"),
        dead_letter_table=str(tmp / "dlq"),
        pipeline_id="paths-test",
        probe_schema="id bigint, k string, ts bigint",
        probe_key=("k",),
        probe_time="ts",
        probe_id="id",
        join_type="left",
        **kw,
    )


@pytest.mark.parametrize("path", ["narrow", "shuffle"])
def test_second_batch_at_a_later_build_version_joins_the_new_versions(spark, tmp_path, path):
    # the operator on both paths (shuffle forced by a bound of 0). Batch 1 repeats batch 0's
    # (key, time) pairs (late rows are joined as of their time) against a later build
    # version that changes their answers: an index cached for batch 0's file set must not
    # answer batch 1
    opts = _options(tmp_path)
    v1 = [
        Version("a", 1, "01", "r", 10),
        Version("b", 1, "02", "r", 20),
        Version("c", 3, "03", "r", 30),
    ]
    v2 = [
        Version("a", 4, "04", "u", 11),  # a new version of a from 4
        Version("b", 1, "05", "u", 21),  # same start as b's first version, later seq: wins
        Version("c", 6, "06", "d", 31),  # c deleted from 6
        Version(None, 8, "07", "t", None),  # everything truncated at 8
        Version("a", 9, "08", "c", 12),  # a re-inserted after the truncate
    ]
    times = [0, 2, 5, 7, 8, 10]
    probes = [ProbeRow(i, k, t) for i, (k, t) in enumerate(itertools.product("abcz", times))]
    pusher = ProbeRow(999, "z", 1000)  # moves the probe watermark past every other row

    if path == "shuffle":
        spark.conf.set(NARROW_MAX_BUILD_ROWS_CONF, "0")
    try:
        write_build_table(spark, opts.build_table, v1, watermark_ms=10**12)
        op = TemporalJoin(opts, num_buckets=2)
        batch = [*probes, pusher]
        op.process(raw_records(spark, [{"id": p.id, "k": p.key, "ts": p.time} for p in batch]), 0)
        write_build_table(spark, opts.build_table, v2, watermark_ms=10**12, batch_id=1)
        later = [ProbeRow(p.id + 100, p.key, p.time) for p in probes]
        op.process(raw_records(spark, [{"id": p.id, "k": p.key, "ts": p.time} for p in later]), 1)
    finally:
        spark.conf.unset(NARROW_MAX_BUILD_ROWS_CONF)

    def joined(rows, versions):
        return [(p.id, (v.value if (v := as_of(versions, p.key, p.time)) else None)) for p in rows]

    expected = joined(probes, v1) + joined(later, v1 + v2)
    out = [(r.id, r.value) for r in delta.read(spark, opts.output_table).collect() if r.id != 999]
    assert_rows_equal(out, expected)
    assert joined(later, v1 + v2) != joined(later, v1)  # the second version matters
