"""Tables by catalog name: a name resolves through Spark's catalog to the table's location.

Every table setting takes a catalog name (``lakehouse_test.prices``, ``main.bronze.orders``:
see :func:`is_catalog_name`) or a location (a path or URI). A job resolves its names once when
it starts (:func:`resolve`), through the session's catalog (Spark's session catalog, a Hive
metastore, or any catalog Spark names tables with), and works on the locations from then on,
so the marker, the commit metadata, the writer lease and the recovery checks are the same for
a named table as for a path.

A name that the catalog does not know yet is a table the job creates: its location is
``<spark.lakehouse.tables.location>/<schema>/<table>`` when that Spark setting is given (the
place for new tables on Unity Catalog: an external location), else the schema's default one
(``<schema location>/<table>``, as Spark's catalog would place a managed table). Once a batch
has created the Delta table there it is registered under its name (``CREATE TABLE ... USING
delta LOCATION``: an external table of the catalog, so ``DROP TABLE`` leaves its files). A
job that stopped between the two registers it on its next start. A catalog that refuses
access by path to its managed tables (Unity Catalog) takes external tables only.
"""

from __future__ import annotations

import re
import threading
import weakref
from typing import TYPE_CHECKING, Final

from lakehouse.errors import ConfigError, TableNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: One part of a catalog name: an identifier, or any text in back-quotes.
_NAME_PART: Final = r"(?:[A-Za-z_][A-Za-z0-9_]*|`[^`]+`)"
_CATALOG_NAME: Final = re.compile(rf"^{_NAME_PART}(?:\.{_NAME_PART}){{1,2}}$")

#: Spark setting: where a job creates the tables it is given by a name the catalog does not
#: know yet (``<this>/<schema>/<table>``); default the schema's own location.
TABLES_LOCATION_CONF: Final = "spark.lakehouse.tables.location"

_lock = threading.Lock()
#: Per session: the names resolved to a location where no table is yet (name -> location).
_unregistered: weakref.WeakKeyDictionary[SparkSession, dict[str, str]] = weakref.WeakKeyDictionary()


def is_catalog_name(table: str) -> bool:
    """Whether ``table`` names a table in Spark's catalog rather than giving its location.

    A name is two or three dot-separated identifiers, the schema's and the table's
    (``bronze.orders``) or the catalog's too (``main.bronze.orders``), back-quoted parts
    allowed; anything else is a location: a single word (``orders``, a directory here, as
    always), anything with a ``/`` or a URI scheme. Write a directory whose name has a dot as
    ``./name.v2``.

    >>> [is_catalog_name(t) for t in ("bronze.orders", "main.`my-schema`.orders")]
    [True, True]
    >>> [is_catalog_name(t) for t in ("orders", "tables/orders", "./a.b", "s3://b/o", "a.b.c.d")]
    [False, False, False, False, False]
    """
    return bool(_CATALOG_NAME.match(table))


def name_parts(name: str) -> list[str]:
    """The parts of a catalog name, back-quotes removed.

    >>> name_parts("main.`my-schema`.orders")
    ['main', 'my-schema', 'orders']
    """
    return [p.strip("`") for p in re.findall(_NAME_PART, name)]


def in_catalog(spark: SparkSession, name: str, *, setting: str) -> bool:
    """Whether Spark's catalog has a table of that name.

    Raises:
        ConfigError: the name's catalog is not one of the session's.
    """
    try:
        return bool(spark.catalog.tableExists(name))
    except Exception as e:
        text = str(e)
        if not any(c in text for c in ("REQUIRES_SINGLE_PART_NAMESPACE", "CATALOG_NOT_FOUND")):
            raise
        catalog = name_parts(name)[0]
        raise ConfigError(
            f"table {name!r} ({setting}) is in catalog {catalog!r}, which this Spark session "
            f"does not have: configure it (spark.sql.catalog.{catalog}), or name the table as "
            "schema.table in the session's catalog",
            setting=setting,
        ) from None


def resolve(spark: SparkSession, table: str, *, setting: str, new: bool = True) -> str:
    """The location of ``table``: itself for a location; for a catalog name, the location of
    the Delta table the catalog names, or, when there is none yet and ``new``, where the job
    creates it (registered under the name once it exists, see :func:`register_created`).

    Raises:
        ConfigError: the name is a table of another format, or its schema does not exist.
        TableNotFoundError: the catalog has no table of that name and ``new`` is false.
    """
    if not is_catalog_name(table):
        return table
    from lakehouse.delta.log import table_exists

    if in_catalog(spark, table, setting=setting):
        detail = spark.sql(f"DESCRIBE DETAIL {table}").select("format", "location").first()
        if detail is None or (detail["format"] or "").lower() != "delta":
            kind = None if detail is None else detail["format"]
            raise ConfigError(
                f"table {table!r} ({setting}) is a {kind or 'non-Delta'} table in Spark's "
                "catalog; lakehouse reads and writes Delta tables: name a Delta table or a "
                "new one",
                setting=setting,
            )
        return _local(str(detail["location"]))
    if not new:
        raise TableNotFoundError(
            f"no table {table!r} in Spark's catalog ({setting}): check the name, or give "
            "the table's location (a directory whose name has a dot as ./name)",
            table_uri=table,
        )
    location = _default_location(spark, table, setting=setting)
    if table_exists(location, spark=spark):  # created by a run that stopped before naming it
        _register(spark, table, location)
    else:
        with _lock:
            _unregistered.setdefault(spark, {})[table] = location
    return location


def register_created(spark: SparkSession) -> list[str]:
    """Register under their names the tables :func:`resolve` placed that now exist; returns
    the names registered. Cheap when there are none (no catalog call)."""
    with _lock:
        waiting = dict(_unregistered.get(spark, {}))
    if not waiting:
        return []
    from lakehouse.delta.log import table_exists

    done = []
    for name, location in waiting.items():
        if table_exists(location, spark=spark):
            _register(spark, name, location)
            done.append(name)
    with _lock:
        left = _unregistered.get(spark, {})
        for name in done:
            left.pop(name, None)
    return done


def _register(spark: SparkSession, name: str, location: str) -> None:
    quoted = location.replace("\\", "\\\\").replace("'", "\\'")
    try:
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION '{quoted}'")
    except Exception as e:
        # another job (the ingest and a join of its build table) registered it meanwhile
        if "ALREADY_EXISTS" not in str(e) and "AlreadyExists" not in str(e):
            raise


def _default_location(spark: SparkSession, name: str, *, setting: str) -> str:
    """Where a new table of that name goes: under :data:`TABLES_LOCATION_CONF`, else where
    Spark's catalog would place a managed table of that name."""
    parts = name_parts(name)
    root = (spark.conf.get(TABLES_LOCATION_CONF, None) or "").strip()
    if root:
        return _local(f"{root.rstrip('/')}/{parts[-2]}/{parts[-1].lower()}")
    schema_parts = parts[:-1]
    schema = ".".join(f"`{p}`" for p in schema_parts)
    try:
        rows = spark.sql(f"DESCRIBE SCHEMA EXTENDED {schema}").collect()
    except Exception as e:
        if "SCHEMA_NOT_FOUND" not in str(e) and "NoSuchNamespace" not in str(e):
            raise
        raise ConfigError(
            f"table {name!r} ({setting}) is not in Spark's catalog, and its schema "
            f"{'.'.join(schema_parts)!r} does not exist either: create the schema (CREATE SCHEMA "
            f"{'.'.join(schema_parts)}) or fix the name",
            setting=setting,
        ) from None
    found = {r[0]: r[1] for r in rows}
    where = found.get("Location")
    if not where:
        raise ConfigError(
            f"table {name!r} ({setting}) is not in Spark's catalog yet and its schema has no "
            "location to create it in; create the table first (CREATE TABLE ... USING delta "
            "LOCATION ...) or give a path",
            setting=setting,
        )
    return _local(f"{where.rstrip('/')}/{parts[-1].lower()}")


def _local(location: str) -> str:
    """A ``file:`` location as the plain path the rest of lakehouse uses."""
    from lakehouse.delta.ddl import local_path

    if location.startswith("file:"):
        path = local_path(location)
        assert path is not None
        return path
    return location
