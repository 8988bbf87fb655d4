"""A batch's summary for the driver: what the ingest sink decides from, read once.

:func:`summarise` is one Spark job: a grouped aggregation of the decoded records, one row
per :data:`KEY`, folded on the driver (:func:`fold`, pure) into :data:`Summary`: per group
for the plans, per partition for the end offsets, per source table, phase and partition for
the snapshot signals.

The same rows can come from the tasks that write a batch's rows instead
(:mod:`lakehouse.dimension.one_pass`): each record's :func:`record_summary`, aggregated per
task in the JVM (``dev.lakehouse.write.BatchSummary``, by the same functions), the tasks' rows
folded by :func:`fold_tasks` as :func:`summarise`'s are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lakehouse.dimension.jvm_decode import image_groups
from lakehouse.dimension.signals import Offsets

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

#: A summary row's group: record kind and error kind, source table, snapshot phase, column
#: set, key columns and topic-partition.
KEY = (
    "_kind",
    "_error_kind",
    "_source_table",
    "_snapshot_phase",
    "_row_columns",
    "_key_columns",
    "topic",
    "partition",
)

#: :func:`summarise`'s three answers (see there).
Summary = tuple[list[dict[str, Any]], Offsets, list[dict[str, Any]]]


def count_kinds(summary: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """Records per kind, and errors per error kind, from :func:`summarise`'s first answer.

    >>> count_kinds([{"_kind": "change", "_error_kind": None, "n": 3},
    ...     {"_kind": "error", "_error_kind": "invalid_json", "n": 1},
    ...     {"_kind": "change", "_error_kind": None, "n": 2}])
    ({'change': 5, 'error': 1}, {'invalid_json': 1})
    """
    kinds: dict[str, int] = {}
    errors: dict[str, int] = {}
    for r in summary:
        kinds[r["_kind"]] = kinds.get(r["_kind"], 0) + r["n"]
        if r["_kind"] == "error":
            errors[r["_error_kind"]] = errors.get(r["_error_kind"], 0) + r["n"]
    return kinds, errors


def summarise(decoded: DataFrame) -> Summary:
    """One Spark job for everything the driver decides from, returned three ways:

    * per record kind, error kind, source table, phase and column set: count ``n`` and the
      largest event time ``max_ts`` (the plan of each target);
    * the end offset of each partition read (``{topic: {partition: next offset}}``);
    * per source table, phase and partition, of the change records: count ``n``, largest
      offset ``o``, largest Kafka timestamp ``ts``, largest connector position ``seq`` and
      largest ``source.ts_ms`` ``src_ts`` (the snapshot signals).

    Each summary entry of change records also has ``schema``: the newest Connect schema its
    records brought, as ``(position, partition, offset, text)``, or None (see
    :func:`lakehouse.dimension.connect_schemas.newest_in_batch`); ``images``: the typed
    row-image columns its records' images are in (:func:`image_groups`), so that a table's
    plan reads those and not every known schema's; and ``kept``: how many of its records kept
    their raw value (of the JVM's decode alone: the change events it read without a Connect
    schema, see :func:`python_pass_needed`)."""
    from pyspark.sql import functions as F

    image = _image_group(decoded.schema)
    schema = F.when(
        F.col("_connect_schema").isNotNull(),
        F.struct(
            F.coalesce(F.col("_seq"), F.lit("")).alias("seq"),
            F.col("partition"),
            F.col("offset"),
            F.col("_connect_schema").alias("text"),
        ),
    )
    rows = (
        decoded.groupBy(*KEY)
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.max("_event_time_ms").alias("max_ts"),
            F.max("offset").alias("o"),
            F.unix_millis(F.max("timestamp")).alias("ts"),
            F.max("_seq").alias("seq"),
            F.max(schema).alias("schema"),
            F.collect_set(image).alias("images"),
            F.count_if(F.col("value").isNotNull()).alias("kept"),
        )
        .collect()
    )
    return fold([r.asDict() for r in rows])


def record_summary(schema: StructType) -> Column:
    """A decoded record's part of the batch's summary, as the struct the tasks of a one-pass
    write aggregate (``dev.lakehouse.write.BatchSummary``: its fields in this order): the
    group (:data:`KEY`), then what :func:`summarise` aggregates per group: the event time,
    offset, Kafka timestamp, connector position, Connect schema, image group and whether the
    record kept its raw value. ``schema``: the decoded records' schema. Its expression holds
    nothing of a batch: a caller may keep it for the batches of that schema."""
    from pyspark.sql import functions as F

    return F.struct(
        *[F.col(c) for c in KEY],
        F.col("_event_time_ms"),
        F.col("offset"),
        F.col("timestamp"),
        F.col("_seq"),
        F.col("_connect_schema"),
        _image_group(schema),
        F.col("value").isNotNull(),
    )


def fold_tasks(texts: Sequence[str]) -> Summary:
    """:data:`Summary` from the one-pass write's task summaries (``BatchSummary``'s JSON: per
    task, the rows :func:`summarise` would have of its records): a group's rows of several
    tasks fold as the aggregation's rows of several groups do (counts add, maxima take the
    greatest, image sets join).

    >>> row = {"_kind": "change", "_error_kind": None, "_source_table": "s.t",
    ...     "_snapshot_phase": None, "_row_columns": "[]", "_key_columns": "[]", "topic": "t",
    ...     "partition": 0, "n": 2, "max_ts": 7, "o": 11, "ts": 5, "seq": "a",
    ...     "schema": None, "images": ["i0"], "kept": 0}
    >>> summary, ends, groups = fold_tasks([json.dumps([row]), json.dumps([{**row, "o": 3}])])
    >>> summary[0]["n"], ends, groups[0]["o"]
    (4, {'t': {'0': 12}}, 11)
    """
    return fold([row for text in texts for row in json.loads(text)])


def fold(rows: Sequence[Mapping[str, Any]]) -> Summary:
    """:data:`Summary` from :func:`summarise`'s rows (one per :data:`KEY`, with its
    aggregates ``n``, ``max_ts``, ``o``, ``ts``, ``seq``, ``schema``, ``images`` and
    ``kept``), its entries in the order of their first row."""
    shape = ("_kind", "_error_kind", "_source_table", "_snapshot_phase")
    columns = ("_row_columns", "_key_columns")
    summary: dict[tuple[Any, ...], dict[str, Any]] = {}
    ends: Offsets = {}
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = tuple(r[c] for c in (*shape, *columns))
        entry = summary.setdefault(
            key,
            {
                **dict(zip((*shape, *columns), key, strict=True)),
                "n": 0,
                "max_ts": None,
                "schema": None,
                "images": frozenset(),
                "kept": 0,
            },
        )
        entry["images"] = entry["images"] | frozenset(r["images"])
        entry["n"] += int(r["n"])
        entry["kept"] += int(r.get("kept") or 0)
        entry["max_ts"] = _max(entry["max_ts"], r["max_ts"])
        if r["schema"] is not None:
            entry["schema"] = _max(entry["schema"], tuple(r["schema"]))
        partition = ends.setdefault(r["topic"], {})
        name = str(r["partition"])
        partition[name] = max(partition.get(name, 0), int(r["o"]) + 1)
        if r["_kind"] != "change":
            continue
        gkey = (r["_source_table"], r["_snapshot_phase"], r["topic"], r["partition"])
        group = groups.setdefault(
            gkey,
            {
                "_source_table": gkey[0],
                "_snapshot_phase": gkey[1],
                "topic": gkey[2],
                "partition": gkey[3],
                "n": 0,
                "o": None,
                "ts": None,
                "seq": None,
                "src_ts": None,
            },
        )
        group["n"] += int(r["n"])
        group["o"] = _max(group["o"], r["o"])
        group["ts"] = _max(group["ts"], r["ts"])
        group["seq"] = _max(group["seq"], r["seq"])
        group["src_ts"] = _max(group["src_ts"], r["max_ts"])
    return list(summary.values()), ends, list(groups.values())


def python_pass_needed(summary: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the JVM's decode of a batch (its summary, :func:`summarise`) needs the Python
    pass: it left records to Python (a NULL ``_kind``), or it read change events of a table
    without a Connect schema (``kept``) in a batch where records of that table brought one.
    The Python decoder reads such an event with the schema of the records before it in its
    source partition, so the pass reads it again there, in stream order.

    >>> bare = {"_kind": "change", "_source_table": "s.t", "kept": 2, "schema": None}
    >>> python_pass_needed([bare])
    False
    >>> python_pass_needed([bare, {**bare, "kept": 0, "schema": (5, 0, 1, "")}])
    True
    >>> python_pass_needed([{"_kind": None, "_source_table": None, "kept": 1, "schema": None}])
    True
    """
    if any(r["_kind"] is None for r in summary):
        return True
    bare = {r["_source_table"] for r in summary if r["_kind"] == "change" and r.get("kept")}
    schemas = {r["_source_table"] for r in summary if r.get("schema") is not None}
    return bool(bare & schemas)


def _image_group(schema: StructType) -> Column:
    """The image group a decoded record's typed row image is in (:func:`image_groups`), or
    NULL (no typed image)."""
    from pyspark.sql import functions as F

    return F.coalesce(
        *[
            F.when(F.col(n).isNotNull(), F.lit(g))
            for g, names in image_groups(schema).items()
            for n in names
        ],
        F.lit(None).cast("string"),
    )


def _max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)
