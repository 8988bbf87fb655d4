"""The as-of kernel and its Spark glue as they were before issue 6, for before/after figures.

Copied verbatim from ``lakehouse/join/kernel.py`` and ``lakehouse/join/asof.py`` at the
commit that preceded the benchmark work (only the import of the kernel inside the Spark
function points here). Not used by the product; the benchmark runs it next to the current
code on the same data so that every report shows what the changes bought.

What changed since (see ``bench/README.md``): the kernel sorted probe and build rows
together with a four-key ``np.lexsort`` and ranked every ``seq`` string with ``np.unique``
on an object array, and factorised keys as Python objects; the glue converted the op column
to a Python list per bucket and pruned the build by a (shuffled) left-semi join with the
distinct probe keys whatever their number, and processing time went through the kernel.
"""

# ruff: noqa
# fmt: off

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from lakehouse.dimension import layout as L

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

#: Probe time meaning "now": processing-time lookups ask for the latest version.
LATEST = np.iinfo(np.int64).max


def _group_ids(
    probe_keys: Sequence[np.ndarray], build_keys: Sequence[np.ndarray], n_probe: int
) -> tuple[np.ndarray, np.ndarray]:
    """Dense integer ids for the key tuples of both sides (equal tuples, equal ids)."""
    if len(probe_keys) == 1:
        both = np.concatenate(
            [np.asarray(probe_keys[0], dtype=object), np.asarray(build_keys[0], dtype=object)]
        )
        ids, _ = pd.factorize(both, use_na_sentinel=True)
    else:
        frame = pd.DataFrame(
            {
                i: np.concatenate([np.asarray(p, dtype=object), np.asarray(b, dtype=object)])
                for i, (p, b) in enumerate(zip(probe_keys, build_keys, strict=True))
            }
        )
        ids = frame.groupby(list(frame.columns), sort=False, dropna=False).ngroup().to_numpy()
    ids = np.asarray(ids, dtype=np.int64)
    return ids[:n_probe], ids[n_probe:]


def asof_match(
    *,
    probe_keys: Sequence[np.ndarray],
    probe_time: np.ndarray,
    build_keys: Sequence[np.ndarray],
    build_time: np.ndarray,
    build_seq: np.ndarray,
    build_is_delete: np.ndarray,
    truncate_time: np.ndarray | None = None,
    truncate_seq: np.ndarray | None = None,
) -> np.ndarray:
    """Return, for each probe row, the index of the build row it joins, or -1.

    Args:
        probe_keys: one array per key column, each of length P (NULL keys never match).
        probe_time: int64 times of the probe rows (any unit, the same as ``build_time``);
            :data:`LATEST` asks for the latest version.
        build_keys: one array per key column, each of length B, aligned with ``probe_keys``.
        build_time: int64 version starts.
        build_seq: sortable strings ordering versions with equal start (later wins).
        build_is_delete: True where the version is a delete.
        truncate_time, truncate_seq: truncates, which end every version before them.

    Returns:
        int64 array of length P with build row indices or -1.
    """
    n_p = len(probe_time)
    n_b = len(build_time)
    result = np.full(n_p, -1, dtype=np.int64)
    if n_p == 0 or n_b == 0:
        return result
    p_gid, b_gid = _group_ids(probe_keys, build_keys, n_p)

    # One rank for every seq string (versions and truncates), so tuples compare as numbers.
    trunc_t = np.asarray(truncate_time if truncate_time is not None else [], dtype=np.int64)
    trunc_s = np.asarray(truncate_seq if truncate_seq is not None else [], dtype=object)
    all_seq = np.concatenate([np.asarray(build_seq, dtype=object), trunc_s]).astype(str)
    _, seq_rank = np.unique(all_seq, return_inverse=True)
    b_rank = seq_rank[:n_b].astype(np.int64)
    t_rank = seq_rank[n_b:].astype(np.int64)

    gid = np.concatenate([b_gid, p_gid])
    times = np.concatenate(
        [np.asarray(build_time, dtype=np.int64), np.asarray(probe_time, dtype=np.int64)]
    )
    side = np.concatenate([np.zeros(n_b, np.int8), np.ones(n_p, np.int8)])  # build first
    rank = np.concatenate([b_rank, np.zeros(n_p, np.int64)])
    order = np.lexsort((rank, side, times, gid))  # last key is the primary one

    s_gid = gid[order]
    is_build = side[order] == 0
    pos = np.arange(len(order))
    last_build_pos = np.maximum.accumulate(np.where(is_build, pos, -1))
    group_start = np.zeros(len(order), dtype=np.int64)
    boundaries = np.flatnonzero(s_gid[1:] != s_gid[:-1]) + 1
    group_start[boundaries] = boundaries
    group_start = np.maximum.accumulate(group_start)

    probe_here = ~is_build
    valid = probe_here & (last_build_pos >= group_start) & (s_gid >= 0)
    probe_index = order[probe_here] - n_b
    matched_build = np.where(
        valid[probe_here], order[np.maximum(last_build_pos[probe_here], 0)], -1
    )
    result[probe_index] = matched_build

    is_delete = np.asarray(build_is_delete, dtype=bool)
    hit = result >= 0
    result[hit & is_delete[np.maximum(result, 0)]] = -1

    if len(trunc_t):
        # the latest truncate at or before t, by (time, seq)
        t_order = np.lexsort((t_rank, trunc_t))
        st, sr = trunc_t[t_order], t_rank[t_order]
        p_t = np.asarray(probe_time, dtype=np.int64)
        idx = np.searchsorted(st, p_t, side="right") - 1
        hit = (result >= 0) & (idx >= 0)
        if hit.any():
            v = result[hit]
            tr = idx[hit]
            v_t = np.asarray(build_time, dtype=np.int64)[v]
            ends = (st[tr] > v_t) | ((st[tr] == v_t) & (sr[tr] > b_rank[v]))
            sub = result[hit]
            sub[ends] = -1
            result[hit] = sub
    return result


PROBE_TIME_US = "_probe_time_us"
_BUCKET = "_bucket"


def _bucket_fn(
    build_keys: Sequence[str],
    value_names: Sequence[str],
    out_names: Sequence[str],
    truncates: list[tuple[int, str]],
    latest: bool,
) -> Any:
    def run(probe: pa.Table, build: pa.Table) -> pa.Table:
        import numpy as np
        import pyarrow as pa

        from bench.previous import LATEST, asof_match

        n = probe.num_rows
        if latest:
            probe_time = np.full(n, LATEST, dtype=np.int64)
        else:
            probe_time = probe.column(PROBE_TIME_US).to_numpy(zero_copy_only=False)
        build_time = build.column("_t_us").to_numpy(zero_copy_only=False)
        idx = asof_match(
            probe_keys=[
                probe.column(f"_k{i}").to_numpy(zero_copy_only=False)
                for i in range(len(build_keys))
            ],
            probe_time=probe_time.astype(np.int64),
            build_keys=[build.column(k).to_numpy(zero_copy_only=False) for k in build_keys],
            build_time=build_time.astype(np.int64),
            build_seq=build.column(L.SEQ).to_numpy(zero_copy_only=False),
            build_is_delete=np.asarray(
                [op == "d" for op in build.column(L.OP).to_pylist()], dtype=bool
            ),
            truncate_time=np.asarray([t for t, _ in truncates], dtype=np.int64),
            truncate_seq=np.asarray([s for _, s in truncates], dtype=object),
        )
        take = pa.array(idx, mask=idx < 0, type=pa.int64())
        columns = [
            probe.column(name)
            for name in probe.column_names
            if name not in (_BUCKET, PROBE_TIME_US) and not name.startswith("_k")
        ]
        names = [
            name
            for name in probe.column_names
            if name not in (_BUCKET, PROBE_TIME_US) and not name.startswith("_k")
        ]
        for name in value_names:
            columns.append(build.column(name).take(take))
        columns.append(build.column(L.EVENT_TIME).take(take))
        columns.append(pa.array(idx >= 0))
        names += [*value_names, L.EVENT_TIME, "_matched"]
        table = pa.Table.from_arrays(columns, names=names)
        return table.rename_columns(list(out_names))

    return run


def join_as_of(
    released: DataFrame,
    build: DataFrame,
    *,
    probe_key: Sequence[str],
    build_key: Sequence[str],
    value_columns: Sequence[str],
    output_names: Sequence[str],
    latest: bool,
    num_buckets: int,
) -> DataFrame:
    """Attach to each released probe row the build version it joins.

    Args:
        released: probe rows; must have :data:`PROBE_TIME_US` (event time in µs) unless
            ``latest``.
        build: the build table at the pinned version (layout of :mod:`lakehouse.dimension`).
        probe_key, build_key: key columns, paired in order; probe keys are cast to the build
            key types before hashing and comparing.
        value_columns: build columns to carry into the output.
        output_names: final names, in order: the probe columns (without the time helper),
            then ``value_columns``, then the joined version's start, then the matched flag.
        latest: processing time: join the latest version, ignoring probe time.
        num_buckets: hash buckets (one Python worker task each).

    Returns:
        One row per released probe row (unmatched rows included, with NULL build columns
        and a false matched flag), schema as ``output_names``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, StructField, StructType

    build_types = {f.name: f.dataType for f in build.schema.fields}
    truncates = [
        (int(r[0]), str(r[1]))
        for r in build.filter(F.col(L.OP) == "t")
        .select(F.unix_micros(F.col(L.EVENT_TIME)), F.col(L.SEQ))
        .collect()
    ]
    versions = build.filter(F.col(L.OP) != "t").select(
        *build_key,
        *[c for c in value_columns if c not in build_key],
        L.OP,
        L.SEQ,
        L.EVENT_TIME,
        F.unix_micros(F.col(L.EVENT_TIME)).alias("_t_us"),
    )
    probe = released
    for i, (pk, bk) in enumerate(zip(probe_key, build_key, strict=True)):
        probe = probe.withColumn(f"_k{i}", F.col(pk).cast(build_types[bk]))
    needed = probe.select(*[F.col(f"_k{i}").alias(bk) for i, bk in enumerate(build_key)]).distinct()
    versions = versions.join(needed, on=list(build_key), how="left_semi")

    bucket_probe = F.pmod(
        F.xxhash64(*[F.col(f"_k{i}") for i in range(len(build_key))]), F.lit(num_buckets)
    )
    bucket_build = F.pmod(F.xxhash64(*[F.col(k) for k in build_key]), F.lit(num_buckets))
    probe = probe.withColumn(_BUCKET, bucket_probe)
    versions = versions.withColumn(_BUCKET, bucket_build)

    probe_fields = [f for f in released.schema.fields if f.name != PROBE_TIME_US]
    out_fields = [
        *probe_fields,
        *[StructField(c, build_types[c], True) for c in value_columns],
        StructField(L.EVENT_TIME, build_types[L.EVENT_TIME], True),
        StructField("_matched", BooleanType(), False),
    ]
    schema: StructType = StructType(
        [
            StructField(name, f.dataType, f.nullable)
            for name, f in zip(output_names, out_fields, strict=True)
        ]
    )
    fn = _bucket_fn(build_key, value_columns, output_names, truncates, latest)
    return probe.groupBy(_BUCKET).cogroup(versions.groupBy(_BUCKET)).applyInArrow(fn, schema)
