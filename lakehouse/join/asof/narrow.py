"""Row time, narrow path (the default; see :mod:`lakehouse.join.asof`): an Arrow UDF looks the
released rows' keys up in an index of the pinned build files that each Python worker builds
once and keeps (:class:`_WorkerIndexes`); no shuffle."""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse.dimension.layout import EVENT_TIME, OP, SEQ
from lakehouse.storage import filesystem

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from lakehouse.join.kernel import AsOfIndex

from lakehouse.join.asof.common import PROBE_TIME_US, scan_files

#: The largest build (rows in all its files) that each Python worker reads and indexes whole.
#: An index costs about 90 bytes per build row with a bigint key and one bigint value (codes,
#: order, start, delete flag, the columns read, ``seq`` strings), more with string keys or wide
#: values, and every Python worker of an executor (one per concurrently running task) holds its
#: own, so the default keeps one worker near 1 GiB. Larger builds take the shuffle path.
NARROW_MAX_BUILD_ROWS = 10_000_000

#: Spark conf that overrides :data:`NARROW_MAX_BUILD_ROWS` (0 turns the narrow path off).
NARROW_MAX_BUILD_ROWS_CONF = "spark.lakehouse.join.asof.narrowMaxBuildRows"


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
    files, plain = scan_files(build)
    if not plain:
        return None, "the build is not a plain parquet scan of a file list"
    needed = list(dict.fromkeys([*build_key, *value_columns, OP, EVENT_TIME, SEQ]))
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


def join_narrow(
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
            udf = F.arrow_udf(  # type: ignore[call-overload]  # pyspark's overloads: functions
                _NarrowLookup(narrow), result_type, ArrowUDFType.SCALAR_ITER
            )
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
        op = table[OP]
        if pc.any(pc.equal(op, "t")).as_py() or op.null_count:
            truncates = table.filter(pc.equal(op, "t"))
            table = table.filter(pc.not_equal(op, "t"))
        else:
            truncates = table.slice(0, 0)
        table = table.combine_chunks()  # one chunk: takes by index stay cheap
        index = AsOfIndex.build(
            build_keys=[table[k] for k in narrow.build_key],
            build_time=pc.cast(table[EVENT_TIME], pa.int64()),
            build_seq=table[SEQ],
            build_is_delete=pc.equal(table[OP], "d"),
            truncate_time=pc.cast(truncates[EVENT_TIME], pa.int64()),
            truncate_seq=truncates[SEQ],
        )
        return cls(files, table, truncates, index, narrow)

    def lookup(self, arrays: Sequence[pa.Array]) -> pa.Array:
        """The struct of (value columns, start, matched) for probe keys and times in µs."""
        import pyarrow as pa

        *keys, t_us = arrays
        idx = self.index.match(probe_keys=keys, probe_time=t_us)
        take = pa.array(idx, mask=idx < 0, type=pa.int64())
        fields = [self.table[c].take(take) for c in self.narrow.value_columns]
        fields.append(self.table[EVENT_TIME].take(take))
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
