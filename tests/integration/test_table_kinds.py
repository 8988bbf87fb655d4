"""Every table knows its kind (issue 34): the tables a join and an ingest create record it, and
each command given a table of the wrong kind refuses it in one line, exit 2, before Spark
starts, through the installed command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lakehouse import delta
from lakehouse.join import TemporalJoin
from lakehouse.table_kinds import PROP_PIPELINE, PROP_TABLE_KIND
from tests.helpers import join_options, lakehouse_command, raw_records, write_build_table
from tests.reference import Version as V

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory) -> dict[str, str]:
    """A build table, and the output, pending and dead-letter tables of one processing-time
    join batch that released a row and dead-lettered a malformed record."""
    tmp = tmp_path_factory.mktemp("kinds")
    uris = {name: str(tmp / name) for name in ("rates", "enriched", "pending", "dead_letter")}
    write_build_table(spark, uris["rates"], [V("EUR", 10, "1", "r", 15)])
    options = join_options(
        build_table=uris["rates"],
        output_table=uris["enriched"],
        pending_table=uris["pending"],
        dead_letter_table=uris["dead_letter"],
        pipeline_id="join-orders",
        probe_schema="id bigint, k string",
        probe_time=None,
        mode="proctime",
        watermark="none",
        join_type="left",
    )
    raw = raw_records(spark, [{"id": 1, "k": "EUR"}, b"{not json"])
    TemporalJoin(options).process(raw, 0)
    (tmp / "orders").mkdir()
    (tmp / "lakehouse.toml").write_text(f"""
[join]
pipeline_id = "join-orders"
source = "files"
path = "{tmp}/orders"
checkpoint = "{tmp}/ck"
trigger = "available-now"
probe_schema = "id bigint, k string"
probe_key = ["k"]
probe_id = "id"
mode = "proctime"
build_table = "{uris["enriched"]}"
output_table = "{tmp}/out2"
pending_table = "{tmp}/pending2"
dead_letter_table = "{tmp}/dead2"
""")
    return {**uris, "tmp": str(tmp)}


def _refused(result, pattern: str) -> str:
    """The one error line of a refused command, checked: exit 2, no trace, Spark not started."""
    err = result.stderr.strip()
    assert result.returncode == 2, (result.returncode, result.stdout, err)
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert "Traceback" not in err and "Spark" not in result.stdout, err
    assert re.search(pattern, err), err
    return err


def test_each_table_records_its_kind_and_the_pipeline_that_created_it(tables):
    for name, kind in (
        ("rates", "build"),
        ("enriched", "output"),
        ("pending", "pending"),
        ("dead_letter", "dead-letter"),
    ):
        props = delta.get_properties(tables[name])
        assert props.get(PROP_TABLE_KIND) == kind, (name, props)
    assert delta.get_properties(tables["enriched"])[PROP_PIPELINE] == "join-orders"
    assert delta.get_properties(tables["dead_letter"])[PROP_PIPELINE] == "join-orders"


def test_status_names_each_kind(tables):
    for name, label in (
        ("rates", "build table"),
        ("enriched", "output table (created by pipeline join-orders)"),
        ("pending", "pending table (created by pipeline join-orders)"),
        ("dead_letter", "dead-letter table (created by pipeline join-orders)"),
    ):
        shown = lakehouse_command("status", tables[name])
        assert shown.returncode == 0, shown.stderr
        assert re.search(rf"kind[\s│]+{re.escape(label)}", shown.stdout), (name, shown.stdout)
        assert ("pending backlog" in shown.stdout) == (name == "pending"), shown.stdout


def test_a_command_given_the_wrong_kind_refuses_it_in_one_line(tables):
    cfg = str(Path(tables["tmp"]) / "lakehouse.toml")
    output = re.escape(tables["enriched"])
    # the case: a join reading an output table as its build table waited forever
    _refused(
        lakehouse_command("join", "-c", cfg),
        rf"join.build_table \(--build-table\): {output} is an output table \(created by "
        r"pipeline join-orders\), not a build table \(written by lakehouse ingest\)",
    )
    # and its quality report ended in a trace
    _refused(lakehouse_command("quality", "-c", cfg), r"join.build_table .* an output table")
    _refused(
        lakehouse_command(
            "join", "-c", cfg, "--build-table", tables["rates"], "--output-table", tables["pending"]
        ),
        r"join.output_table \(--output-table\): .* is a pending table",
    )
    # a key that cannot pair up with the build table's is found before Spark starts too
    _refused(
        lakehouse_command(
            "join",
            "-c",
            cfg,
            "--build-table",
            tables["rates"],
            "--probe-key",
            "k",
            "--probe-key",
            "id",
        ),
        r"has key \['k'\] but join.probe_key \(--probe-key\) is \['k', 'id'\]",
    )
    _refused(
        lakehouse_command("snapshot-status", tables["enriched"]),
        rf"TABLE: {output} is an output table .*, not a build table",
    )
    _refused(
        lakehouse_command("snapshot-complete", tables["dead_letter"], "--reason", "x"),
        r"TABLE: .* is a dead-letter table",
    )
    _refused(
        lakehouse_command(
            "ingest",
            "--pipeline-id",
            "rates",
            "--source",
            "files",
            "--path",
            tables["tmp"],
            "--table",
            tables["pending"],
            "--key",
            "k",
            "--dead-letter-table",
            tables["dead_letter"],
            "--checkpoint",
            str(Path(tables["tmp"]) / "ck-ingest"),
        ),
        r"ingest.tables\[0\].table \(--table\): .* is a pending table",
    )
    _refused(
        lakehouse_command("compact", tables["enriched"], "--horizon", "0"),
        r"TABLE: .* is an output table",
    )


def test_sql_names_a_missing_location_and_a_table_not_written_yet(tables):
    nope = str(Path(tables["tmp"]) / "nope")
    _refused(
        lakehouse_command("sql", "--table", f"x={nope}", "SELECT 1"),
        rf"--table x={re.escape(nope)}: there is no Delta table at {re.escape(nope)}",
    )
    cfg = str(Path(tables["tmp"]) / "lakehouse.toml")
    _refused(
        lakehouse_command("sql", "-c", cfg, "SELECT count(*) FROM dead2"),
        r"table dead2 \(.*dead2\) has not been written yet",
    )
    # the tables that exist are still there, and the unwritten ones are not offered
    typo = lakehouse_command("sql", "-c", cfg, "SELECT * FROM enriched_typo")
    assert typo.returncode == 2 and "the tables are enriched" in typo.stderr, typo.stderr
    assert "dead2" not in typo.stderr and "pending2" not in typo.stderr, typo.stderr


def test_a_build_table_between_the_two_commits_of_its_creation_is_not_a_foreign_table(
    spark, tmp_path, monkeypatch
):
    """A join started beside the ingest's first batch may look at the build table between
    the two commits of its creation (an empty write, then its properties, because the
    location holds the writer's lease): that table is being created, not a foreign one."""
    from pyspark.sql.types import StructType

    from lakehouse.delta import ddl
    from lakehouse.errors import ConfigError
    from lakehouse.table_kinds import TableKind, check_kind

    schema = StructType.fromDDL("k string")
    creating, foreign = tmp_path / "rates", str(tmp_path / "foreign")
    (creating / "_lakehouse").mkdir(parents=True)
    (creating / "_lakehouse" / "lease.json").write_text("{}")

    def interrupted(*args, **kwargs):
        raise RuntimeError("stopped between the two commits")

    with monkeypatch.context() as m:
        m.setattr(ddl, "set_properties", interrupted)
        with pytest.raises(RuntimeError, match="between the two commits"):
            delta.create_table(str(creating), schema, properties={PROP_TABLE_KIND: "build"})
    assert delta.latest_version(str(creating)) == 0
    assert PROP_TABLE_KIND not in delta.get_properties(str(creating))
    check_kind(str(creating), TableKind.BUILD, setting="join.build_table")
    # an empty table lakehouse did not create is refused as before
    spark.createDataFrame([], schema).write.format("delta").save(foreign)
    with pytest.raises(ConfigError, match="without a lakehouse kind"):
        check_kind(foreign, TableKind.BUILD, setting="join.build_table")
    # the ingest's next start finishes the creation
    delta.create_table(str(creating), schema, properties={PROP_TABLE_KIND: "build"}, exist_ok=True)
    assert delta.get_properties(str(creating))[PROP_TABLE_KIND] == "build"
