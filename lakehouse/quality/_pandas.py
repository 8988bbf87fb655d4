"""The quality report's frames on pandas: tables read by delta-rs, no JVM.

:class:`PandasFrames` implements :class:`~lakehouse.quality.frames.Frames` for local tables.
Its frames carry the values Spark's would: timestamps as naive UTC (the product's Spark
session runs in UTC), integers as nullable integers (a NULL batch id stays NULL, never
``nan``), a value's string form as Spark's ``CAST(x AS STRING)`` prints it. The unmatched
rows are explained by the same pure functions the Spark path hands its groups to
(:mod:`lakehouse.quality.explain`), and their table is written with delta-rs under the same
schema and kind (:mod:`lakehouse.quality.unmatched`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from lakehouse.dimension.layout import (
    EVENT_TIME,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TOPIC,
    OP,
    SEQ,
)
from lakehouse.errors import TableNotFoundError, UnsupportedTableError
from lakehouse.join.layout import (
    ARRIVAL_BATCH,
    ARRIVED_AT,
    BATCH_ID,
    BUILD_VERSION,
    JOIN_MODE,
    LATE,
    MATCHED,
    POSITION,
    RELEASED_BY,
    TIME_MS,
)
from lakehouse.join.options import MS_PER_UNIT, TimeUnit
from lakehouse.quality.explain import Change, explain_pending, explain_unmatched
from lakehouse.quality.frames import (
    ARRIVED_KINDS,
    PENDING_AGE,
    UNMATCHED,
    Engine,
    malformed_filter_batches,
    output_stand_in_schema,
)
from lakehouse.quality.unmatched import (
    DETAIL,
    EXPLAINED_AT,
    MAX_VERSIONS_READ,
    REASON,
    STATE,
    TIME,
    LastBatch,
    Unmatched,
    nearest_read,
)
from lakehouse.table_kinds import TableKind, creation_properties
from lakehouse.time import WATERMARK_MIN, Watermark

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql.types import StructType

    from lakehouse.quality._ledger import Ledger

# A frame's Arrow schema as read (pandas' dtypes lose it for empty or all-NULL columns); the
# unmatched-rows table is written with the source's types.
_ARROW_SCHEMA = "lakehouse.arrow_schema"
_EPOCH = dt.datetime(1970, 1, 1)


def open_table(uri: str, version: int | None) -> DeltaTable:
    """The table's log at ``version`` (latest when None), through delta-rs.

    Raises:
        TableNotFoundError: no table there, or no such version.
    """
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri):
        raise TableNotFoundError.at(uri)
    try:
        return DeltaTable(uri, version=version)
    except Exception as e:
        raise TableNotFoundError(
            f"Delta table '{uri}' has no version {version}: {_first_line(e)}", table_uri=uri
        ) from e


def read_arrow(
    uri: str,
    version: int | None,
    columns: Sequence[str] | None = None,
    *,
    table: DeltaTable | None = None,
) -> pa.Table:
    """The table at ``version`` (latest when None) as an Arrow table, through delta-rs;
    ``table``: its log, when the caller has opened it already (:func:`open_table`).

    Raises:
        TableNotFoundError: no table there, or no such version.
        UnsupportedTableError: delta-rs cannot read it (a protocol feature it lacks).
    """
    opened = table if table is not None else open_table(uri, version)
    try:
        return opened.to_pyarrow_table(columns=list(columns) if columns is not None else None)
    except Exception as e:
        raise UnsupportedTableError(
            f"delta-rs cannot read table '{uri}' at version {version}: {_first_line(e)}; "
            "run the report on Spark (lakehouse quality --engine spark)",
            table_uri=uri,
            feature="delta-rs read",
        ) from e


def to_pandas(table: pa.Table) -> pd.DataFrame:
    """``table`` as pandas with Spark's values: nullable integers and booleans, timestamps
    as naive UTC. The Arrow schema is kept in ``attrs``."""
    import pandas as pd
    import pyarrow as pa

    nullable = {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }
    df = table.to_pandas(types_mapper=nullable.get)
    for f in table.schema:
        if pa.types.is_timestamp(f.type) and f.type.tz is not None:
            df[f.name] = df[f.name].dt.tz_convert("UTC").dt.tz_localize(None)
    df.attrs[_ARROW_SCHEMA] = table.schema
    return df


def spark_string(value: Any) -> str | None:
    """``value`` as Spark's ``CAST(value AS STRING)`` prints it (None for NULL).

    >>> import pandas as pd
    >>> [spark_string(v) for v in (True, 3, 2.5, Decimal("1.50"), pd.NA)]
    ['true', '3', '2.5', '1.50', None]
    >>> spark_string(pd.Timestamp("2024-05-01 10:00:00.250")), spark_string(dt.date(2024, 5, 1))
    ('2024-05-01 10:00:00.25', '2024-05-01')
    """
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        ts = pd.Timestamp(value)
        text = ts.strftime("%Y-%m-%d %H:%M:%S")
        micros = ts.microsecond
        return text + (f".{micros:06d}".rstrip("0") if micros else "")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _epoch_ms(series: pd.Series) -> pd.Series:
    """Naive-UTC timestamps as epoch milliseconds (nullable); Spark's ``unix_millis``."""
    import pandas as pd

    values = pd.to_datetime(series)
    ms = (values - pd.Timestamp(_EPOCH)) // pd.Timedelta(milliseconds=1)
    return ms.astype("Int64")


class PandasFrames:
    """The report's frames as pandas DataFrames read by delta-rs; see
    :mod:`lakehouse.quality.frames`."""

    engine: Engine = "pandas"

    def read(self, uri: str, version: int) -> pd.DataFrame:
        return to_pandas(read_arrow(uri, version))

    def empty_output(self, pending_schema: StructType, id_columns: Sequence[str]) -> pd.DataFrame:
        import pyarrow as pa
        from deltalake import Schema

        spark_schema = output_stand_in_schema(pending_schema, id_columns)
        # Delta's schema JSON is Spark's: delta-rs gives the Arrow types it reads them as
        schema = pa.schema(Schema.from_json(spark_schema.json()).to_arrow())
        return to_pandas(schema.empty_table())

    def count(self, df: pd.DataFrame) -> int:
        return len(df)

    def rows(self, rows: Sequence[tuple[Any, ...]], schema: StructType) -> pd.DataFrame:
        import pandas as pd
        from pyspark.sql.types import LongType

        df = pd.DataFrame.from_records(list(rows), columns=schema.fieldNames())
        for f in schema.fields:
            if isinstance(f.dataType, LongType):
                df[f.name] = df[f.name].astype("Int64")
        return df

    def probe_ids(self, output: pd.DataFrame, pending: pd.DataFrame, probe_id: str) -> pd.DataFrame:
        import pandas as pd

        def part(df: pd.DataFrame, table: str, batch: str) -> pd.DataFrame:
            return pd.DataFrame(
                {
                    "probe_id": df[probe_id].to_numpy(dtype=object),
                    "_table": table,
                    "_batch_id": df[batch].astype("Int64").to_numpy(),
                }
            )

        ids = pd.concat(
            [part(output, "output", BATCH_ID), part(pending, "pending", ARRIVAL_BATCH)],
            ignore_index=True,
        )
        ids["_batch_id"] = ids["_batch_id"].astype("Int64")
        return ids

    def with_reason(
        self, df: pd.DataFrame, reasons_uri: str, state: str
    ) -> tuple[pd.DataFrame, list[str]]:
        if not set(POSITION) <= set(df.columns):
            return df, []
        why = to_pandas(read_arrow(reasons_uri, None, columns=[STATE, *POSITION, REASON]))
        why = (
            why[why[STATE] == state][[*POSITION, REASON]]
            .dropna(subset=list(POSITION))  # NULL positions join nothing, as in SQL
            .drop_duplicates(subset=list(POSITION))  # so no row of df is repeated
        )
        for c in POSITION:
            why[c] = why[c].astype(df[c].dtype)
        joined = df.merge(why, on=list(POSITION), how="left")
        joined.attrs = dict(df.attrs)
        return joined, [REASON]

    def with_unmatched(
        self, output: pd.DataFrame, id_columns: Sequence[str], reason: bool
    ) -> pd.DataFrame:
        import pandas as pd

        matched = output[MATCHED].fillna(False).astype(bool)
        texts: list[str | None] = []
        columns = [output[c].tolist() for c in id_columns]
        batches = output[BATCH_ID].tolist()
        reasons = output[REASON].tolist() if reason else [None] * len(output)
        for i, ok in enumerate(matched.tolist()):
            if ok:
                texts.append(None)
                continue
            named = [
                f"{c}={spark_string(values[i]) or 'NULL'}"
                for c, values in zip(id_columns, columns, strict=True)
            ]
            why = reasons[i] if isinstance(reasons[i], str) else "reason not recorded"
            batch = spark_string(batches[i])
            # concat_ws skips a NULL part, as Spark's does for a NULL batch id
            parts: list[str] = [*named, *([f"(batch {batch}):"] if batch is not None else [])]
            texts.append(" ".join([*parts, str(why)]))
        out = output.copy()
        out[UNMATCHED] = pd.Series(texts, index=output.index, dtype=object)
        return out

    def released_late(self, output: pd.DataFrame) -> int:
        if RELEASED_BY not in output.columns:
            return 0
        return int((output[RELEASED_BY] == LATE).sum())

    def with_pending_age(
        self, pending: pd.DataFrame, now_ms: int
    ) -> tuple[pd.DataFrame, int | None]:
        import pandas as pd

        aged = pending.assign(**{PENDING_AGE: now_ms - _epoch_ms(pending[ARRIVED_AT])})
        oldest = aged[PENDING_AGE].max() if len(aged) else None
        return aged, None if oldest is None or pd.isna(oldest) else int(oldest)

    def malformed_dead_letters(self, uri: str, version: int, ledger: Ledger) -> dict[int, int]:
        pipelines, batches = malformed_filter_batches(ledger)
        df = to_pandas(read_arrow(uri, version, columns=["_batch_id", "_error_kind", "_pipeline"]))
        keep = df["_batch_id"].isin(batches) & ~df["_error_kind"].isin(ARRIVED_KINDS)
        if pipelines:
            keep &= df["_pipeline"].isin(pipelines)
        counts = df[keep.fillna(False).astype(bool)]["_batch_id"].value_counts()
        return {int(str(k)): int(v) for k, v in counts.items()}

    def explain_rows(self, **kw: Any) -> Unmatched:
        return _explain_rows(**kw)

    def release(self, *frames: Any) -> None:
        pass  # nothing is cached


# --------------------------------------------------------------------------- unmatched rows


def _time_ms(df: pd.DataFrame, probe_time: str | None, unit: TimeUnit) -> pd.Series:
    """The probe time of output rows in epoch ms, as the join computed it (Spark's path:
    :func:`lakehouse.quality.unmatched._time_ms`)."""
    import pandas as pd
    from pandas.api import types

    if probe_time is None or probe_time not in df.columns:
        return pd.Series([pd.NA] * len(df), index=df.index, dtype="Int64")
    col = df[probe_time]
    if types.is_datetime64_any_dtype(col):
        return _epoch_ms(col)
    if types.is_bool_dtype(col):
        return pd.Series([pd.NA] * len(df), index=df.index, dtype="Int64")
    if types.is_numeric_dtype(col):
        factor = MS_PER_UNIT[unit]
        values = [
            pd.NA if pd.isna(v) else int(float(v) * factor)  # a cast to bigint truncates
            for v in col.tolist()
        ]
        return pd.Series(values, index=df.index, dtype="Int64")
    if len(col) and all(
        isinstance(v, dt.date) and not isinstance(v, dt.datetime) for v in col.dropna()
    ):
        return _epoch_ms(pd.to_datetime(col))
    parsed = pd.to_datetime(col.astype("string"), errors="coerce", utc=True)
    return _epoch_ms(parsed.dt.tz_localize(None))


def _key_strings(table: pa.Table, columns: Sequence[str]) -> list[tuple[str | None, ...]]:
    """Each row's key as strings: the build's and the probe's key types may differ (int vs
    bigint), as they may in the join itself, so both sides are compared as strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cast = [pc.cast(table.column(c), pa.string()).to_pylist() for c in columns]
    return list(zip(*cast, strict=True)) if cast else [() for _ in range(table.num_rows)]


def _build_changes(
    build_table: str, versions: Sequence[int], build_key: Sequence[str]
) -> tuple[dict[int, dict[tuple[str | None, ...], list[Change]]], dict[int, list[Change]]]:
    """Per build version read (the newest :data:`MAX_VERSIONS_READ` that are readable and
    have the key columns): each key's changes, and the version's truncates."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    changes: dict[int, dict[tuple[str | None, ...], list[Change]]] = {}
    truncates: dict[int, list[Change]] = {}
    if not versions or not build_key or not DeltaTable.is_deltatable(build_table):
        return changes, truncates
    for v in sorted(versions, reverse=True):
        if len(changes) == MAX_VERSIONS_READ:
            break
        try:
            log = open_table(build_table, v)
            names = {f.name for f in log.schema().fields}
            if not set(build_key) <= names:
                continue
            kafka = [KAFKA_TOPIC, KAFKA_PARTITION, KAFKA_OFFSET]
            has_pos = set(kafka) <= names
            wanted = [*build_key, OP, EVENT_TIME, SEQ, *(kafka if has_pos else [])]
            table = read_arrow(build_table, v, wanted, table=log)
        except (TableNotFoundError, UnsupportedTableError):
            continue  # vacuumed or unreadable: the next version read explains its rows
        start = pc.cast(pc.cast(table.column(EVENT_TIME), pa.timestamp("us")), pa.int64())
        seq = pc.cast(table.column(SEQ), pa.string()).to_pylist()
        ops = table.column(OP).to_pylist()
        pos: list[str | None]
        if has_pos:
            topics, parts, offsets = (table.column(c).to_pylist() for c in kafka)
            pos = [
                f"{t or ''}/{'' if p is None else p}@{'' if o is None else o}"
                for t, p, o in zip(topics, parts, offsets, strict=True)
            ]
        else:
            pos = [None] * table.num_rows
        by_key: dict[tuple[str | None, ...], list[Change]] = {}
        cut: list[Change] = []
        for key, t, s, op, p in zip(
            _key_strings(table, build_key), start.to_pylist(), seq, ops, pos, strict=True
        ):
            change = Change(int(t), str(s), str(op), p)
            if op == "t":
                cut.append(change)
            else:
                by_key.setdefault(key, []).append(change)
        changes[v] = by_key
        truncates[v] = cut
    return changes, truncates


def _values(series: pd.Series) -> list[Any]:
    """The column's values with every kind of pandas NULL as None."""
    import pandas as pd

    return [None if v is None or v is pd.NaT or v is pd.NA or v != v else v for v in series]


def _arrow_type(df: pd.DataFrame, column: str, default: pa.DataType) -> pa.DataType:
    schema = df.attrs.get(_ARROW_SCHEMA)
    if schema is not None and column in schema.names:
        return schema.field(column).type
    return default


def _explain_rows(
    *,
    output: pd.DataFrame,
    pending: pd.DataFrame,
    build_table: str,
    build_key: Sequence[str],
    probe_id: str,
    probe_key: Sequence[str],
    probe_time: str | None,
    probe_time_unit: TimeUnit,
    last_batch: LastBatch | None,
    uri: str,
    examples: int,
) -> Unmatched:
    import pandas as pd
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    ids = list(dict.fromkeys([probe_id, *probe_key]))
    position = [c for c in POSITION if c in output.columns]
    rows = output[~output[MATCHED].fillna(False).astype(bool)]
    times = _time_ms(rows, probe_time, probe_time_unit).tolist()
    versions_of = rows[BUILD_VERSION].astype("Int64").tolist()
    versions = sorted({int(v) for v in versions_of if v is not pd.NA})
    changes, truncates = _build_changes(build_table, versions, build_key)
    read = sorted(changes)
    at = nearest_read(versions, read) if read else {v: v for v in versions}
    probe_keys = (
        _key_strings(pa.table({k: pa.array(_values(rows[k])) for k in probe_key}), probe_key)
        if len(rows)
        else []
    )
    modes = rows[JOIN_MODE].tolist()
    reasons: list[str] = []
    details: list[str] = []
    explained_at: list[int | None] = []
    for i in range(len(rows)):
        v = versions_of[i]
        a = None if v is pd.NA else at[int(v)]
        t = times[i]
        e = explain_unmatched(
            time_us=None if modes[i] == "proctime" or t is pd.NA else int(t) * 1000,
            key_is_null=any(k is None for k in probe_keys[i]),
            changes=changes.get(a, {}).get(probe_keys[i], []) if read and a is not None else (),
            truncates=truncates.get(a, []) if a is not None else [],
            build_version=a if read else None,
        )
        reasons.append(e.reason)
        details.append(e.detail)
        explained_at.append(a if read else None)

    none = Watermark(WATERMARK_MIN)
    pending_times = pending[TIME_MS].astype("Int64").tolist()
    pending_reasons = [
        explain_pending(
            time_ms=None if t is pd.NA else int(t),
            marker_complete=last_batch.marker_complete if last_batch else False,
            combined=last_batch.combined if last_batch else none,
            probe=last_batch.probe if last_batch else none,
            build=last_batch.build if last_batch else none,
        )
        for t in pending_times
    ]

    # the table, in the Spark path's column order and types
    fields = [pa.field(STATE, pa.string())]
    fields += [
        pa.field(c, _arrow_type(output, c, _arrow_type(pending, c, pa.string()))) for c in ids
    ]
    fields += [
        pa.field(JOIN_MODE, pa.string()),
        pa.field(BUILD_VERSION, pa.int64()),
        pa.field(BATCH_ID, pa.int64()),
    ]
    fields += [pa.field(c, _arrow_type(output, c, pa.int64())) for c in position]
    fields += [
        pa.field(EXPLAINED_AT, pa.int64()),
        pa.field(REASON, pa.string()),
        pa.field(DETAIL, pa.string()),
        pa.field(TIME, pa.timestamp("us", tz="UTC")),
    ]
    schema = pa.schema(fields)
    pending_position = [c for c in position if c in pending.columns]
    columns: dict[str, list[Any]] = {
        STATE: ["unmatched"] * len(rows) + ["pending"] * len(pending),
        **{c: rows[c].tolist() + pending[c].tolist() for c in ids},
        JOIN_MODE: modes + [None] * len(pending),
        BUILD_VERSION: versions_of + [None] * len(pending),
        BATCH_ID: rows[BATCH_ID].tolist() + pending[ARRIVAL_BATCH].tolist(),
        **{
            c: rows[c].tolist()
            + (pending[c].tolist() if c in pending_position else [None] * len(pending))
            for c in position
        },
        EXPLAINED_AT: explained_at + [None] * len(pending),
        REASON: reasons + [e.reason for e in pending_reasons],
        DETAIL: details + [e.detail for e in pending_reasons],
        TIME: times + pending_times,
    }
    clean = {
        name: [None if v is pd.NA or v is pd.NaT else v for v in values]
        for name, values in columns.items()
    }
    clean[TIME] = [None if t is None else int(t) * 1000 for t in clean[TIME]]
    table = pa.table(
        {
            f.name: pa.array(clean[f.name], type=pa.int64() if f.name == TIME else f.type)
            for f in schema
        }
    ).cast(schema)
    write_deltalake(
        uri,
        table,
        mode="overwrite",
        schema_mode="overwrite" if DeltaTable.is_deltatable(uri) else None,
    )
    # delta-rs takes no properties of other names than delta.* at creation: the kind
    # follows in the next commit (a run stopped between them leaves it to the next run)
    written = DeltaTable(uri)
    kind = creation_properties(TableKind.UNMATCHED)
    if any(written.metadata().configuration.get(k) != v for k, v in kind.items()):
        written.alter.set_table_properties(kind, raise_if_not_exists=False)

    counts: dict[tuple[Any, Any], int] = {}
    for state, reason in zip(clean[STATE], clean[REASON], strict=True):
        counts[(state, reason)] = counts.get((state, reason), 0) + 1
    by_reason = {reason: n for (_, reason), n in counts.items()}  # a reason has one state
    later = (
        sum(
            1
            for e, v in zip(clean[EXPLAINED_AT], clean[BUILD_VERSION], strict=True)
            if e is not None and v is not None and e > v
        )
        if read
        else 0
    )
    return Unmatched(
        uri=uri,
        unmatched=sum(n for (state, _), n in counts.items() if state == "unmatched"),
        pending=sum(n for (state, _), n in counts.items() if state == "pending"),
        by_reason=dict(sorted(by_reason.items(), key=lambda kv: (-kv[1], kv[0]))),
        examples=_examples(table, ids, examples),
        versions_read=tuple(read),
        explained_later=later,
    )


def _examples(table: pa.Table, ids: Sequence[str], n: int) -> tuple[Mapping[str, Any], ...]:
    """The first ``n`` rows in the Spark path's order: unmatched before pending, oldest
    first (no time last), then by probe id and key."""
    if not n:
        return ()
    rows = table.to_pylist()

    def order(r: Mapping[str, Any]) -> tuple[Any, ...]:
        t = r[TIME]
        ids_key = tuple((r[c] is not None, r[c]) for c in ids)  # NULL first, as Spark's asc
        return (r[STATE] != "unmatched", t is None, t if t is not None else 0, ids_key)

    out = []
    for r in sorted(rows, key=order)[:n]:
        t = r[TIME]
        out.append({**r, TIME: None if t is None else t.astimezone(dt.UTC).replace(tzinfo=None)})
    return tuple(out)
