"""``lakehouse sql`` without Spark: DuckDB over delta-rs gives Spark's answers, at any version,
and nothing it runs can write or read outside the registered tables."""

from __future__ import annotations

import re

import pytest
from helpers import write_build_table
from reference import Version
from typer.testing import CliRunner

from lakehouse import delta
from lakehouse.cli import app
from lakehouse.delta.query import query
from lakehouse.dimension.scd import backquoted, dimension_views
from lakehouse.errors import ConfigError

pytestmark = pytest.mark.spark


@pytest.fixture
def rates(spark, tmp_path):
    """A table written by delta-spark in two versions, with the types the tables hold."""
    uri = str(tmp_path / "rates")
    first = spark.sql(
        "SELECT * FROM VALUES ('EUR', 1.5BD, TIMESTAMP'2026-03-02 08:00:00', 1L, NULL), "
        "('GBP', 0.8BD, TIMESTAMP'2026-03-02 08:00:01', 2L, 'x') "
        "AS t(currency, rate, _event_time, _seq, note)"
    )
    delta.append(first, uri, txn=("t", 0))
    second = spark.sql(
        "SELECT 'EUR' AS currency, 1.6BD AS rate, TIMESTAMP'2026-03-02 09:00:00' AS _event_time, "
        "3L AS _seq, CAST(NULL AS STRING) AS note"
    )
    delta.append(second, uri, txn=("t", 1))
    return uri


def test_duckdb_answers_as_spark_does_at_every_version(spark, rates):
    sql = (
        "SELECT currency, count(*) AS n, max(rate) AS top, count(note) AS notes "
        "FROM rates GROUP BY currency ORDER BY currency"
    )
    for version in (None, delta.latest_version(rates) - 1):
        delta.read(spark, rates, version=version).createOrReplaceTempView("rates")
        expected = [tuple(r) for r in spark.sql(sql).collect()]
        got = query(sql, {"rates": rates}, versions={} if version is None else {"rates": version})
        assert got.columns == ("currency", "n", "top", "notes")
        assert got.rows == expected, (version, got.rows, expected)
    spark.catalog.dropTempView("rates")
    first = query("SELECT min(_event_time) FROM rates", {"rates": rates}).rows[0][0]
    assert first.isoformat().startswith("2026-03-02T08:00:00")


@pytest.mark.parametrize(
    "sql",
    [
        "COPY rates TO '{dir}/out.csv'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "ATTACH '{dir}/x.db'",
        "INSTALL httpfs",
        "SET enable_external_access = true",
        "SELECT 1; SELECT 2",
        "CREATE TABLE x AS SELECT 1",
        "INSERT INTO rates VALUES ('X', 1, NULL, 1, NULL)",
    ],
)
def test_nothing_duckdb_runs_writes_or_leaves_the_tables(rates, tmp_path, sql):
    before = delta.latest_version(rates)
    with pytest.raises(ConfigError) as refused:
        query(sql.format(dir=tmp_path), {"rates": rates})
    assert "\n" not in str(refused.value)
    assert delta.latest_version(rates) == before
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "x.db").exists()


def test_the_command_answers_without_spark_and_names_an_unknown_table(rates):
    shown = CliRunner().invoke(
        app, ["sql", "--table", f"rates={rates}", "SELECT currency FROM rates ORDER BY 1"]
    )
    assert shown.exit_code == 0 and "EUR" in shown.output and "GBP" in shown.output
    typo = CliRunner().invoke(app, ["sql", "--table", f"rates={rates}", "SELECT * FROM ratez"])
    assert isinstance(typo.exception, ConfigError)
    assert re.search(r"ratez does not exist.*the tables are rates", str(typo.exception))
    # a typo is a typo, not a write attempt
    selec = CliRunner().invoke(app, ["sql", "--table", f"rates={rates}", "SELEC * FROM rates"])
    assert isinstance(selec.exception, ConfigError)
    assert str(selec.exception) == "'selec' starts no SQL statement; did you mean SELECT?"


def test_the_dimension_views_answer_alike_on_both_engines(spark, tmp_path):
    """A build table's SCD type 2 and current-state views (``prices_scd2``,
    ``prices_current``), as ``lakehouse sql`` registers them: DuckDB's answer is Spark's,
    and a version valid at a time is the join's (equal times in source order, a delete and a
    truncate end versions)."""
    uri = str(tmp_path / "prices")
    history = [
        Version("a", 10, "1", "r", 1),
        Version("a", 10, "2", "u", 2),  # same time, later in the source
        Version("b", 20, "3", "r", 3),
        Version("a", 30, "4", "d", None),
        Version(None, 40, "5", "t", None),  # ends b
        Version("c", 50, "6", "c", 4),
        Version("a", 60, "7", "c", 5),
    ]
    write_build_table(spark, uri, history)
    tables = {"prices": uri}
    scd2 = (
        "SELECT k, value, epoch_ms(valid_from) AS f, epoch_ms(valid_to) AS t, is_current "
        "FROM prices_scd2 ORDER BY k, _seq"
    )
    current = "SELECT k, value FROM prices_current ORDER BY k"
    duck = [query(sql, tables, derived=dimension_views(tables)).rows for sql in (scd2, current)]
    assert duck == [
        [
            ("a", 1, 10, 10, False),
            ("a", 2, 10, 30, False),
            ("a", 5, 60, None, True),
            ("b", 3, 20, 40, False),
            ("c", 4, 50, None, True),
        ],
        [("a", 5), ("c", 4)],
    ]
    delta.read(spark, uri).createOrReplaceTempView("prices")
    for name, view in dimension_views(tables, quote=backquoted).items():
        spark.sql(view).createOrReplaceTempView(name)
    on_spark = [
        [tuple(r) for r in spark.sql(sql.replace("epoch_ms", "unix_millis")).collect()]
        for sql in (scd2, current)
    ]
    for name in ("prices", "prices_scd2", "prices_current"):
        spark.catalog.dropTempView(name)
    assert on_spark == duck
