"""Spark glue of the as-of kernel: join released probe rows with build versions.

Two paths, chosen by the join's kind of time (measurements: ``bench/README.md``):

**Row time** (each probe row as of its own time). Both sides are hashed on the key into
buckets and each bucket is joined by :func:`~lakehouse.join.kernel.asof_match` in one Python
worker (``cogroup().applyInArrow``). The cost is one shuffle of the probe rows and of the build
rows, and one sort per bucket: it grows with the data, not with probe rows x versions, and
nothing is ever expanded into probe-version pairs. Only what the kernel needs crosses from the
JVM to Python: keys, the start in µs, ``seq`` and a delete flag (not the op string, not the
start twice). When the released rows are few (at most :data:`PRUNE_MAX_PROBE_ROWS`), the build
is first pruned to their keys by a broadcast left-semi join, a hash lookup in each build scan
task, so a small micro-batch ships only the versions of its own keys. With more released rows
it is not pruned: pruning them would need a shuffle of the whole build (a sort-merge semi
join) before the cogroup shuffles it again, which measured slower than shipping every
version once (5M x 1M x 5: 45 s pruned, 20 s not, on a loaded 2-core machine).
Truncates (build rows of no key) are few; they are collected once and sent to every bucket.

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

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse.build import layout as L

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

PROBE_TIME_US = "_probe_time_us"
_BUCKET = "_bucket"
_T_US = "_t_us"
_IS_DELETE = "_is_delete"
_PRESENT = "_present"

#: Processing time: snapshots kept by the process (see :class:`_SnapshotCache`).
_MAX_SNAPSHOTS = 4

#: Row time: prune the build to the released rows' keys (broadcast left-semi join) when at
#: most this many rows are released. The broadcast holds one key per released row.
PRUNE_MAX_PROBE_ROWS = 1_000_000


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
            build_seq=build.column(L.SEQ),
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
        num_buckets: hash buckets of the row-time path (one Python worker task each).

    Returns:
        One row per released probe row (unmatched rows included, with NULL build columns
        and a false matched flag), schema as ``output_names``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, StructField, StructType

    build_types = {f.name: f.dataType for f in build.schema.fields}
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
    probe = released
    for i, (pk, bk) in enumerate(zip(probe_key, build_key, strict=True)):
        probe = probe.withColumn(f"_k{i}", F.col(pk).cast(build_types[bk]))
    if latest:
        return _join_latest(
            probe,
            build,
            probe_names=[f.name for f in probe_fields],
            build_key=build_key,
            value_columns=value_columns,
            schema=schema,
        )

    truncates = [
        (int(r[0]), str(r[1]))
        for r in build.filter(F.col(L.OP) == "t")
        .select(F.unix_micros(F.col(L.EVENT_TIME)), F.col(L.SEQ))
        .collect()
    ]
    versions = build.filter(F.col(L.OP) != "t")
    if released.count() <= PRUNE_MAX_PROBE_ROWS:
        needed = probe.select(*[F.col(f"_k{i}").alias(bk) for i, bk in enumerate(build_key)])
        versions = versions.join(F.broadcast(needed), on=list(build_key), how="left_semi")
    versions = versions.select(
        *build_key,
        *[c for c in value_columns if c not in build_key],
        L.SEQ,
        (F.col(L.OP) == "d").alias(_IS_DELETE),
        F.unix_micros(F.col(L.EVENT_TIME)).alias(_T_US),
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


# ------------------------------------------------------------------------- processing time


def _join_latest(
    probe: DataFrame,
    build: DataFrame,
    *,
    probe_names: Sequence[str],
    build_key: Sequence[str],
    value_columns: Sequence[str],
    schema: StructType,
) -> DataFrame:
    """Processing time: each probe row (with ``_k{i}`` key columns) joins its key's latest
    version, unless that version is a delete or a later truncate ended it."""
    from pyspark.sql import functions as F

    snapshot = _SNAPSHOTS.get(build, build_key=build_key, value_columns=value_columns)
    latest = snapshot.rows.filter(F.col(L.OP) != "d")
    if snapshot.truncate is not None:
        t_us, seq = snapshot.truncate
        version_t = F.unix_micros(F.col(L.EVENT_TIME))
        latest = latest.filter(
            (version_t > F.lit(t_us)) | ((version_t == F.lit(t_us)) & (F.col(L.SEQ) > F.lit(seq)))
        )
    values = [F.col(c).alias(f"_v_{c}") for c in value_columns]
    latest = latest.select(
        *[F.col(k).alias(f"_b{i}") for i, k in enumerate(build_key)],
        *values,
        F.col(L.EVENT_TIME).alias("_v_event_time"),
        F.lit(True).alias(_PRESENT),
    )
    condition: Column | None = None
    for i in range(len(build_key)):
        term = F.col(f"_k{i}") == F.col(f"_b{i}")
        condition = term if condition is None else condition & term
    joined = probe.join(latest, on=condition, how="left")
    columns = [
        *[F.col(n) for n in probe_names],
        *[F.col(f"_v_{c}") for c in value_columns],
        F.col("_v_event_time"),
        F.coalesce(F.col(_PRESENT), F.lit(False)),
    ]
    return joined.select(*[c.alias(f.name) for c, f in zip(columns, schema.fields, strict=True)])


def _reduce_to_latest(
    rows: DataFrame, build_key: Sequence[str], carried: Sequence[str]
) -> DataFrame:
    """One row per key: its latest version by ``(start, seq)`` (deletes included)."""
    from pyspark.sql import functions as F

    latest = F.max_by(F.struct(*[F.col(c) for c in carried]), F.struct(L.EVENT_TIME, L.SEQ))
    return rows.groupBy(*build_key).agg(latest.alias("_latest")).select(*build_key, "_latest.*")


@dataclass(slots=True)
class _Snapshot:
    """The latest version of every key of one build file set (see the module docstring).

    Attributes:
        files: the parquet files the snapshot covers.
        rows: one row per key (key, value columns, op, start, seq); persisted when cached.
        truncate: the latest truncate by ``(start µs, seq)``, or None.
        cached: whether ``rows`` is persisted and owned by the cache.
    """

    files: frozenset[str]
    rows: DataFrame
    truncate: tuple[int, str] | None
    cached: bool


class _SnapshotCache:
    """Latest-version snapshots of build tables, kept between micro-batches.

    Holds the snapshots of the last :data:`_MAX_SNAPSHOTS` build file sets asked for (one per
    build table in a steady stream), each for one session, build schema and set of columns
    joined. A request whose build is a plain parquet scan of a file set is answered from the
    cache when that set is cached; by merging the new files into a cached snapshot when the set
    is a superset of its files (an append-only log grew: the next Delta version); and by
    computing it afresh otherwise (another table, or after a compaction). A build that is not
    a plain file scan (a filtered or generated DataFrame) is reduced per call and not cached.
    A snapshot merged into its successor is unpersisted once the successor is materialised,
    and so is the least recently used one beyond the limit. Thread-safe: streaming queries of
    one process may share it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[tuple[tuple[Any, ...], _Snapshot]] = []  # most recent last

    def get(
        self, build: DataFrame, *, build_key: Sequence[str], value_columns: Sequence[str]
    ) -> _Snapshot:
        """The snapshot of ``build`` (see the class docstring)."""
        carried = [
            *build_key,
            *[c for c in value_columns if c not in build_key],
            L.OP,
            L.EVENT_TIME,
            L.SEQ,
        ]
        files = frozenset(build.inputFiles())
        spark = build.sparkSession
        if not _is_plain_scan(build, files):
            return self._compute(build, build_key, carried, files, cached=False)
        identity = (id(spark), build.schema.json(), tuple(build_key), tuple(carried))
        with self._lock:
            mine = [(i, e) for i, (ident, e) in enumerate(self._entries) if ident == identity]
            for i, entry in mine:
                if entry.files == files:
                    self._entries.append(self._entries.pop(i))
                    return entry
            bases = [(i, e) for i, e in mine if e.files < files]
            if bases:
                i, base = max(bases, key=lambda ie: len(ie[1].files))
                added = spark.read.schema(build.schema).parquet(*sorted(files - base.files))
                new = self._compute(added, build_key, carried, files, cached=True, base=base)
                new.rows.count()  # materialise before the base is dropped
                self._entries.pop(i)
                base.rows.unpersist()
            else:
                new = self._compute(build, build_key, carried, files, cached=True)
                new.rows.count()
            self._entries.append((identity, new))
            while len(self._entries) > _MAX_SNAPSHOTS:
                _, old = self._entries.pop(0)
                old.rows.unpersist()
            return new

    @staticmethod
    def _compute(
        rows: DataFrame,
        build_key: Sequence[str],
        carried: Sequence[str],
        files: frozenset[str],
        *,
        cached: bool,
        base: _Snapshot | None = None,
    ) -> _Snapshot:
        from pyspark.sql import functions as F

        truncates = (
            rows.filter(F.col(L.OP) == "t")
            .select(F.unix_micros(F.col(L.EVENT_TIME)).alias("t"), F.col(L.SEQ).alias("s"))
            .orderBy(F.col("t").desc(), F.col("s").desc())
            .limit(1)
            .collect()
        )
        candidates = [(int(r["t"]), str(r["s"])) for r in truncates]
        versions = rows.filter(F.col(L.OP) != "t").select(*carried)
        if base is not None:
            versions = base.rows.select(*carried).unionByName(versions)
            if base.truncate is not None:
                candidates.append(base.truncate)
        latest = _reduce_to_latest(versions, build_key, carried[len(build_key) :])
        if cached:
            latest = latest.persist()
        return _Snapshot(files, latest, max(candidates, default=None), cached)


def _is_plain_scan(build: DataFrame, files: frozenset[str]) -> bool:
    """Whether ``build`` is exactly a parquet scan of ``files`` with its schema (so that a scan
    of a subset of them is the same rows restricted to those files). Spark reports the files
    as URIs (``file:///...``) while the reader may have been given plain local paths, and
    the plan keeps the strings it was given, so both spellings are tried."""
    if not files:
        return False
    listed = sorted(files)
    spellings = [listed]
    local = [f.removeprefix("file://") if f.startswith("file:///") else f for f in listed]
    if local != listed:
        spellings.append(local)
    reader = build.sparkSession.read.schema(build.schema)
    return any(build.sameSemantics(reader.parquet(*paths)) for paths in spellings)


_SNAPSHOTS = _SnapshotCache()
