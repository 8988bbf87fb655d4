"""Seconds to the first result of ``lakehouse sql``: DuckDB over delta-rs against Spark.

A table the size of the demo's output (``rows`` orders, written by delta-spark in
``versions`` appends) is queried by the installed command as a person runs it, a new process
each time (interpreter and, for Spark, JVM start included): a group-by, and the same at an
older version (``--as-of``). The engines alternate, ``repeats`` times each, so both see the
same machine load; the result is the median per engine and their ratio. The issue's target is
a first result under 3 s with DuckDB on this machine.

Usage: ``python -m bench.sql '{"repeats": 3}'`` (prints a ``BENCH-RESULT`` line).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.measure import emit, timed_lakehouse

QUERIES = {
    "group_by": "SELECT currency, count(*) AS n, sum(amount) AS total FROM orders GROUP BY "
    "currency ORDER BY n DESC",
    "as_of": "SELECT count(*) AS n FROM orders",
}


def _table(uri: str, rows: int, versions: int) -> None:
    from lakehouse import delta
    from lakehouse.spark import get_spark

    spark = get_spark(conf={"spark.sql.shuffle.partitions": "1"})
    per = max(rows // versions, 1)
    for v in range(versions):
        df = spark.range(v * per, (v + 1) * per).selectExpr(
            "id AS order_id",
            "element_at(array('EUR','GBP','JPY','CHF','USD'), CAST(id % 5 + 1 AS INT)) AS currency",
            "CAST(id % 1000 AS DECIMAL(12,2)) AS amount",
            "TIMESTAMP'2026-03-02 08:00:00' + make_interval(0,0,0,0,0,0,id) AS order_ts",
        )
        delta.append(df, uri, txn=("bench-sql", v))


def _run(uri: str, engine: str, name: str) -> float:
    args = ["sql", "--engine", engine, "--table", f"orders={uri}", QUERIES[name]]
    if name == "as_of":
        args[1:1] = ["--as-of", "0"]
    return timed_lakehouse(*args)[0]


def main(spec: dict[str, Any]) -> dict[str, Any]:
    """Build the table, time both engines alternately; returns what :func:`emit` prints."""
    rows, versions = int(spec.get("rows", 1200)), int(spec.get("versions", 12))
    repeats = int(spec.get("repeats", 3))
    result: dict[str, Any] = {"rows": rows, "versions": versions, "repeats": repeats}
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
        uri = str(Path(tmp) / "orders")
        _table(uri, rows, versions)
        for name in QUERIES:
            times: dict[str, list[float]] = {"duckdb": [], "spark": []}
            for _ in range(repeats):
                for engine in times:
                    times[engine].append(_run(uri, engine, name))
            medians = {e: round(statistics.median(t), 2) for e, t in times.items()}
            result[name] = {
                "seconds_median": medians,
                "spark_over_duckdb": round(medians["spark"] / medians["duckdb"], 1),
            }
    return result


if __name__ == "__main__":
    emit(main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
