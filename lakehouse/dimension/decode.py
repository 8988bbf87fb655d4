"""Decoding raw Debezium records on the executors: the JVM first, Python for the rest.

:func:`decode_raw` turns a DataFrame of raw source records (``lakehouse.sources`` schema:
key, value, topic, partition, offset, timestamp) into one row per record of
:data:`DECODED_DDL`, followed by the JVM decode's typed row images. The JVM decodes the common
record (:mod:`lakehouse.dimension.jvm_decode`); the records it leaves go through the Python
decoder in Spark's Python workers (``mapInArrow``), batch by batch. Nothing but the schemas
of the records left is collected to the driver. Every record yields exactly one output row:

* ``_kind = 'change'``: a change event; its row image's columns and types are listed in
  ``_row_columns``. The image itself is typed when the JVM decoded the record (one column
  per known schema, after the raw ones: :func:`lakehouse.dimension.jvm_decode.image_columns`),
  else ``_row_json``: typed values as JSON that Spark's ``from_json`` parses into those types
  (:func:`lakehouse.dimension.jvm_decode.row_text` gives either as this text);
* ``_kind = 'tombstone' | 'transaction' | 'schema_change'``: recognised, not a row change;
  for a schema change (DDL), ``_schema_change`` is its JSON summary (:func:`schema_change_json`)
  and ``_source_table`` the first table it concerns (``db.table``), so the sink can record it
  with the build table it concerns;
* ``_kind = 'error'``: not decodable; ``_error_kind`` and ``_error`` say why. The raw bytes
  are kept, so the record can go to the dead-letter table.

The persisted decode keeps the raw ``key`` and ``value`` only of the records the Python
decoder read (errors among them); a record the JVM decoded has them NULL, and
:data:`RAW_HASH`. A plan that refuses such a record (a dead letter) gets its bytes back from
the batch's source records with :func:`with_raw`.

The decoder is the boundary around per-record code: a record can never fail the batch. An
exception other than :class:`~lakehouse.errors.CdcDecodeError` is a decoder bug; it is still
turned into an ``error`` row (kind ``internal_error``, with the exception's text) rather than
losing the batch, and the test suite treats any such row as a failure.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from lakehouse.cdc import (
    ChangeEvent,
    SchemaChange,
    SchemaHandle,
    Tombstone,
    TransactionMarker,
    decode_message,
    parse_schema,
)
from lakehouse.cdc import row_to_json as _row_to_json
from lakehouse.dimension.jvm_decode import (
    MAX_KNOWN,
    RAW_HASH,
    WireSchemas,
    decode_fast,
    image_columns,
    image_groups,
    schema_mark,
)
from lakehouse.dimension.layout import LINEAGE_COLUMNS
from lakehouse.dimension.summary import python_pass_needed, summarise
from lakehouse.errors import CdcDecodeError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

DECODED_DDL: Final = (
    "_kind string, _error_kind string, _error string, _op string, _source_table string, "
    "_snapshot_phase string, _event_time_ms bigint, _seq string, _row_json string, "
    "_row_columns string, _key_json string, _key_columns string, _schema_change string, "
    "_connect_schema string, "
    "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp"
)

_OUT_FIELDS: Final = (
    "_kind",
    "_error_kind",
    "_error",
    "_op",
    "_source_table",
    "_snapshot_phase",
    "_event_time_ms",
    "_seq",
    "_row_json",
    "_row_columns",
    "_key_json",
    "_key_columns",
    "_schema_change",
    "_connect_schema",
)
_RAW_FIELDS: Final = ("key", "value", "topic", "partition", "offset", "timestamp")


#: The build table's lineage column names, case-folded (a source column may not take one).
_RESERVED_FOLDED: Final = frozenset(c.casefold() for c in LINEAGE_COLUMNS)


def decode_record(
    value: bytes | None,
    key: bytes | None,
    *,
    max_bytes: int,
    schemas: dict[str, SchemaHandle] | None = None,
) -> dict[str, Any]:
    """Decode one raw record into the decoded columns (without the raw ones).

    ``schemas``: the newest Connect schema per source table so far, in stream order (see
    :mod:`lakehouse.dimension.connect_schemas`): a change event without a schema is read with
    its table's, and one with a schema moves its table on to it and writes the schema's text
    in ``_connect_schema`` (the driver keeps the schema of each table's newest record);
    updated in place.

    >>> decode_record(b'{"op": "t", "ts_ms": 5, "source": {"ts_ms": 4}}', None,
    ...               max_bytes=1024)["_op"]
    't'
    >>> decode_record(b'not json', None, max_bytes=1024)["_error_kind"]
    'malformed_json'
    """
    out: dict[str, Any] = dict.fromkeys(_OUT_FIELDS)
    try:
        decoded = decode_message(value, key, max_bytes=max_bytes, schemas=schemas)
    except CdcDecodeError as e:
        out.update(_kind="error", _error_kind=e.kind, _error=str(e))
        return out
    except Exception as e:  # decoder bug: keep the record, say so
        out.update(_kind="error", _error_kind="internal_error", _error=f"{type(e).__name__}: {e}")
        return out
    if isinstance(decoded, ChangeEvent):
        reserved = sorted(
            name for name, _ in decoded.columns if name.casefold() in _RESERVED_FOLDED
        )
        if reserved:
            # the build table's own lineage columns: dropping the source's would lose data
            out.update(
                _kind="error",
                _error_kind="reserved_column",
                _error=f"source column(s) {reserved} are named like the build table's lineage "
                "columns; rename them at the source or with a Debezium column.rename SMT",
            )
            return out
        try:
            row_json = None if decoded.row is None else _row_to_json(decoded.row)
            key_json = None if decoded.key is None else _row_to_json(decoded.key)
        except Exception as e:  # a value the JSON writer cannot represent
            out.update(_kind="error", _error_kind="invalid_value", _error=str(e))
            return out
        out.update(
            _kind="change",
            _op=decoded.op,
            _source_table=decoded.source_table,
            _snapshot_phase=decoded.snapshot,
            _event_time_ms=decoded.event_time_ms,
            _seq=decoded.seq,
            _row_json=row_json,
            _row_columns=json.dumps(list(decoded.columns)),
            _key_json=key_json,
            _key_columns=json.dumps(list(decoded.key_columns)),
        )
        table = decoded.source_table
        own = decoded.schema if not decoded.schema_given else None
        if schemas is not None and own is not None and table is not None:
            out["_connect_schema"] = own.text
            schemas[table] = own
    elif isinstance(decoded, Tombstone):
        out["_kind"] = "tombstone"
    elif isinstance(decoded, TransactionMarker):
        out["_kind"] = "transaction"
    elif isinstance(decoded, SchemaChange):
        try:
            summary = schema_change_summary(decoded)
        except Exception as e:  # a decoder bug; the record is kept with the reason
            out.update(_kind="error", _error_kind="internal_error", _error=f"schema change: {e}")
            return out
        out["_kind"] = "schema_change"
        out["_source_table"] = summary["tables"][0] if summary["tables"] else decoded.db
        out["_event_time_ms"] = decoded.event_time_ms
        out["_schema_change"] = json.dumps(summary, ensure_ascii=False)
    else:  # pragma: no cover - the decoder's result type is closed
        out.update(_kind="error", _error_kind="internal_error", _error=repr(decoded))
    return out


#: Longest DDL text kept in a schema-change summary (the rest is cut, with a marker).
MAX_DDL_CHARS: Final = 2000


def _table_id(raw: str) -> str:
    """``"db"."table"`` (Debezium's table id) -> ``db.table``."""
    return ".".join(part.strip('"`') for part in raw.split(".") if part.strip('"`'))


def schema_change_summary(change: SchemaChange) -> dict[str, Any]:
    """What the sink records of a Debezium schema-change event: the DDL (cut at
    :data:`MAX_DDL_CHARS`), the tables it concerns (``db.table``, from ``tableChanges``, else
    ``source.db`` + ``source.table``), the change types, the columns after the change, and the
    event time.

    >>> from lakehouse.cdc import decode_message
    >>> ddl = decode_message(b'{"ddl": "ALTER TABLE t ADD c INT", "databaseName": "db", '
    ...                      b'"source": {"db": "db", "table": "t", "ts_ms": 5}}')
    >>> schema_change_summary(ddl)["tables"], schema_change_summary(ddl)["ts_ms"]
    (['db.t'], 5)
    """
    tables = [_table_id(c.id) for c in change.table_changes if c.id]
    if not tables and change.table:
        prefix = change.schema_name or change.db
        tables = [f"{prefix}.{change.table}" if prefix else change.table]
    ddl = change.ddl
    if ddl is not None and len(ddl) > MAX_DDL_CHARS:
        ddl = ddl[:MAX_DDL_CHARS] + f"... ({len(change.ddl or '')} characters)"
    return {
        "ddl": ddl,
        "tables": list(dict.fromkeys(tables)),
        "changes": [
            {"type": c.type, "table": _table_id(c.id), "columns": list(c.columns)}
            for c in change.table_changes
        ],
        "ts_ms": change.event_time_ms,
    }


def _complete_batches(
    max_bytes: int,
    schema_texts: Mapping[str, str],
    marks: Mapping[str, str] | None = None,
    passed: Sequence[str] = (),
) -> Any:
    """``mapInArrow`` function: decode in Python the records the JVM left undecoded (NULL
    ``_kind``), in stream order; the records it decoded pass through, moving their table on
    to their schema as they go (a later record of the same source partition without a schema
    is read with it, and so is one the JVM read without a schema: such a change event kept
    its raw value). The order is each source partition's (topic and partition): a Spark
    partition may hold several (the sink merges them into fewer tasks), one after the
    other, and each starts from the tables' recorded schemas. The columns
    ``passed`` (the typed row images, NULL for a record decoded here) pass through. ``marks``:
    the schema texts of the JVM's ``_connect_schema`` marks
    (:meth:`~lakehouse.dimension.jvm_decode.WireSchemas.marks`). A record decoded here says
    its schema as the JVM says it where it can: ``''`` for its table's schema at the start of
    the batch, the mark of one the JVM knows, else the text."""
    texts = dict(marks or {})

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        # per source partition, in its order: each starts from the table's recorded schemas
        starts: dict[str, SchemaHandle] = {}
        marked: dict[str, SchemaHandle] = {}  # by mark, parsed when first met
        for table, text in schema_texts.items():
            with contextlib.suppress(CdcDecodeError):  # kept texts were whole schemas
                starts[table] = parse_schema(text)
        newest: dict[tuple[str, int], dict[str, SchemaHandle]] = {}
        for batch in batches:
            again: list[int] = []
            kinds = batch.column("_kind").to_pylist()
            columns = {name: batch.column(name).to_pylist() for name in _OUT_FIELDS}
            values = batch.column("value").to_pylist()
            keys = batch.column("key").to_pylist()
            sources = zip(
                batch.column("topic").to_pylist(),
                batch.column("partition").to_pylist(),
                strict=True,
            )
            for i, (kind, source) in enumerate(zip(kinds, sources, strict=True)):
                schemas = newest.get(source)
                if schemas is None:
                    schemas = newest[source] = dict(starts)
                if (
                    kind == "change"
                    and values[i] is not None
                    and columns["_source_table"][i] in schemas
                ):
                    # read by the JVM without a schema, after a record that brought its
                    # table's: the Python decoder reads it with that schema (and its typed
                    # image, if the JVM gave one, is not the record's)
                    kind = None
                    again.append(i)
                if kind is None:
                    decoded = decode_record(
                        values[i], keys[i], max_bytes=max_bytes, schemas=schemas
                    )
                    text = decoded["_connect_schema"]
                    if text is not None:  # said as the JVM says it, where it can be
                        if text == schema_texts.get(decoded["_source_table"]):
                            decoded["_connect_schema"] = ""
                        elif (mark := schema_mark(text)) in texts:
                            decoded["_connect_schema"] = mark
                    for name in _OUT_FIELDS:
                        columns[name][i] = decoded[name]
                    continue
                table, text = columns["_source_table"][i], columns["_connect_schema"][i]
                if kind == "change" and table is not None and text is not None:
                    if text == "":
                        if table in starts:
                            schemas[table] = starts[table]
                    elif text in texts:
                        with contextlib.suppress(CdcDecodeError):
                            if text not in marked:
                                marked[text] = parse_schema(texts[text])
                            schemas[table] = marked[text]
            arrays = [
                pa.array(columns[n], pa.int64() if n == "_event_time_ms" else pa.string())
                for n in _OUT_FIELDS
            ]
            arrays += [batch.column(n) for n in _RAW_FIELDS]
            arrays += [
                batch.column(n) if n == RAW_HASH else _nulled(batch.column(n), again)
                for n in passed
            ]
            yield pa.RecordBatch.from_arrays(arrays, names=[*_OUT_FIELDS, *_RAW_FIELDS, *passed])

    return run


def _nulled(column: pa.Array, rows: Sequence[int]) -> pa.Array:
    """``column`` with NULL at ``rows``."""
    if not rows:
        return column
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = [False] * len(column)
    for i in rows:
        mask[i] = True
    return pc.if_else(pa.array(mask), pa.nulls(len(column), column.type), column)


def decode_raw(
    raw: DataFrame,
    *,
    max_record_bytes: int = 16 * 1024 * 1024,
    schemas: Mapping[str, str] | None = None,
    wire: WireSchemas | None = None,
) -> DataFrame:
    """Decode raw source records; one output row per input record, **persisted** (the
    caller unpersists it).

    The JVM decodes the records it can (:func:`decode_start`); only when some are left (or
    read without their schema in a batch that brings it, see
    :func:`lakehouse.dimension.summary.python_pass_needed`) does a second pass decode those
    in Python (:func:`decode_rest`). ``wire`` holds the schemas
    the JVM knows and learns those of this batch's records (when it knows none, from the
    batch's first record first). ``schemas``: the build tables' recorded Connect schemas by
    source table (texts) at the start of the batch."""
    wire = WireSchemas() if wire is None else wire
    fast = decode_start(raw, max_record_bytes=max_record_bytes, schemas=schemas, wire=wire)
    summary = summarise(fast)[0]
    wire.learn_shapes(summary)
    if not python_pass_needed(summary):
        return fast
    return decode_rest(fast, max_record_bytes=max_record_bytes, schemas=schemas, wire=wire)


def decode_start(
    raw: DataFrame,
    *,
    max_record_bytes: int,
    schemas: Mapping[str, str] | None,
    wire: WireSchemas,
) -> DataFrame:
    """The JVM's decode of the records (:func:`lakehouse.dimension.jvm_decode.decode_fast`),
    **persisted** and not yet computed: a record it cannot decode exactly has a NULL
    ``_kind``, for :func:`decode_rest`. The caller's first job over it (its summary, say)
    computes it once and tells whether any is left.

    Only the records left keep their raw ``key`` and ``value``; every record has
    :data:`RAW_HASH`, by which :func:`with_raw` gives a decoded record its raw bytes back."""
    first = wire.peek(lambda: _texts(raw.select("key", "value").limit(1).collect()))
    # a first record without a Connect schema: its row image's shape, learned now, comes out
    # typed from this batch on (else from the next), so the next batch's decode has the same
    # image columns as this one's (a steady batch in one pass, module .one_pass)
    wire.learn_shapes(_bare_shape(value, key, max_record_bytes) for key, value in first)
    # the raw text (about 2 kB a record with Connect schemas) is most of a record's size, and
    # the batch's plans read the decoded columns: decode_fast keeps it only where Python
    # needs it
    return decode_fast(raw, wire, max_bytes=max_record_bytes, start=dict(schemas or {})).persist()


def decode_rest(
    fast: DataFrame,
    *,
    max_record_bytes: int,
    schemas: Mapping[str, str] | None,
    wire: WireSchemas,
) -> DataFrame:
    """Decode in Python the records :func:`decode_start` left (NULL ``_kind``), keeping the
    JVM's rows; the result is **persisted** and computed, ``fast`` unpersisted. ``wire``
    learns the schemas of the records left, so that the JVM decodes them from the next batch
    on."""
    from pyspark.sql import functions as F

    left = fast.filter(F.col("_kind").isNull())
    payload = F.lit('"payload":')
    seen = (
        left.select(
            *[
                F.concat(F.substring_index(F.col(c).cast("string"), '"payload":', 1), payload)
                for c in ("key", "value")
            ]
        )
        .distinct()
        .limit(4 * MAX_KNOWN)
        .collect()
    )
    from pyspark.sql.types import StructType

    passed = [*(n for n, _ in image_columns(fast.schema)), RAW_HASH]
    decoded = cast("StructType", StructType.fromDDL(DECODED_DDL))
    schema = StructType([*decoded.fields, *[fast.schema[n] for n in passed]])
    complete = _complete_batches(max_record_bytes, dict(schemas or {}), wire.marks(), passed)
    done = fast.mapInArrow(complete, schema).persist()
    done.count()
    fast.unpersist()
    wire.learn_texts((_closed(k), _closed(v)) for k, v in seen)
    return done


def with_raw(rows: DataFrame, raw: DataFrame) -> DataFrame:
    """``rows`` of a persisted decode (:func:`decode_start`, :func:`decode_rest`) with their
    raw ``key`` and ``value``: those they kept, else those of the record of ``raw`` (the
    source records decoded) at the same position with the same :data:`RAW_HASH`. A record is
    never lost here (a left join; two equal records at one position are one record of
    ``raw``). For the rare rows that need it (dead letters): it reads the source again."""
    from pyspark.sql import functions as F

    on = ["topic", "partition", "offset", RAW_HASH]
    source = raw.select(
        "topic",
        "partition",
        "offset",
        F.xxhash64("key", "value").alias(RAW_HASH),
        F.col("key").alias("_source_key"),
        F.col("value").alias("_source_value"),
    ).dropDuplicates(on)
    kept = F.col("value").isNotNull()
    return (
        rows.join(source, on, "left")
        .withColumns(
            {
                "key": F.when(kept, F.col("key")).otherwise(F.col("_source_key")),
                "value": F.when(kept, F.col("value")).otherwise(F.col("_source_value")),
            }
        )
        .drop("_source_key", "_source_value")
    )


def _bare_shape(value: str | None, key: str | None, max_bytes: int) -> dict[str, Any]:
    """A record's summary entry as :meth:`WireSchemas.learn_shapes` reads it, when the record
    is a change event without a Connect schema (the Python decoder's ``_row_columns``, which
    the JVM writes alike); an entry it skips otherwise."""
    out = decode_record(
        None if value is None else value.encode("utf-8"),
        None if key is None else key.encode("utf-8"),
        max_bytes=max_bytes,
    )
    bare = out["_kind"] == "change" and out["_connect_schema"] is None
    return {**out, "kept": 1 if bare else 0, "schema": None}


def _closed(prefix: str | None) -> str | None:
    """A record's text up to its payload, closed so that it parses up to there."""
    return None if prefix is None else prefix + "null}"


def _texts(rows: Any) -> list[tuple[str | None, str | None]]:
    out = []
    for r in rows:
        pair = []
        for raw in (r["key"], r["value"]):
            try:
                pair.append(None if raw is None else bytes(raw).decode("utf-8"))
            except UnicodeDecodeError:
                pair.append(None)
        out.append((pair[0], pair[1]))
    return out


def row_images(
    schema: StructType, summary: Sequence[Mapping[str, Any]]
) -> list[tuple[str, StructType]]:
    """The typed row-image columns of a decoded frame's ``schema`` that the records of
    ``summary`` are in (its entries' ``images``, :func:`lakehouse.dimension.summary.summarise`):
    the images :func:`row_value` needs for them. All of them when an entry does not say."""
    images = image_columns(schema)
    if any("images" not in r for r in summary):
        return images
    groups = image_groups(schema)
    wanted = {n for r in summary for g in r["images"] for n in groups.get(g, ())}
    return [(n, t) for n, t in images if n in wanted]


def row_value(
    images: Sequence[tuple[str, StructType]],
    order: Sequence[str],
    types: Mapping[str, DataType],
    text: Column,
) -> Column:
    """A change record's row image in the table's columns ``order`` and ``types``, from a
    decoded frame whose records' typed images are in ``images`` (the JVM's,
    :func:`image_columns`). A typed image whose every column has the table's type is taken as
    it is.
    Any other image is its JSON text ``text`` (:func:`~lakehouse.dimension.jvm_decode.
    row_text`), read by ``from_json`` into the table's types: a column of another type (an
    int into a bigint, a number into a string) converts as a JSON value does, the same
    whichever decoder decoded the record. A record without an image (a delete without
    ``before``) reads its key's."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    value_struct = StructType([StructField(n, types.get(n, StringType()), True) for n in order])
    typed = []
    for name, image in images:
        image_types = {f.name: f.dataType for f in image.fields}
        if not all(n in types and types[n] == t for n, t in image_types.items()):
            continue
        columns = [
            (F.col(name)[n] if n in image_types else F.lit(None).cast(value_struct[n].dataType))
            for n in order
        ]
        row = F.struct(*[c.alias(n) for c, n in zip(columns, order, strict=True)])
        typed.append(F.when(F.col(name).isNotNull(), row))
    parsed = F.from_json(F.coalesce(text, F.col("_key_json")), value_struct)
    return F.coalesce(*typed, parsed) if typed else parsed
