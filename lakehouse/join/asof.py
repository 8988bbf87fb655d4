"""Spark glue of the as-of kernel: join released probe rows with build versions.

Paths, chosen by the join's kind of time (measurements: ``bench/README.md``):

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

import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from lakehouse.dimension import layout as L
from lakehouse.join import layout as J
from lakehouse.storage import filesystem

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from lakehouse.join.kernel import AsOfIndex

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

#: Row time, narrow path: the largest build (rows in all its files) that each Python worker
#: reads and indexes whole. An index costs about 90 bytes per build row with a bigint key and
#: one bigint value (measured: 425 MiB for 5M rows; codes, order, start, delete flag, the
#: columns read, ``seq`` strings), more with string keys or wide values, and every Python
#: worker of an executor (one per concurrently running task) holds its own, so the default
#: keeps one worker near 1 GiB. Larger builds take the shuffle path.
NARROW_MAX_BUILD_ROWS = 10_000_000

#: Spark conf that overrides :data:`NARROW_MAX_BUILD_ROWS` (0 turns the narrow path off).
NARROW_MAX_BUILD_ROWS_CONF = "spark.lakehouse.join.asof.narrowMaxBuildRows"

#: How a row-time join is executed: ``auto`` chooses (see the module docstring), ``narrow``
#: and ``shuffle`` force one path (``narrow`` raises when the build does not qualify).
RowTimePath = Literal["auto", "narrow", "shuffle"]


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
        names += [*value_names, L.EVENT_TIME, J.MATCHED]
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
        StructField(L.EVENT_TIME, build_types[L.EVENT_TIME], True),
        StructField(J.MATCHED, BooleanType(), False),
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

    if path != "shuffle":
        narrow, reason = plan_narrow(build, build_key=build_key, value_columns=value_columns)
        if narrow is not None:
            keys = [
                F.col(pk).cast(build_types[bk]) for pk, bk in zip(probe_key, build_key, strict=True)
            ]
            return _join_narrow(
                released, keys, narrow, probe_names=[f.name for f in probe_fields], schema=schema
            )
        if path == "narrow":
            raise NarrowPathUnavailable(reason)

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


# ---------------------------------------------------------------------- row time, narrow


class NarrowPathUnavailable(ValueError):
    """``path="narrow"`` was forced for a build the narrow path cannot read (the message says
    why); ``path="auto"`` takes the shuffle path instead."""


@dataclass(frozen=True, slots=True)
class NarrowBuild:
    """What a Python worker needs to read and index the build itself (see the module
    docstring). Pickled into the UDF, so it holds only plain values.

    Attributes:
        files: the build's parquet files, as Spark reports them (URIs), sorted.
        rows: rows in all of them (from the parquet footers).
        build_key: key columns, in the order of the probe keys.
        value_columns: the build columns carried into the output.
        schema: Arrow types to read the columns as (keys, value columns, op, start, seq),
            those of Spark's schema of the build, so both paths produce the same values.
    """

    files: tuple[str, ...]
    rows: int
    build_key: tuple[str, ...]
    value_columns: tuple[str, ...]
    schema: pa.Schema


def plan_narrow(
    build: DataFrame, *, build_key: Sequence[str], value_columns: Sequence[str]
) -> tuple[NarrowBuild | None, str]:
    """Whether the row-time join can take the narrow path, and why not when it cannot.

    It can when ``build`` is exactly a parquet scan of a file list (what
    :func:`lakehouse.delta.read` returns for a pinned version), pyarrow can open every file
    (:func:`lakehouse.storage.filesystem`: local paths, ``s3://`` and Hadoop's ``s3a://``,
    ``gs://``, ``abfs://``, ``hdfs://`` with the matching credentials on the workers; not
    ``dbfs:/``),
    and the files hold at most :data:`NARROW_MAX_BUILD_ROWS` rows (or the value of
    :data:`NARROW_MAX_BUILD_ROWS_CONF`). Without ``arrow_udf`` (pyspark 4.0) it runs in
    ``mapInArrow`` instead (:func:`_map_narrow`).

    Returns:
        ``(plan, "")`` when it can, ``(None, reason)`` when it cannot.
    """
    from pyspark.sql.types import StructType

    from lakehouse.delta import spark_schema_to_arrow

    conf = build.sparkSession.conf.get(NARROW_MAX_BUILD_ROWS_CONF, None)
    limit = NARROW_MAX_BUILD_ROWS if conf is None else int(conf)
    if limit <= 0:
        return None, f"turned off by {NARROW_MAX_BUILD_ROWS_CONF}={conf}"
    files = frozenset(build.inputFiles())
    if not _is_plain_scan(build, files):
        return None, "the build is not a plain parquet scan of a file list"
    needed = list(dict.fromkeys([*build_key, *value_columns, L.OP, L.EVENT_TIME, L.SEQ]))
    try:
        schema = spark_schema_to_arrow(StructType([build.schema[n] for n in needed]))
    except Exception as exc:  # a Spark type Arrow cannot carry: let Spark join it
        return None, f"a build column has no Arrow type ({exc})"
    try:
        rows = sum(_FOOTERS.rows(uri) for uri in sorted(files))
    except Exception as exc:  # an object store pyarrow cannot open from here
        return None, f"pyarrow cannot read the build files ({type(exc).__name__}: {exc})"
    if rows > limit:
        return None, f"the build has {rows} rows, more than {limit} ({NARROW_MAX_BUILD_ROWS_CONF})"
    plan = NarrowBuild(tuple(sorted(files)), rows, tuple(build_key), tuple(value_columns), schema)
    return plan, ""


class _FooterRows:
    """Rows per build file, read from the parquet footers once per file on the driver (data
    files of a Delta table are immutable: a file name is never rewritten in place)."""

    def __init__(self, limit: int = 200_000) -> None:
        self._lock = threading.Lock()
        self._rows: OrderedDict[str, int] = OrderedDict()
        self._limit = limit

    def rows(self, uri: str) -> int:
        """Rows in the file (raises when pyarrow cannot open it)."""
        with self._lock:
            if uri in self._rows:
                self._rows.move_to_end(uri)
                return self._rows[uri]
        import pyarrow.parquet as pq

        fs, path = filesystem(uri)
        with fs.open_input_file(path) as f:
            n = pq.ParquetFile(f).metadata.num_rows
        with self._lock:
            self._rows[uri] = n
            while len(self._rows) > self._limit:
                self._rows.popitem(last=False)
        return n


_FOOTERS = _FooterRows()


def _join_narrow(
    released: DataFrame,
    keys: Sequence[Column],
    narrow: NarrowBuild,
    *,
    probe_names: Sequence[str],
    schema: StructType,
) -> DataFrame:
    """Row time without a shuffle: an Arrow UDF over the released rows' keys and times looks
    each row up in an index of the whole build that the Python worker reads itself (see the
    module docstring); the probe columns stay in the JVM."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType, StructField, StructType

    n_values = len(narrow.value_columns)
    value_fields = schema.fields[len(probe_names) : len(probe_names) + n_values]
    result_type = StructType(
        [
            *[StructField(f"_v{i}", f.dataType, True) for i, f in enumerate(value_fields)],
            StructField("_t", schema.fields[-2].dataType, True),
            StructField("_m", BooleanType(), True),
        ]
    )
    if hasattr(F, "arrow_udf"):
        from pyspark.sql.functions import ArrowUDFType

        with warnings.catch_warnings():
            # pyspark prefers type hints to the explicit type; the lookup is a callable object
            warnings.filterwarnings("ignore", "It is preferred to specify type hints", UserWarning)
            udf = F.arrow_udf(_NarrowLookup(narrow), result_type, ArrowUDFType.SCALAR_ITER)
        joined = released.select(
            *[F.col(n) for n in probe_names],
            udf(*keys, F.col(PROBE_TIME_US)).alias("_asof"),
        )
        looked_up = [f"_asof.{f.name}" for f in result_type.fields]
    else:
        joined = _map_narrow(released, keys, narrow, probe_names=probe_names, looked=result_type)
        looked_up = [f.name for f in result_type.fields]
    columns = [
        *[F.col(n) for n in probe_names],
        *[F.col(c) for c in looked_up[:-1]],
        F.coalesce(F.col(looked_up[-1]), F.lit(False)),  # never NULL: keeps the column non-null
    ]
    return joined.select(*[c.alias(f.name) for c, f in zip(columns, schema.fields, strict=True)])


def _map_narrow(
    released: DataFrame,
    keys: Sequence[Column],
    narrow: NarrowBuild,
    *,
    probe_names: Sequence[str],
    looked: StructType,
) -> DataFrame:
    """The narrow path where pyspark has no ``arrow_udf`` (4.0): the same lookup in
    ``mapInArrow``, still without a shuffle. The probe columns travel to the Python worker
    and back with the keys (the Arrow UDF sends only keys and times), so a wide probe row
    costs more here; the build index is the same worker-level cache."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from lakehouse.delta import spark_schema_to_arrow

    staged = released.select(
        *[F.col(n) for n in probe_names],
        *[k.alias(f"_nk{i}") for i, k in enumerate(keys)],
        F.col(PROBE_TIME_US).alias("_npt"),
    )
    out = StructType([*[staged.schema[n] for n in probe_names], *looked.fields])
    mapper = _NarrowMapper(narrow, len(probe_names), len(keys), spark_schema_to_arrow(out))
    return staged.mapInArrow(mapper, out)


class _NarrowMapper:
    """The ``mapInArrow`` function of :func:`_map_narrow` (runs in the Python workers): each
    batch of (probe columns..., keys..., time in µs) leaves as (probe columns..., value
    columns..., start, matched)."""

    def __init__(self, narrow: NarrowBuild, n_probe: int, n_keys: int, schema: pa.Schema) -> None:
        self.narrow = narrow
        self.n_probe = n_probe
        self.n_keys = n_keys
        self.schema = schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        indexed: _IndexedBuild | None = None
        for batch in batches:
            indexed = indexed or _WORKER_INDEXES.get(self.narrow)
            lookup_columns = range(self.n_probe, self.n_probe + self.n_keys + 1)
            found = indexed.lookup([batch.column(i) for i in lookup_columns])
            columns = [batch.column(i) for i in range(self.n_probe)] + found.flatten()
            yield pa.RecordBatch.from_arrays(columns, schema=self.schema)


#: Narrow path: input batches are gathered to at least this many rows before a lookup
#: (Spark hands the UDF 10k-row batches; each lookup has a fixed cost).
_LOOKUP_ROWS = 65_536


class _NarrowLookup:
    """The Arrow UDF of the narrow path (runs in the Python workers)."""

    def __init__(self, narrow: NarrowBuild) -> None:
        self.narrow = narrow

    def __call__(self, batches: Iterator[tuple[pa.Array, ...]]) -> Iterator[pa.Array]:
        """Join each batch of (key columns..., probe time in µs); the index is fetched (or
        built) once per task, at the first batch."""
        indexed: _IndexedBuild | None = None
        pending: list[tuple[pa.Array, ...]] = []
        size = 0
        for arrays in batches:
            pending.append(arrays)
            size += len(arrays[0])
            if size >= _LOOKUP_ROWS:
                indexed = indexed or _WORKER_INDEXES.get(self.narrow)
                yield indexed.lookup(_concat(pending))
                pending, size = [], 0
        if pending:
            indexed = indexed or _WORKER_INDEXES.get(self.narrow)
            yield indexed.lookup(_concat(pending))


def _concat(parts: list[tuple[pa.Array, ...]]) -> list[pa.Array]:
    import pyarrow as pa

    if len(parts) == 1:
        return list(parts[0])
    return [pa.concat_arrays([p[i] for p in parts]) for i in range(len(parts[0]))]


@dataclass(slots=True)
class _IndexedBuild:
    """One build file set, read and indexed in a Python worker.

    Attributes:
        files: the files read.
        table: the rows that are not truncates (columns of the plan's schema).
        truncates: the truncate rows (same columns).
        index: the :class:`~lakehouse.join.kernel.AsOfIndex` of ``table``.
        narrow: the plan it was built for (which columns are keys and values).
    """

    files: frozenset[str]
    table: pa.Table
    truncates: pa.Table
    index: AsOfIndex
    narrow: NarrowBuild

    @classmethod
    def of(cls, narrow: NarrowBuild, table: pa.Table, files: frozenset[str]) -> _IndexedBuild:
        import pyarrow as pa
        import pyarrow.compute as pc

        from lakehouse.join.kernel import AsOfIndex

        # as the shuffle path's Spark filters: a row of NULL op is neither a version nor a
        # truncate (``op != 't'`` is NULL there, and so is dropped)
        op = table[L.OP]
        if pc.any(pc.equal(op, "t")).as_py() or op.null_count:
            truncates = table.filter(pc.equal(op, "t"))
            table = table.filter(pc.not_equal(op, "t"))
        else:
            truncates = table.slice(0, 0)
        table = table.combine_chunks()  # one chunk: takes by index stay cheap
        index = AsOfIndex.build(
            build_keys=[table[k] for k in narrow.build_key],
            build_time=pc.cast(table[L.EVENT_TIME], pa.int64()),
            build_seq=table[L.SEQ],
            build_is_delete=pc.equal(table[L.OP], "d"),
            truncate_time=pc.cast(truncates[L.EVENT_TIME], pa.int64()),
            truncate_seq=truncates[L.SEQ],
        )
        return cls(files, table, truncates, index, narrow)

    def lookup(self, arrays: Sequence[pa.Array]) -> pa.Array:
        """The struct of (value columns, start, matched) for probe keys and times in µs."""
        import pyarrow as pa

        *keys, t_us = arrays
        idx = self.index.match(probe_keys=keys, probe_time=t_us)
        take = pa.array(idx, mask=idx < 0, type=pa.int64())
        fields = [self.table[c].take(take) for c in self.narrow.value_columns]
        fields.append(self.table[L.EVENT_TIME].take(take))
        fields.append(pa.array(idx >= 0))
        names = [*[f"_v{i}" for i in range(len(self.narrow.value_columns))], "_t", "_m"]
        return pa.StructArray.from_arrays([_one_chunk(f) for f in fields], names=names)


def _one_chunk(values: Any) -> pa.Array:
    import pyarrow as pa

    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _read_files(narrow: NarrowBuild, files: Sequence[str]) -> pa.Table:
    """The plan's columns of ``files``, with the plan's types: a column a file lacks (added to
    the table later) reads as NULL, as in Spark's scan with the table's schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = []
    for uri in files:
        fs, path = filesystem(uri)
        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            present = set(pf.schema_arrow.names)
            read = pf.read(
                columns=[n for n in narrow.schema.names if n in present], use_threads=False
            )
            n = pf.metadata.num_rows
        arrays = [
            read[field.name].cast(field.type) if field.name in present else pa.nulls(n, field.type)
            for field in narrow.schema
        ]
        parts.append(pa.Table.from_arrays(arrays, schema=narrow.schema))
    if not parts:
        return narrow.schema.empty_table()
    return pa.concat_tables(parts)


#: Narrow path: build indexes kept by one Python worker process.
_MAX_WORKER_INDEXES = 2


class _WorkerIndexes:
    """The build indexes of one Python worker process, kept between tasks and micro-batches.

    Spark reuses a Python worker for later tasks (``spark.python.worker.reuse``, on by
    default), so an index is read and built once per worker and build file set, not once per
    task. An entry is identified by its file set and the columns and types read: a later
    build version is another file set and never meets a stale index. When the new set is a
    superset of a cached one (the append-only build table grew), only the new files are read
    and the index is rebuilt over the cached rows plus theirs, and the older entry is
    dropped. At most :data:`_MAX_WORKER_INDEXES` are kept, least recently used dropped first.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[Any, ...], _IndexedBuild] = OrderedDict()
        #: entries built by this process (tests read it to see the cache at work)
        self.built = 0

    def get(self, narrow: NarrowBuild) -> _IndexedBuild:
        """The index of ``narrow``'s files (see the class docstring)."""
        import pyarrow as pa

        files = frozenset(narrow.files)
        shape = (narrow.schema.to_string(), narrow.build_key, narrow.value_columns)
        with self._lock:
            hit = self._entries.get((files, *shape))
            if hit is not None:
                self._entries.move_to_end((files, *shape))
                return hit
            bases = [(k, e) for k, e in self._entries.items() if k[1:] == shape and e.files < files]
            if bases:
                key, base = max(bases, key=lambda ke: len(ke[1].files))
                added = _read_files(narrow, sorted(files - base.files))
                table = pa.concat_tables([base.table, base.truncates, added])
                del self._entries[key]
            else:
                table = _read_files(narrow, narrow.files)
            entry = _IndexedBuild.of(narrow, table, files)
            self.built += 1
            self._entries[(files, *shape)] = entry
            while len(self._entries) > _MAX_WORKER_INDEXES:
                self._entries.popitem(last=False)
            return entry


_WORKER_INDEXES = _WorkerIndexes()


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
