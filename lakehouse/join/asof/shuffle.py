"""Row time, shuffle path (the fallback; see :mod:`lakehouse.join.asof`): both sides hashed on
the key into buckets, each bucket joined by :func:`~lakehouse.join.kernel.asof_match` in one
Python worker (``cogroup().applyInArrow``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lakehouse.dimension.layout import EVENT_TIME, OP, SEQ
from lakehouse.join.layout import MATCHED

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


from lakehouse.join.asof.common import PROBE_TIME_US

_BUCKET = "_bucket"
_T_US = "_t_us"
_IS_DELETE = "_is_delete"

#: Prune the build to the released rows' keys (broadcast left-semi join) when at most this many
#: rows are released. The broadcast holds one key per released row.
PRUNE_MAX_PROBE_ROWS = 1_000_000


def join_shuffle(
    released: DataFrame,
    probe: DataFrame,
    build: DataFrame,
    *,
    build_key: Sequence[str],
    value_columns: Sequence[str],
    output_names: Sequence[str],
    schema: StructType,
    num_buckets: int,
) -> DataFrame:
    """Each released row (``probe``: the same rows with ``_k{i}`` key columns cast to the build
    key types) joined as of its time, bucket by bucket; the rows as
    :func:`~lakehouse.join.asof.join_as_of` returns them."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    truncates = [
        (int(r[0]), str(r[1]))
        for r in build.filter(F.col(OP) == "t")
        .select(F.unix_micros(F.col(EVENT_TIME)), F.col(SEQ))
        .collect()
    ]
    versions = build.filter(F.col(OP) != "t")
    if released.count() <= PRUNE_MAX_PROBE_ROWS:
        needed = probe.select(*[F.col(f"_k{i}").alias(bk) for i, bk in enumerate(build_key)])
        versions = versions.join(F.broadcast(needed), on=list(build_key), how="left_semi")
    versions = versions.select(
        *build_key,
        *[c for c in value_columns if c not in build_key],
        SEQ,
        (F.col(OP) == "d").alias(_IS_DELETE),
        F.unix_micros(F.col(EVENT_TIME)).alias(_T_US),
    )
    bucket_probe = F.pmod(
        F.xxhash64(*[F.col(f"_k{i}") for i in range(len(build_key))]), F.lit(num_buckets)
    )
    bucket_build = F.pmod(F.xxhash64(*[F.col(k) for k in build_key]), F.lit(num_buckets))
    probe = probe.withColumn(_BUCKET, bucket_probe)
    versions = versions.withColumn(_BUCKET, bucket_build)

    from lakehouse.delta import spark_schema_to_arrow

    event_time_type = spark_schema_to_arrow(StructType([schema.fields[-2]])).field(0).type
    fn = _bucket_fn(build_key, value_columns, output_names, truncates, event_time_type)
    return probe.groupBy(_BUCKET).cogroup(versions.groupBy(_BUCKET)).applyInArrow(fn, schema)


def _bucket_fn(
    build_keys: Sequence[str],
    value_names: Sequence[str],
    out_names: Sequence[str],
    truncates: list[tuple[int, str]],
    event_time_type: pa.DataType,
) -> Any:
    def run(probe: pa.Table, build: pa.Table) -> pa.Table:
        import numpy as np
        import pyarrow as pa

        from lakehouse.join.kernel import asof_match

        # Arrow columns go to the kernel as they are: no per-row Python objects
        idx = asof_match(
            probe_keys=[probe.column(f"_k{i}") for i in range(len(build_keys))],
            probe_time=probe.column(PROBE_TIME_US),
            build_keys=[build.column(k) for k in build_keys],
            build_time=build.column(_T_US),
            build_seq=build.column(SEQ),
            build_is_delete=build.column(_IS_DELETE),
            truncate_time=np.asarray([t for t, _ in truncates], dtype=np.int64),
            truncate_seq=np.asarray([s for _, s in truncates], dtype=object),
        )
        take = pa.array(idx, mask=idx < 0, type=pa.int64())
        names = [
            name
            for name in probe.column_names
            if name not in (_BUCKET, PROBE_TIME_US) and not name.startswith("_k")
        ]
        columns = [probe.column(name) for name in names]
        for name in value_names:
            columns.append(build.column(name).take(take))
        columns.append(build.column(_T_US).take(take).cast(event_time_type))
        columns.append(pa.array(idx >= 0))
        names += [*value_names, EVENT_TIME, MATCHED]
        table = pa.Table.from_arrays(columns, names=names)
        return table.rename_columns(list(out_names))

    return run
