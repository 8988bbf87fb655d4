"""Processing time (see :mod:`lakehouse.join.asof`): each key's latest version, kept as a
maintained snapshot per build file set (:class:`_SnapshotCache`), joined with a Spark
equi-join; no Python."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse.dimension.layout import EVENT_TIME, OP, SEQ
from lakehouse.join.asof.common import scan_files
from lakehouse.spark import session_identity

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType


_PRESENT = "_present"

#: Snapshots kept by the process (see :class:`_SnapshotCache`).
_MAX_SNAPSHOTS = 4


def join_latest(
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
    latest = snapshot.rows.filter(F.col(OP) != "d")
    if snapshot.truncate is not None:
        t_us, seq = snapshot.truncate
        version_t = F.unix_micros(F.col(EVENT_TIME))
        latest = latest.filter(
            (version_t > F.lit(t_us)) | ((version_t == F.lit(t_us)) & (F.col(SEQ) > F.lit(seq)))
        )
    values = [F.col(c).alias(f"_v_{c}") for c in value_columns]
    latest = latest.select(
        *[F.col(k).alias(f"_b{i}") for i, k in enumerate(build_key)],
        *values,
        F.col(EVENT_TIME).alias("_v_event_time"),
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

    latest = F.max_by(F.struct(*[F.col(c) for c in carried]), F.struct(EVENT_TIME, SEQ))
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
            OP,
            EVENT_TIME,
            SEQ,
        ]
        files, plain = scan_files(build)
        spark = build.sparkSession
        if not plain:
            return self._compute(build, build_key, carried, files, cached=False)
        identity = (
            session_identity(spark),
            build.schema.json(),
            tuple(build_key),
            tuple(carried),
        )
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
            rows.filter(F.col(OP) == "t")
            .select(F.unix_micros(F.col(EVENT_TIME)).alias("t"), F.col(SEQ).alias("s"))
            .orderBy(F.col("t").desc(), F.col("s").desc())
            .limit(1)
            .collect()
        )
        candidates = [(int(r["t"]), str(r["s"])) for r in truncates]
        versions = rows.filter(F.col(OP) != "t").select(*carried)
        if base is not None:
            versions = base.rows.select(*carried).unionByName(versions)
            if base.truncate is not None:
                candidates.append(base.truncate)
        latest = _reduce_to_latest(versions, build_key, carried[len(build_key) :])
        if cached:
            latest = latest.persist()
        return _Snapshot(files, latest, max(candidates, default=None), cached)


_SNAPSHOTS = _SnapshotCache()
