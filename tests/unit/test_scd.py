"""The SCD type 2 and current-state views agree with the join's as-of rule
(``tests/reference.py: as_of``) on every history: versions, deletes, truncates and equal
times ordered by ``_seq``. Run on DuckDB over Arrow (no Spark); the integration test
``test_sql.py`` runs the same views on both engines over a real build table."""

from __future__ import annotations

import duckdb
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import Version, as_of

from lakehouse.dimension.scd import views

KEYS = ["a", "b", "c"]


@st.composite
def histories(draw: st.DrawFn) -> list[Version]:
    n = draw(st.integers(0, 14))
    out = []
    for i in range(n):
        op = draw(st.sampled_from(["r", "c", "u", "u", "d", "t"]))
        key = None if op == "t" else draw(st.sampled_from(KEYS))
        time = draw(st.integers(0, 6))
        out.append(Version(key, time, f"{i:03d}", op, None if op in "dt" else i))
    return out


def _views(history: list[Version]) -> tuple[list[tuple], list[tuple]]:
    table = pa.table(
        {
            "k": pa.array([v.key for v in history], pa.string()),
            "v": pa.array([v.value for v in history], pa.int64()),
            "_op": pa.array([v.op for v in history], pa.string()),
            "_event_time": pa.array([v.time for v in history], pa.int64()),
            "_seq": pa.array([v.seq for v in history], pa.string()),
        }
    )
    con = duckdb.connect()
    con.register("prices", table)
    for name, query in views("prices", table.column_names, ["k"]).items():
        con.execute(f'CREATE VIEW "{name}" AS {query}')
    scd2 = con.sql(
        "SELECT k, v, valid_from, valid_to, is_current FROM prices_scd2 ORDER BY k, _seq"
    ).fetchall()
    current = con.sql("SELECT k, v FROM prices_current ORDER BY k").fetchall()
    return scd2, current


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_version_valid_at_each_time_is_the_joins(history):
    scd2, current = _views(history)
    for key in KEYS:
        for t in range(-1, 9):
            valid = [
                v
                for k, v, start, end, _ in scd2
                if k == key and start <= t and (end is None or t < end)
            ]
            expected = as_of(history, key, t)
            assert valid == ([] if expected is None else [expected.value]), (key, t)
    latest = {key: as_of(history, key, None) for key in KEYS}
    assert current == sorted((k, v.value) for k, v in latest.items() if v is not None)
    # a version is current exactly when nothing ended it
    assert all(is_current == (end is None) for *_, end, is_current in scd2)


def test_equal_times_follow_the_source_order_and_a_delete_ends_a_version():
    history = [
        Version("a", 1, "001", "r", 10),
        Version("a", 1, "002", "u", 11),  # same time, later in the source: wins at t = 1
        Version("a", 3, "003", "d", None),
        Version("a", 5, "004", "c", 12),
    ]
    scd2, current = _views(history)
    assert scd2 == [
        ("a", 10, 1, 1, False),  # an empty interval: never the version at any time
        ("a", 11, 1, 3, False),
        ("a", 12, 5, None, True),
    ]
    assert current == [("a", 12)]
