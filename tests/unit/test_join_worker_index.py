"""The narrow path's per-worker build index cache, in this process, on real parquet files."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.parquet as pq
from reference import Version, as_of

from lakehouse.dimension.layout import EVENT_TIME, OP, SEQ
from lakehouse.join.asof.narrow import NarrowBuild, _read_files, _WorkerIndexes

SCHEMA = pa.schema(
    [
        ("k", pa.string()),
        ("value", pa.int64()),
        (OP, pa.string()),
        (EVENT_TIME, pa.timestamp("us", tz="UTC")),
        (SEQ, pa.string()),
    ]
)


def _write(path, versions, *, drop=()):
    columns = {
        "k": [v.key for v in versions],
        "value": [v.value for v in versions],
        OP: [v.op for v in versions],
        EVENT_TIME: [datetime.fromtimestamp(v.time / 1000, UTC) for v in versions],
        SEQ: [v.seq for v in versions],
    }
    fields = [f for f in SCHEMA if f.name not in drop]
    table = pa.Table.from_arrays(
        [pa.array(columns[f.name], f.type) for f in fields], schema=pa.schema(fields)
    )
    pq.write_table(table, path)
    return path.as_uri()


def _plan(*files):
    return NarrowBuild(tuple(sorted(files)), 0, ("k",), ("value",), SCHEMA)


PROBES = [(k, t) for k in ("a", "b", "z") for t in (0, 1, 2, 4, 5, 7, 9)]


def _lookup(entry):
    keys = pa.array([k for k, _ in PROBES], pa.string())
    times = pa.array([t * 1000 for _, t in PROBES], pa.int64())  # µs
    result = entry.lookup([keys, times])
    return list(zip(result.field("_v0").to_pylist(), result.field("_m").to_pylist(), strict=True))


def _expected(versions):
    out = []
    for k, t in PROBES:
        v = as_of(versions, k, t)
        out.append((None if v is None else v.value, v is not None))
    return out


V1 = [Version("a", 1, "1", "r", 10), Version("b", 2, "2", "r", 20)]
V2 = [
    Version("a", 4, "3", "u", 11),
    Version("b", 2, "4", "u", 21),  # same start, later seq
    Version(None, 5, "5", "t", None),  # truncate
    Version("b", 7, "6", "c", 22),
    Version("a", 9, "7", "d", 13),
]


def test_index_is_reused_for_its_file_set_and_rebuilt_for_a_new_one(tmp_path):
    f1 = _write(tmp_path / "1.parquet", V1)
    f2 = _write(tmp_path / "2.parquet", V2)
    cache = _WorkerIndexes()

    first = cache.get(_plan(f1))
    assert cache.get(_plan(f1)) is first and cache.built == 1  # same files: reused
    assert _lookup(first) == _expected(V1)

    # the next table version (a superset): only the new file is read, nothing stale is kept
    grown = cache.get(_plan(f1, f2))
    assert cache.built == 2 and grown is not first
    assert grown.files == {f1, f2}
    assert _lookup(grown) == _expected(V1 + V2) != _expected(V1)
    assert len(cache._entries) == 1  # the base was replaced, not kept beside it

    # an unrelated file set (e.g. after a compaction) is built afresh
    other = cache.get(_plan(f2))
    assert cache.built == 3 and _lookup(other) == _expected(V2)
    assert cache.get(_plan(f1, f2)) is grown  # still cached (two entries kept)


def test_columns_a_file_lacks_read_as_null_with_the_plan_types(tmp_path):
    # a column added to the table later: older files do not have it (Spark reads NULL too)
    old = _write(tmp_path / "old.parquet", V1, drop=("value",))
    table = _read_files(_plan(old), [old])
    assert table.schema == SCHEMA
    assert table["value"].to_pylist() == [None, None]
    assert table["k"].to_pylist() == ["a", "b"]
