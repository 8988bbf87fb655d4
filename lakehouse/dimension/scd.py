"""The dimension as users query it: SCD type 2 and current state, derived from the version log.

A build table is a log of versions: one row per change of a key (``_op`` ``r``/``c``/``u``),
per delete (``d``) and per truncate (``t``, no key), each with its ``_event_time`` and source
order ``_seq``. Two views answer the questions users ask of a dimension:

* **SCD type 2** (``<table>_scd2``): one row per version with ``valid_from`` (its event time),
  ``valid_to`` (exclusive: the event time of the key's next change, delete included, or of
  the first truncate ordered after it; NULL while it lasts) and ``is_current``. Deletes and
  truncates end versions and are no versions themselves. Equal-time changes follow the
  source order (``_seq``), as the join does: the earlier one's interval is empty.
* **current state** (``<table>_current``): one row per live key, its current version: the
  key and value columns and ``valid_from``, without the log's lineage columns.

They follow the join's as-of rule exactly (``tests/reference.py: as_of``): the version of a
key at time ``t`` is the row with ``valid_from <= t < valid_to`` (or ``valid_to`` NULL), and
there is none after a delete or a truncate. Databricks' AUTO CDC names the same columns
``__START_AT`` and ``__END_AT``.

The views are plain SQL over the build table's view (window functions that DuckDB and Spark
SQL both run), generated per table from its columns and key:

>>> print(scd2_query("prices", ["sku", "price", "_op", "_event_time", "_seq"], ["sku"]))
... # doctest: +ELLIPSIS
WITH keys AS (SELECT DISTINCT "sku" FROM "prices" WHERE "_op" <> 't'), log AS (...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from lakehouse.dimension.layout import EVENT_TIME, LINEAGE_COLUMNS, OP, PROP_PRIMARY_KEY, SEQ

#: The columns the SCD type 2 view adds.
VALID_FROM: Final = "valid_from"
VALID_TO: Final = "valid_to"
IS_CURRENT: Final = "is_current"
#: View name suffixes.
SCD2_SUFFIX: Final = "_scd2"
CURRENT_SUFFIX: Final = "_current"


def double_quoted(name: str) -> str:
    """An identifier in DuckDB's (standard SQL's) quotes."""
    return '"' + name.replace('"', '""') + '"'


def backquoted(name: str) -> str:
    """An identifier in Spark SQL's quotes."""
    return "`" + name.replace("`", "``") + "`"


def scd2_query(
    source: str,
    columns: Sequence[str],
    key: Sequence[str],
    *,
    quote: Callable[[str], str] = double_quoted,
) -> str:
    """The SCD type 2 view of build table view ``source`` (columns ``columns``, key ``key``).

    Every window is partitioned by the key (no single-partition sort of the whole log): each
    truncate is copied into every key's partition (keys x truncates rows; truncates are
    rare), where the first one ordered after a version ends it. A truncate of the same time
    and ``_seq`` as a version sorts before it, so it does not end it (the join's rule: a
    truncate *ordered after* it does).
    """
    q = quote
    op, time, seq = q(OP), q(EVENT_TIME), q(SEQ)
    keys = ", ".join(q(k) for k in key)
    kept = ", ".join(q(c) for c in columns)
    copied = ", ".join(
        f"k.{q(c)}" if c in key else f"t.{q(c)}" if c in (OP, EVENT_TIME, SEQ) else "NULL"
        for c in columns
    )
    return (
        f"WITH keys AS (SELECT DISTINCT {keys} FROM {q(source)} WHERE {op} <> 't'), "
        f"log AS (SELECT {kept} FROM {q(source)} WHERE {op} <> 't' UNION ALL "
        f"SELECT {copied} FROM keys AS k CROSS JOIN "
        f"(SELECT {op}, {time}, {seq} FROM {q(source)} WHERE {op} = 't') AS t), "
        f"ordered AS (SELECT *, MIN(CASE WHEN {op} = 't' THEN {time} END) OVER ("
        f"PARTITION BY {keys} ORDER BY {time}, {seq}, CASE WHEN {op} = 't' THEN 0 ELSE 1 END "
        "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS __next_truncate FROM log), "
        f"keyed AS (SELECT *, LEAD({time}) OVER (PARTITION BY {keys} ORDER BY {time}, {seq}) "
        f"AS __next_change FROM ordered WHERE {op} <> 't'), "
        "ended AS (SELECT *, CASE WHEN __next_change IS NULL THEN __next_truncate "
        "WHEN __next_truncate IS NULL THEN __next_change "
        "WHEN __next_truncate < __next_change THEN __next_truncate "
        "ELSE __next_change END AS __valid_to FROM keyed) "
        f"SELECT {kept}, {time} AS {q(VALID_FROM)}, __valid_to AS {q(VALID_TO)}, "
        f"__valid_to IS NULL AS {q(IS_CURRENT)} FROM ended WHERE {op} <> 'd'"
    )


def current_query(
    scd2: str, columns: Sequence[str], *, quote: Callable[[str], str] = double_quoted
) -> str:
    """The current state: one row per live key, from the SCD type 2 view ``scd2``, with
    ``columns`` and ``valid_from``."""
    kept = ", ".join(quote(c) for c in [*columns, VALID_FROM])
    return f"SELECT {kept} FROM {quote(scd2)} WHERE {quote(IS_CURRENT)}"


def views(
    name: str,
    columns: Sequence[str],
    key: Sequence[str],
    *,
    quote: Callable[[str], str] = double_quoted,
) -> dict[str, str]:
    """The two views of build table view ``name``: view name -> query, in creation order.

    >>> list(views("prices", ["sku", "price", "_op", "_event_time", "_seq"], ["sku"]))
    ['prices_scd2', 'prices_current']
    """
    scd2 = name + SCD2_SUFFIX
    payload = [c for c in columns if c not in LINEAGE_COLUMNS]
    return {
        scd2: scd2_query(name, columns, key, quote=quote),
        name + CURRENT_SUFFIX: current_query(scd2, payload, quote=quote),
    }


def dimension_views(
    tables: Mapping[str, str], *, quote: Callable[[str], str] = double_quoted
) -> dict[str, str]:
    """For each build table among ``tables`` (view name -> location): its SCD type 2 and
    current-state views (:func:`views`), unless a table already has the name. Reads table
    logs only (:func:`lakehouse.delta.peek`: no Spark is started for it)."""
    from lakehouse import delta
    from lakehouse.table_kinds import TableKind, kind_of

    derived: dict[str, str] = {}
    for name, location in tables.items():
        look = delta.peek(location)
        if look is None or not look.exists or kind_of(look.properties) is not TableKind.BUILD:
            continue
        key = [k.strip() for k in look.properties.get(PROP_PRIMARY_KEY, "").split(",")]
        if not any(key):
            continue
        made = views(name, look.schema.fieldNames(), [k for k in key if k], quote=quote)
        derived.update({n: q for n, q in made.items() if n not in tables})
    return derived
