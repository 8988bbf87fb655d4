"""Spark glue of the as-of kernel: join released probe rows with build versions.

Paths, chosen by the join's kind of time (measurements: ``bench/README.md``), each in its
module: :mod:`.narrow` and :mod:`.shuffle` (row time), :mod:`.latest` (processing time).

**Row time** (each probe row as of its own time) has two execution paths, which give the
same rows (``tests/integration/test_join_paths.py`` runs both against the reference):

* **Narrow** (the default). In row time the build is the pinned version of a Delta table,
  which :func:`lakehouse.delta.read` returns as a plain parquet scan of a known file list.
  So nothing needs to be shuffled: an Arrow UDF (``arrow_udf``, scalar iterator) runs over
  the released rows where they are, receiving only their key columns and time, and returns
  the joined value columns, start and matched flag; the probe columns never leave the JVM.
  In each Python worker the UDF reads the build columns it needs straight from the parquet
  files with pyarrow (:func:`lakehouse.storage.filesystem`, so object-store URIs work where
  the workers have credentials), builds an :class:`~lakehouse.join.kernel.AsOfIndex` and
  keeps it in a process-level cache keyed by (file set, columns, types) (see
  :class:`_WorkerIndexes`). Spark reuses Python workers (``spark.python.worker.reuse``, on
  by default), so later tasks and later micro-batches at the same build version find the
  index built; a later version is another file set, for which only the new files are read
  (the log is append-only) and the index is rebuilt: a stale index is never used. The
  build is not pruned to the batch's keys: pruning would make the index specific to one
  batch, while reading the files, the larger cost, is the same either way.
  Taken when :func:`plan_narrow` accepts the build: a plain parquet scan (checked with
  ``sameSemantics`` against a scan of its ``inputFiles()``), every file opened by pyarrow on
  the driver (whose parquet footers also give the row count), at most
  :data:`NARROW_MAX_BUILD_ROWS` rows (each worker holds the whole index; override with the
  Spark conf :data:`NARROW_MAX_BUILD_ROWS_CONF`). pyspark 4.0 has no ``arrow_udf``: there
  the same lookup runs in ``mapInArrow``, which also carries the probe columns through
  Python (:func:`_map_narrow`); still no shuffle.
  5M probe rows x 1M keys x 5 versions: figures in ``bench/README.md``.
* **Shuffle** (the fallback: a build that is an arbitrary DataFrame, one pyarrow cannot open
  such as ``dbfs:/`` paths, or one larger than the bound). Both sides are hashed on the key
  into buckets and each bucket is joined by :func:`~lakehouse.join.kernel.asof_match` in one
  Python worker (``cogroup().applyInArrow``). The cost is one shuffle of the probe rows and
  of the build rows, and one sort per bucket: it grows with the data, not with probe rows x
  versions, and nothing is ever expanded into probe-version pairs. Only what the kernel
  needs crosses from the JVM to Python: keys, the start in µs, ``seq`` and a delete flag.
  When the released rows are few (at most :data:`PRUNE_MAX_PROBE_ROWS`), the build is first
  pruned to their keys by a broadcast left-semi join, a hash lookup in each build scan task,
  so a small micro-batch ships only the versions of its own keys. With more released rows
  it is not pruned: pruning them would need a shuffle of the whole build (a sort-merge semi
  join) before the cogroup shuffles it again, which measured slower than shipping every
  version once (5M x 1M x 5: 45 s pruned, 20 s not, on a loaded 2-core machine). Truncates
  (build rows of no key) are few; they are collected once and sent to every bucket.

**Processing time** (the latest version). The answer depends only on each key's latest
version, so the build is reduced to one row per key — its latest version by ``(start,
seq)``, deletes included — and the probe rows are joined to it with an ordinary Spark
equi-join, without Python. The reduction is a *maintained snapshot*: for a build that is a
plain scan of parquet files (what :func:`lakehouse.delta.read` returns) it is computed once
per file set and kept (persisted) between micro-batches; when the next batch pins a later
version of the append-only build table, whose files are a superset, only the new files are
read and merged into it. A batch at an unchanged version thus costs what Spark's
stream-static join against a one-row-per-key table costs. A snapshot is a pure function of
immutable files, so a replayed batch joins exactly what its first attempt joined.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from lakehouse.dimension.layout import EVENT_TIME
from lakehouse.join.layout import MATCHED

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

from lakehouse.join.asof.common import PROBE_TIME_US as PROBE_TIME_US
from lakehouse.join.asof.latest import join_latest
from lakehouse.join.asof.narrow import NARROW_MAX_BUILD_ROWS as NARROW_MAX_BUILD_ROWS
from lakehouse.join.asof.narrow import NARROW_MAX_BUILD_ROWS_CONF as NARROW_MAX_BUILD_ROWS_CONF
from lakehouse.join.asof.narrow import NarrowBuild as NarrowBuild
from lakehouse.join.asof.narrow import NarrowPathUnavailable as NarrowPathUnavailable
from lakehouse.join.asof.narrow import join_narrow
from lakehouse.join.asof.narrow import plan_narrow as plan_narrow
from lakehouse.join.asof.shuffle import PRUNE_MAX_PROBE_ROWS as PRUNE_MAX_PROBE_ROWS
from lakehouse.join.asof.shuffle import join_shuffle

__all__ = [
    "NARROW_MAX_BUILD_ROWS",
    "NARROW_MAX_BUILD_ROWS_CONF",
    "PROBE_TIME_US",
    "PRUNE_MAX_PROBE_ROWS",
    "NarrowBuild",
    "NarrowPathUnavailable",
    "RowTimePath",
    "join_as_of",
    "plan_narrow",
]

#: How a row-time join is executed: ``auto`` chooses (see the module docstring), ``narrow``
#: and ``shuffle`` force one path (``narrow`` raises when the build does not qualify).
RowTimePath = Literal["auto", "narrow", "shuffle"]


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
    path: RowTimePath = "auto",
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
        num_buckets: hash buckets of the row-time shuffle path (one Python worker task each).
        path: row time only: ``auto`` takes the narrow path when :func:`plan_narrow` accepts
            the build and the shuffle path otherwise; ``narrow`` and ``shuffle`` force one
            (for tests and benchmarks). Both give the same rows.

    Returns:
        One row per released probe row (unmatched rows included, with NULL build columns
        and a false matched flag), schema as ``output_names``.

    Raises:
        NarrowPathUnavailable: ``path="narrow"`` and the build does not qualify.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, StructField, StructType

    build_types = {f.name: f.dataType for f in build.schema.fields}
    probe_fields = [f for f in released.schema.fields if f.name != PROBE_TIME_US]
    out_fields = [
        *probe_fields,
        *[StructField(c, build_types[c], True) for c in value_columns],
        StructField(EVENT_TIME, build_types[EVENT_TIME], True),
        StructField(MATCHED, BooleanType(), False),
    ]
    schema: StructType = StructType(
        [
            StructField(name, f.dataType, f.nullable)
            for name, f in zip(output_names, out_fields, strict=True)
        ]
    )
    probe = released
    for i, (pk, bk) in enumerate(zip(probe_key, build_key, strict=True)):
        probe = probe.withColumn(f"_k{i}", F.col(pk).cast(build_types[bk]))
    if latest:
        return join_latest(
            probe,
            build,
            probe_names=[f.name for f in probe_fields],
            build_key=build_key,
            value_columns=value_columns,
            schema=schema,
        )

    if path != "shuffle":
        narrow, reason = plan_narrow(build, build_key=build_key, value_columns=value_columns)
        if narrow is not None:
            keys = [
                F.col(pk).cast(build_types[bk]) for pk, bk in zip(probe_key, build_key, strict=True)
            ]
            return join_narrow(
                released, keys, narrow, probe_names=[f.name for f in probe_fields], schema=schema
            )
        if path == "narrow":
            raise NarrowPathUnavailable(reason)
    return join_shuffle(
        released,
        probe,
        build,
        build_key=build_key,
        value_columns=value_columns,
        output_names=output_names,
        schema=schema,
        num_buckets=num_buckets,
    )
