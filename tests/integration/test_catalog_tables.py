"""Tables by catalog name (issue 32, item 2), against a real catalog: Spark's session catalog
backed by a Hive metastore (embedded Derby under a temporary directory), as a Databricks
workspace's ``hive_metastore`` or any Spark catalog names tables.

The README's example runs with every table named ``lakehouse_test.<table>``, configured as
the documentation's worked example (docs/guides/catalog-tables.md) says: the ingest
creates the build and dead-letter tables at the schema's location and registers them; the join,
a new process and a new SparkSession, finds the build table by name and creates its own tables
the same way; a third session reads every table by name. The refusals (a schema that does not
exist, a table of another format) are one line each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import lakehouse_command, readme_block

from lakehouse.delta.names import (
    TABLES_LOCATION_CONF,
    is_catalog_name,
    register_created,
    resolve,
)
from lakehouse.errors import ConfigError
from lakehouse.jobs import has_catalog_names, resolve_tables

pytestmark = pytest.mark.spark

GUIDE = Path(__file__).resolve().parents[2] / "docs/guides/catalog-tables.md"


def _config(tmp: Path) -> Path:
    """The configuration of the documentation's worked example, word for word (its metastore
    and warehouse are relative: here, under ``tmp``)."""
    text = GUIDE.read_text()
    start = text.index("```toml\n") + len("```toml\n")
    cfg = tmp / "lakehouse.toml"
    cfg.write_text(text[start : text.index("```", start)])
    return cfg


def _in_spark(tmp: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a new process with a session of the configuration's catalog (``spark``)."""
    script = (
        "import json, lakehouse\n"
        "settings = lakehouse.load_settings('lakehouse.toml')\n"
        "spark = lakehouse.get_spark(master='local[1]', conf=settings.spark.conf)\n" + code
    )
    return subprocess.run(
        [sys.executable, "-c", script], cwd=tmp, capture_output=True, text=True, check=False
    )


@pytest.mark.slow
def test_the_readme_example_on_tables_named_in_a_hive_metastore(tmp_path):
    (tmp_path / "cdc").mkdir()
    (tmp_path / "cdc/0001.jsonl").write_text(readme_block("cdc"))
    (tmp_path / "orders").mkdir()
    (tmp_path / "orders/0001.jsonl").write_text(readme_block("orders"))
    cfg = _config(tmp_path)

    # the schema is the user's to create; until then the ingest says so in one line
    missing = lakehouse_command("ingest", "-c", str(cfg), cwd=tmp_path)
    assert missing.returncode == 2, missing.stderr[-3000:]
    assert "WARN" not in missing.stderr, missing.stderr[-3000:]
    line = missing.stderr.strip().splitlines()[-1]
    assert line.startswith("error: table 'lakehouse_test.prices'"), missing.stderr[-3000:]
    assert "CREATE SCHEMA lakehouse_test" in line

    made = _in_spark(tmp_path, "spark.sql('CREATE SCHEMA lakehouse_test')\n")
    assert made.returncode == 0, made.stderr[-3000:]

    ingest = lakehouse_command("ingest", "-c", str(cfg), cwd=tmp_path)
    assert ingest.returncode == 0, ingest.stderr[-3000:]
    assert "+5 versions" in ingest.stderr and "marker set now" in ingest.stderr
    assert "WARN" not in ingest.stderr, ingest.stderr[-3000:]  # the metastore's chatter

    # a new process, a new SparkSession: the build table is found by its name
    join = lakehouse_command(
        "join", "-c", str(cfg), "--until-complete", "--build-complete", cwd=tmp_path
    )
    assert join.returncode == 0, join.stderr[-3000:]
    assert "join orders complete" in join.stderr

    # a third session reads every table by name; each is a Delta table at the schema's place
    read = _in_spark(
        tmp_path,
        "tables = sorted(r.tableName for r in spark.sql('SHOW TABLES IN lakehouse_test')"
        ".collect())\n"
        "rows = spark.table('lakehouse_test.orders_enriched').select('order_id', 'price')"
        ".orderBy('order_id').collect()\n"
        "where = spark.sql('DESCRIBE DETAIL lakehouse_test.prices').first()\n"
        "marker = spark.sql('SHOW TBLPROPERTIES lakehouse_test.prices').collect()\n"
        "print(json.dumps({'tables': tables, 'rows': [list(r) for r in rows],"
        " 'format': where.format, 'location': where.location,"
        " 'properties': {r.key: r.value for r in marker}}))\n",
    )
    assert read.returncode == 0, read.stderr[-3000:]
    found = json.loads(read.stdout.strip().splitlines()[-1])
    # (no record was dead-lettered: the dead-letter tables are made with their first row)
    assert found["tables"] == ["orders_enriched", "orders_pending", "prices"]
    assert found["rows"] == [[1, 10.0], [2, 12.0], [3, 11.0], [4, None], [5, 20.0]]
    assert found["format"] == "delta"
    assert found["location"].endswith("/warehouse/lakehouse_test.db/prices")
    # the marker is where a path-based table has it: in the table's properties
    assert any(k.startswith("lakehouse.") for k in found["properties"]), found["properties"]

    # the other commands take names too: from the configuration's tables ...
    sql = lakehouse_command(
        "sql", "-c", str(cfg), "SELECT count(*) AS n FROM orders_enriched", cwd=tmp_path
    )
    assert sql.returncode == 0, sql.stderr[-3000:]
    assert "│ 5 " in sql.stdout, sql.stdout
    # ... and on the command line, with the catalog's settings from the environment
    conf = ";".join(
        [
            *filter(None, [os.environ.get("LAKEHOUSE_SPARK_CONF")]),
            "spark.sql.catalogImplementation=hive",
            f"spark.hadoop.javax.jdo.option.ConnectionURL=jdbc:derby:{tmp_path}/metastore_db",
            f"spark.sql.warehouse.dir={tmp_path}/warehouse",
        ]
    )
    status = lakehouse_command(
        "status", "lakehouse_test.prices", cwd=tmp_path, env={"LAKEHOUSE_SPARK_CONF": conf}
    )
    assert status.returncode == 0, status.stderr[-3000:]
    assert "snapshot complete" in " ".join(status.stdout.split()), status.stdout
    unknown = lakehouse_command(
        "status", "lakehouse_test.nope", cwd=tmp_path, env={"LAKEHOUSE_SPARK_CONF": conf}
    )
    assert unknown.returncode == 1, unknown.stderr[-3000:]
    assert "error: no table 'lakehouse_test.nope' in Spark's catalog" in unknown.stderr


def test_names_resolve_through_the_session_catalog(spark, tmp_path):
    assert has_catalog_names(_join_options("lakehouse_names.prices", tmp_path))
    assert not has_catalog_names(_join_options(str(tmp_path / "prices"), tmp_path))
    assert is_catalog_name("`lakehouse names`.prices")
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS lakehouse_names LOCATION '{tmp_path}/schema'")
    try:
        # a name the catalog does not know yet: the schema's place, registered once it exists
        location = resolve(spark, "lakehouse_names.prices", setting="join.build_table")
        assert location == f"{tmp_path}/schema/prices"
        assert register_created(spark) == []
        spark.range(2).write.format("delta").save(location)
        assert register_created(spark) == ["lakehouse_names.prices"]
        assert spark.table("lakehouse_names.prices").count() == 2
        # now the catalog knows it: its location, from the catalog
        options = resolve_tables(spark, _join_options("lakehouse_names.prices", tmp_path))
        assert options.build_table == location
        assert options.output_table == str(tmp_path / "out")
        # with a place for new tables (Unity Catalog's external location), there
        spark.conf.set(TABLES_LOCATION_CONF, f"{tmp_path}/external/")
        try:
            placed = resolve(spark, "lakehouse_names.Orders", setting="join.output_table")
        finally:
            spark.conf.unset(TABLES_LOCATION_CONF)
        assert placed == f"{tmp_path}/external/lakehouse_names/orders"
        spark.range(1).write.format("delta").save(placed)
        assert register_created(spark) == ["lakehouse_names.Orders"]  # nothing left waiting
        # a table of another format is refused, naming the setting
        spark.sql("CREATE TABLE lakehouse_names.csv_table (a INT) USING csv")
        with pytest.raises(ConfigError, match="is a csv table") as err:
            resolve(spark, "lakehouse_names.csv_table", setting="join.output_table")
        assert err.value.setting == "join.output_table"
    finally:
        spark.sql("DROP SCHEMA IF EXISTS lakehouse_names CASCADE")
    with pytest.raises(ConfigError, match=r"CREATE SCHEMA lakehouse_absent\)"):
        resolve(spark, "lakehouse_absent.prices", setting="join.build_table")
    with pytest.raises(ConfigError, match=r"spark\.sql\.catalog\.main\)") as err:
        resolve(spark, "main.bronze.prices", setting="join.output_table")
    assert "is in catalog 'main', which this Spark session does not have" in str(err.value)


def _join_options(build: str, tmp: Path):
    from lakehouse.join import JoinOptions

    return JoinOptions(
        pipeline_id="names",
        build_table=build,
        output_table=str(tmp / "out"),
        pending_table=str(tmp / "pending"),
        dead_letter_table=str(tmp / "dlq"),
        probe_schema="k string, t timestamp",
        probe_key=["k"],
        probe_time="t",
    )
