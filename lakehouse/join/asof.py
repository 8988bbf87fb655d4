"""Spark glue of the as-of kernel: join released probe rows with build versions.

The build table is pruned to the keys the probe rows need (a left-semi join), both sides are
hashed on the key into buckets, and each bucket is joined by :func:`~lakehouse.join.kernel.
asof_match` in one Python worker (``cogroup().applyInArrow``). The cost is one shuffle of the
probe rows and of the needed build rows, and one sort per bucket: it grows with the data, not
with probe rows x versions, and nothing is ever expanded into probe-version pairs.
Truncates (build rows of no key) are few; they are collected once and sent to every bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakehouse.build import layout as L

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

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

        from lakehouse.join.kernel import LATEST, asof_match

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
        build: the build table at the pinned version (layout of :mod:`lakehouse.build`).
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
