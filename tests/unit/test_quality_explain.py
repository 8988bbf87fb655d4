"""The reasons of the unmatched-rows table (lakehouse.quality.explain) against the reference
semantics (tests/reference.py) on generated build histories."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakehouse.quality.explain import (
    PENDING_REASONS,
    REASONS,
    Change,
    explain_pending,
    explain_unmatched,
)
from lakehouse.time import WATERMARK_MAX, WATERMARK_MIN, Watermark
from tests.reference import Version, as_of

KEYS = ("a", "b")


@st.composite
def histories(draw: st.DrawFn) -> list[Version]:
    n = draw(st.integers(0, 8))
    out = []
    for i in range(n):
        op = draw(st.sampled_from("rcudt"))
        key = None if op == "t" else draw(st.sampled_from(KEYS))
        # few distinct times, so equal starts (ordered by seq) occur
        out.append(Version(key, draw(st.integers(0, 6)) * 1_000, f"{i:03d}", op))
    return out


def _changes(versions: list[Version], key: str) -> tuple[list[Change], list[Change]]:
    changes = [Change(v.time * 1000, v.seq, v.op) for v in versions if v.key == key]
    truncates = [Change(v.time * 1000, v.seq, "t") for v in versions if v.op == "t"]
    return changes, truncates


@given(histories(), st.sampled_from(KEYS), st.none() | st.integers(-1, 7).map(lambda t: t * 1000))
def test_the_reason_agrees_with_the_join_semantics(versions, key, t_ms):
    changes, truncates = _changes(versions, key)
    e = explain_unmatched(
        time_us=None if t_ms is None else t_ms * 1000,
        key_is_null=False,
        changes=changes,
        truncates=truncates,
        build_version=3,
    )
    match = as_of(versions, key, t_ms)
    # the one reason that says "it should have matched" is given exactly when it does
    assert (e.reason == "matches_at_its_version") == (match is not None)
    if not changes:
        assert e.reason == "key_never_in_dimension"
    elif t_ms is not None and all(c.time_us > t_ms * 1000 for c in changes):
        assert e.reason == "before_first_version"
    if e.reason == "deleted":
        latest = max(
            (c for c in changes if t_ms is None or c.time_us <= t_ms * 1000),
            key=lambda c: (c.time_us, c.seq),
        )
        assert latest.op == "d"
    assert e.reason in REASONS and e.reason not in PENDING_REASONS
    assert "build version 3" in e.detail or e.reason == "no_key"


def test_each_unmatched_reason_names_its_evidence():
    first = Change(10_000_000, "5", "c", "cdc/0@12")
    deleted = Change(20_000_000, "9", "d", "cdc/0@40")
    truncate = Change(15_000_000, "7", "t", "cdc/1@3")

    def why(t_s, changes, truncates=()):
        return explain_unmatched(
            time_us=None if t_s is None else t_s * 1_000_000,
            key_is_null=False,
            changes=changes,
            truncates=truncates,
            build_version=7,
        )

    assert why(5, []).reason == "key_never_in_dimension"
    e = why(5, [first])
    assert e.reason == "before_first_version"
    assert "1970-01-01T00:00:10.000Z (cdc/0@12)" in e.detail and "build version 7" in e.detail
    e = why(25, [first, deleted])
    assert e.reason == "deleted" and "1970-01-01T00:00:20.000Z (cdc/0@40)" in e.detail
    assert why(None, [first, deleted]).reason == "deleted"  # processing time: the latest
    e = why(17, [first], [truncate])
    assert e.reason == "truncated" and "cdc/1@3" in e.detail
    assert why(12, [first], [truncate]).reason == "matches_at_its_version"
    assert (
        explain_unmatched(time_us=1, key_is_null=True, changes=[first], build_version=7).reason
        == "no_key"
    )
    assert (
        "no build table"
        in explain_unmatched(time_us=1, key_is_null=False, changes=[], build_version=None).detail
    )


@pytest.mark.parametrize(
    ("t_ms", "marker", "combined", "probe", "build", "reason"),
    [
        (5_000, False, Watermark(9_000), Watermark(9_000), Watermark(9_000), "snapshot_incomplete"),
        (5_000, True, Watermark(9_000), Watermark(9_000), Watermark(9_000), "next_batch"),
        (
            5_000,
            True,
            Watermark(2_000),
            Watermark(9_000),
            Watermark(2_000),
            "build_watermark_behind",
        ),
        (
            5_000,
            True,
            Watermark(2_000),
            Watermark(2_000),
            Watermark(9_000),
            "probe_watermark_behind",
        ),
        (
            5_000,
            True,
            Watermark(WATERMARK_MIN),
            Watermark(WATERMARK_MIN),
            Watermark(WATERMARK_MIN),
            "build_watermark_behind",
        ),
        (
            5_000,
            True,
            Watermark(2_000),
            Watermark(2_000),
            Watermark(0, use_processing_time=True),
            "probe_watermark_behind",
        ),
        (
            None,
            True,
            Watermark(0, use_processing_time=True),
            Watermark(WATERMARK_MIN),
            Watermark(WATERMARK_MIN),
            "next_batch",
        ),
        (
            None,
            False,
            Watermark(WATERMARK_MAX),
            Watermark(WATERMARK_MAX),
            Watermark(WATERMARK_MAX),
            "snapshot_incomplete",
        ),
    ],
)
def test_pending_reasons(t_ms, marker, combined, probe, build, reason):
    e = explain_pending(
        time_ms=t_ms, marker_complete=marker, combined=combined, probe=probe, build=build
    )
    assert e.reason == reason and e.reason in PENDING_REASONS
    assert "None" not in e.detail and "-9223372036854775808" not in e.detail


@given(
    st.integers(0, 10_000),
    st.booleans(),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
)
def test_a_pending_row_waits_for_the_channel_that_is_behind(t, marker, probe_ts, build_ts):
    probe, build = Watermark(probe_ts), Watermark(build_ts)
    combined = Watermark(min(probe_ts, build_ts))
    e = explain_pending(
        time_ms=t, marker_complete=marker, combined=combined, probe=probe, build=build
    )
    if not marker:
        assert e.reason == "snapshot_incomplete"
    elif t <= combined.timestamp:
        assert e.reason == "next_batch"
    elif t > build_ts:
        assert e.reason == "build_watermark_behind"
    else:
        assert e.reason == "probe_watermark_behind" and t > probe_ts
