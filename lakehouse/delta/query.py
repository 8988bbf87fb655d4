"""Read-only SQL over the project's Delta tables without Spark: DuckDB over delta-rs.

``lakehouse sql`` answers in about a second this way instead of after a JVM starts (24-43 s
on the demo's tables). Each table is opened at its latest or requested version by delta-rs
(``deltalake``) and registered in an in-memory DuckDB database as an Arrow dataset (files are
read lazily, only the columns the query needs). Nothing can be written or escape the tables:

* only ``SELECT`` and ``EXPLAIN`` statements run (DuckDB's own parser says which a query
  holds), one per call;
* the connection has no file-system or network access (``enable_external_access = false``,
  configuration locked): ``COPY ... TO``, ``read_csv('/etc/passwd')``, ``ATTACH`` and
  ``INSTALL`` are refused by DuckDB itself.

The dialect is DuckDB's (close to PostgreSQL); Spark SQL stays available through the engine
(``lakehouse sql --engine spark``), which a cluster or a table delta-rs cannot open needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakehouse.errors import ConfigError, UnsupportedTableError

#: DuckDB statement types ``query`` runs.
READ_ONLY: frozenset[str] = frozenset({"SELECT", "EXPLAIN"})


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryResult:
    """Columns and at most ``limit + 1`` rows (one more than asked: "there are more")."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]


def query(
    sql: str,
    tables: Mapping[str, str],
    *,
    versions: Mapping[str, int] | None = None,
    limit: int = 50,
    derived: Mapping[str, str] | None = None,
) -> QueryResult:
    """Run one read-only query over ``tables`` (view name -> location), each at its version in
    ``versions`` or its latest. A location without a table yet is left out (as the Spark path
    does). ``derived``: further views (name -> query over the tables, DuckDB's SQL), created
    in order after the tables.

    Raises:
        ConfigError: the query is not one read-only statement, or DuckDB refused it (unknown
            table or column, syntax): one line naming the cause.
        UnsupportedTableError: delta-rs cannot open a table (a protocol feature it lacks):
            the caller can ask Spark instead.
    """
    import duckdb

    statements = _statements(sql)
    refused = [s.type.name for s in statements if s.type.name not in READ_ONLY]
    if len(statements) != 1 or refused:
        what = f"a {refused[0]} statement" if refused else f"{len(statements)} statements"
        raise ConfigError(
            f"lakehouse sql runs one read-only query (SELECT, WITH ... SELECT, EXPLAIN); got "
            f"{what}. Change the tables with the pipelines.",
            setting="query",
        )
    con = duckdb.connect(
        ":memory:", config={"enable_external_access": False, "lock_configuration": True}
    )
    try:
        for name, uri in tables.items():
            dataset = _dataset(uri, (versions or {}).get(name))
            if dataset is not None:
                con.register(name, dataset)
        for name, view in (derived or {}).items():
            con.execute(f'CREATE VIEW "{name}" AS {view}')
        try:
            relation = con.sql(sql)
            if relation is None:  # EXPLAIN of nothing, or a statement without a result
                return QueryResult(columns=(), rows=[])
            return QueryResult(
                columns=tuple(relation.columns), rows=relation.limit(limit + 1).fetchall()
            )
        except duckdb.Error as e:
            raise ConfigError(_one_line(e, tables), setting="query") from e
    finally:
        con.close()


def _statements(sql: str) -> list[Any]:
    import duckdb

    try:
        return list(duckdb.extract_statements(sql))
    except duckdb.Error as e:
        raise ConfigError(_one_line(e, {}), setting="query") from e


def _dataset(uri: str, version: int | None) -> Any | None:
    """The table at ``version`` as a lazy Arrow dataset (None: no table there yet)."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(uri):
        return None
    try:
        table = DeltaTable(uri, version=version)
        return table.to_pyarrow_dataset()
    except Exception as e:
        raise UnsupportedTableError(
            f"delta-rs cannot read table {uri!r}: {str(e).splitlines()[0]}",
            table_uri=uri,
            feature="delta-rs read",
        ) from e


def _one_line(e: BaseException, tables: Mapping[str, str]) -> str:
    """DuckDB's message, first line, and for an unknown table the tables there are."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    hint = ""
    if "Catalog Error" in text and tables:
        hint = f"; the tables are {', '.join(sorted(tables))} (--table NAME=LOCATION adds one)"
    return f"DuckDB refused the query: {text}{hint} (lakehouse sql --engine spark runs Spark SQL)"
