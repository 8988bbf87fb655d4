"""The numpy as-of kernel against the plain-Python reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import Version, as_of

from lakehouse.join.kernel import LATEST, asof_match

KEYS = st.sampled_from(["a", "b", "c"])
#: (key, time) probe rows; a None time is LATEST
PROBES = st.lists(
    st.tuples(st.one_of(KEYS, st.just("never-seen")), st.one_of(st.none(), st.integers(-2, 22))),
    max_size=30,
)


@st.composite
def histories(draw):
    """Build rows with colliding times and seqs, deletes, re-inserts and truncates."""
    n = draw(st.integers(0, 25))
    rows = []
    for i in range(n):
        op = draw(
            st.sampled_from(["r", "c", "u", "d", "c", "u", "t"] if i % 7 else ["r", "c", "u", "d"])
        )
        key = None if op == "t" else draw(KEYS)
        rows.append(
            Version(
                key=key,
                time=draw(st.integers(0, 20)),
                seq=f"{draw(st.integers(0, 30)):05d}.{i:05d}",
                op=op,
                value=i,
            )
        )
    return rows


def _run(versions, probes, threads=1):
    build = [v for v in versions if v.op != "t"]
    trunc = [v for v in versions if v.op == "t"]
    idx = asof_match(
        probe_keys=[np.array([k for k, _ in probes], dtype=object)],
        probe_time=np.array([LATEST if t is None else t for _, t in probes], dtype=np.int64),
        build_keys=[np.array([v.key for v in build], dtype=object)],
        build_time=np.array([v.time for v in build], dtype=np.int64),
        build_seq=np.array([v.seq for v in build], dtype=object),
        build_is_delete=np.array([v.op == "d" for v in build], dtype=bool),
        truncate_time=np.array([v.time for v in trunc], dtype=np.int64),
        truncate_seq=np.array([v.seq for v in trunc], dtype=object),
        threads=threads,
    )
    return [None if i < 0 else build[i].value for i in idx]


@settings(max_examples=300, deadline=None)
@given(
    versions=histories(),
    probes=PROBES,
)
def test_asof_matches_linear_scan(versions, probes):
    expected = [None if (v := as_of(versions, k, t)) is None else v.value for k, t in probes]
    assert _run(versions, probes) == expected


@settings(max_examples=150, deadline=None)
@given(
    versions=histories(),
    probes=PROBES,
    threads=st.integers(2, 4),
)
def test_threaded_sort_and_search_give_the_single_thread_answer(versions, probes, threads):
    # The slices only pay off on large inputs; force them onto these small ones so the
    # slicing and the two-part sort are exercised against the reference.
    import lakehouse.join.kernel as kernel

    saved = kernel._PARALLEL_MIN_ROWS
    kernel._PARALLEL_MIN_ROWS = 0
    try:
        threaded = _run(versions, probes, threads=threads)
    finally:
        kernel._PARALLEL_MIN_ROWS = saved
    expected = [None if (v := as_of(versions, k, t)) is None else v.value for k, t in probes]
    assert threaded == expected


def test_worked_example_delete_ends_version_and_reinsert_starts_new_one():
    versions = [
        Version("a", 1, "1", "c", "v1"),
        Version("a", 4, "2", "u", "v4"),
        Version("a", 7, "3", "u", "v7"),
        Version("a", 9, "4", "d", "v9"),
        Version("a", 12, "5", "c", "v12"),
    ]
    probes = [("a", t) for t in (0, 1, 6, 7, 8, 9, 11, 12, 13)] + [("a", None)]
    assert _run(versions, probes) == [None, "v1", "v4", "v7", "v7", None, None, "v12", "v12", "v12"]


def test_equal_start_is_broken_by_seq_later_change_wins():
    versions = [Version("a", 5, "0002", "u", "second"), Version("a", 5, "0001", "c", "first")]
    assert _run(versions, [("a", 5), ("a", None)]) == ["second", "second"]


def test_truncate_ends_every_open_version_but_not_later_inserts():
    versions = [
        Version("a", 1, "1", "c", "a1"),
        Version("b", 2, "2", "c", "b2"),
        Version(None, 5, "3", "t"),
        Version("b", 6, "4", "c", "b6"),
    ]
    assert _run(versions, [("a", 4), ("a", 5), ("b", 5), ("b", 6), ("a", None), ("b", None)]) == [
        "a1",
        None,
        None,
        "b6",
        None,
        "b6",
    ]


def test_multi_column_keys_match_on_the_whole_tuple():
    idx = asof_match(
        probe_keys=[np.array(["x", "x", "y"], dtype=object), np.array([1, 2, 1], dtype=object)],
        probe_time=np.array([10, 10, 10]),
        build_keys=[np.array(["x", "x", "y"], dtype=object), np.array([2, 1, 2], dtype=object)],
        build_time=np.array([0, 0, 0]),
        build_seq=np.array(["1", "2", "3"], dtype=object),
        build_is_delete=np.zeros(3, dtype=bool),
    )
    assert idx.tolist() == [1, 0, -1]


def test_null_probe_key_never_matches():
    idx = asof_match(
        probe_keys=[np.array([None, "a"], dtype=object)],
        probe_time=np.array([5, 5]),
        build_keys=[np.array(["a"], dtype=object)],
        build_time=np.array([0]),
        build_seq=np.array(["1"], dtype=object),
        build_is_delete=np.array([False]),
    )
    assert idx.tolist() == [-1, 0]


def test_keys_with_many_versions_and_few_give_the_reference_in_one_lookup():
    # "long" has more versions than the run-local comparison steps, so its rows are
    # binary-searched while "short"'s rows are compared within their run, in the same call
    from lakehouse.join import kernel

    versions = [Version("long", t, f"{t:03d}", "u", t) for t in range(0, 3 * kernel._LOCAL_STEPS)]
    versions += [Version("short", 5, "900", "r", 500), Version("short", 9, "901", "d", 501)]
    probes = [
        (k, t) for k in ("long", "short", "none") for t in range(-1, 3 * kernel._LOCAL_STEPS + 2)
    ]
    expected = [None if (v := as_of(versions, k, t)) is None else v.value for k, t in probes]
    assert _run(versions, probes) == expected
