"""The command line's error handling (no Spark is started by these cases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse.cli import main
from lakehouse.failpoints import _armed


def _run(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr()


def test_invalid_setting_exits_2_with_one_line_naming_it(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("LAKEHOUSE_CONFIG", raising=False)
    code, out = _run(["join", "--mode", "bogus", "--probe-key", "k"], capsys)
    assert code == 2
    # the flag's closed choices are checked as it is parsed, and named in one line
    assert out.err.strip() == (
        "error: invalid value for '--mode': 'bogus' is not one of 'rowtime', 'proctime'."
    )
    # a bad value from the file or the environment names the setting
    monkeypatch.setenv("LAKEHOUSE_JOIN__MODE", "bogus")
    code, out = _run(["join", "--probe-key", "k"], capsys)
    assert code == 2
    assert "error: invalid" in out.err and "'join.mode'" in out.err
    assert "Traceback" not in out.err


@pytest.mark.parametrize(
    "query",
    [
        "DROP TABLE rates",
        "INSERT INTO rates VALUES (1)",
        "delete from rates",
        "CREATE TABLE x AS SELECT 1",
    ],
)
def test_sql_is_read_only(capsys, query):
    code, out = _run(["sql", query, "--table", "rates=/nonexistent"], capsys)
    assert code == 2
    assert "read-only queries only" in out.err


def test_unknown_option_is_a_usage_error(capsys):
    code, out = _run(["ingest", "--nope"], capsys)
    assert code == 2
    assert "No such option" in out.err


def test_snapshot_complete_needs_a_reason(capsys):
    code, out = _run(["snapshot-complete", "/nonexistent", "--reason", "  "], capsys)
    assert code == 2
    assert "--reason must say why" in out.err


def test_failpoints_parse_names_and_batches(monkeypatch):
    monkeypatch.setenv("LAKEHOUSE_FAILPOINTS", "join.after_output@2, join.after_output@5,x")
    assert _armed() == {"join.after_output": {2, 5}, "x": None}


def test_a_join_whose_build_table_does_not_exist_is_refused_before_spark(capsys, tmp_path):
    (tmp_path / "orders").mkdir()
    argv = [
        "join",
        "--source", "files",
        "--path", str(tmp_path / "orders"),
        "--probe-schema", "id bigint, k string",
        "--probe-key", "k",
        "--mode", "proctime",
        "--watermark", "none",
        "--build-table", str(tmp_path / "no-such-table"),
        "--output-table", str(tmp_path / "out"),
        "--pending-table", str(tmp_path / "pending"),
        "--dead-letter-table", str(tmp_path / "dlq"),
        "--checkpoint", str(tmp_path / "ck"),
        "--pipeline-id", "j",
    ]  # fmt: skip
    code, out = _run(argv, capsys)
    assert code == 1
    # one line, never wrapped at the console's width, however long the path
    (said,) = [line for line in out.err.splitlines() if line.startswith("error:")]
    assert f"error: build table '{tmp_path / 'no-such-table'}' (join setting build_table) " in said
    assert "--wait-for-build" in out.err and "Traceback" not in out.err


def test_the_demo_configuration_names_both_joins_for_sql_and_vacuum(tmp_path):
    from lakehouse.cli.tables import _project_tables
    from lakehouse.config import load_settings
    from lakehouse.demo.run import _config, _toml

    (tmp_path / "lakehouse.toml").write_text(_toml(_config(tmp_path, "files", None)))
    settings = load_settings(tmp_path / "lakehouse.toml", environ={})
    proctime = str(tmp_path / "tables" / "orders_proctime")
    assert settings.maintenance.lineage_outputs == [proctime]
    tables = _project_tables(settings)
    assert tables["orders_proctime"] == proctime and "orders_rowtime" in tables


@pytest.mark.parametrize("command", ["ingest", "join"])
def test_a_files_source_whose_directory_does_not_exist_is_refused_before_spark(
    capsys, tmp_path, monkeypatch, command
):
    monkeypatch.delenv("LAKEHOUSE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    common = ["--source", "files", "--path", "typo", "--checkpoint", "ck", "--pipeline-id", "p"]
    specific = {
        "ingest": ["--table", "rates", "--dead-letter-table", "dlq"],
        "join": [
            "--probe-schema", "id bigint, k string", "--probe-key", "k", "--mode", "proctime",
            "--build-table", "rates", "--output-table", "out", "--pending-table", "pending",
            "--dead-letter-table", "dlq",
        ],
    }  # fmt: skip
    code, out = _run([command, *common, *specific[command]], capsys)
    said = " ".join(out.err.split())
    assert code == 2, out.err
    assert f"error: directory '{tmp_path / 'typo'}' ({command}.path) does not exist" in said
    assert "Traceback" not in out.err


def test_an_error_naming_a_configuration_section_prints_it_as_written(capsys, tmp_path):
    # rich reads "[join]" as a style tag: unescaped, the line said "needs a  section"
    cfg = tmp_path / "lakehouse.toml"
    cfg.write_text('[spark]\nmaster = "local[1]"\n')
    code, out = _run(["quality", "-c", str(cfg)], capsys)
    assert code == 2
    assert "the configuration needs a [join] section" in " ".join(out.err.split())


def test_version_prints_the_version_and_exits_0(capsys):
    from lakehouse import __version__

    code, out = _run(["--version"], capsys)
    assert code == 0 and out.out.strip() == f"lakehouse {__version__}"


def _quality_config(tmp_path: Path, output_table: str) -> Path:
    cfg = tmp_path / "lakehouse.toml"
    cfg.write_text(
        '[join]\npipeline_id = "p"\nsource = "files"\npath = "probe"\ncheckpoint = "ck"\n'
        'probe_schema = "id bigint, k string"\nprobe_key = ["k"]\nprobe_id = "id"\n'
        'mode = "proctime"\nbuild_table = "rates"\n'
        f'output_table = "{output_table}"\npending_table = "pending"\n'
        'dead_letter_table = "dlq"\n'
    )
    return cfg


def test_quality_on_pandas_refuses_a_table_on_object_storage_in_one_line(capsys, tmp_path):
    (tmp_path / "probe").mkdir()
    cfg = _quality_config(tmp_path, "s3a://lake/out")
    code, out = _run(["quality", "-c", str(cfg), "--engine", "pandas"], capsys)
    said = " ".join(out.err.split())
    assert code == 2, out.err
    assert (
        "quality.engine (--engine) pandas cannot read join.output_table: 's3a://lake/out' is "
        "not on this machine's file system; use --engine spark (or auto)"
    ) in said
    assert "Traceback" not in out.err


def test_quality_names_the_engines_it_has(capsys, tmp_path):
    cfg = _quality_config(tmp_path, "out")
    code, out = _run(["quality", "-c", str(cfg), "--engine", "duckdb"], capsys)
    assert code == 2
    assert "'duckdb' is not one of 'auto', 'pandas', 'spark'" in " ".join(out.err.split())
    assert "Traceback" not in out.err
