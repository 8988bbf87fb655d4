"""Settings of the pending bound, compaction and vacuum: validated before any Spark work, with
errors that name the setting."""

from __future__ import annotations

import pytest
from helpers import join_options
from pydantic import ValidationError

from lakehouse.cli import main
from lakehouse.cli.maintenance import _duration_ms, _time_ms
from lakehouse.config import load_settings
from lakehouse.errors import ConfigError
from lakehouse.join import JoinOptions


def _options(**kw) -> JoinOptions:
    return join_options(**kw)


def test_pending_bound_options_are_validated():
    assert _options(pending_max_rows=10, on_pending_bound="fail").pending_max_rows == 10
    with pytest.raises(ValidationError, match="pending_max_rows\n  Input should be greater than 0"):
        _options(pending_max_rows=0)
    with pytest.raises(
        ValidationError, match="pending_max_age_ms\n  Input should be greater than 0"
    ):
        _options(pending_max_age_ms=-5)
    with pytest.raises(
        ValidationError, match="on_pending_bound\n  Input should be 'dead-letter' or"
    ):
        _options(on_pending_bound="drop")


def test_pending_bound_and_maintenance_settings_from_file_and_environment(tmp_path):
    cfg = tmp_path / "lakehouse.toml"
    cfg.write_text(
        '[join]\npipeline_id = "j"\nsource = "files"\npath = "/p"\ncheckpoint = "/c"\n'
        'probe_schema = "id bigint"\nprobe_key = ["id"]\nprobe_time = "id"\nbuild_table = "/b"\n'
        'output_table = "/o"\npending_table = "/q"\ndead_letter_table = "/d"\n'
        "pending_max_rows = 1000\n"
        '[maintenance]\nlineage_outputs = ["/o2"]\n'
    )
    env = {
        "LAKEHOUSE_JOIN__ON_PENDING_BOUND": "fail",
        "LAKEHOUSE_MAINTENANCE__LINEAGE_OUTPUTS": "/o2,/o3",
    }
    settings = load_settings(cfg, environ=env)
    assert settings.join.pending_max_rows == 1000
    assert settings.join.on_pending_bound == "fail"
    assert settings.maintenance.lineage_outputs == ["/o2", "/o3"]
    with pytest.raises(ConfigError, match=r"join\.on_pending_bound"):
        load_settings(cfg, environ={"LAKEHOUSE_JOIN__ON_PENDING_BOUND": "drop"})


def test_durations_and_times():
    assert _duration_ms("7d", "retention") == 7 * 86_400_000
    assert _duration_ms("12h", "retention") == 12 * 3_600_000
    assert _duration_ms("500ms", "retention") == 500
    assert _duration_ms("90s", "retention") == 90_000
    assert _duration_ms("1234", "retention") == 1234
    with pytest.raises(ConfigError, match=r"--retention takes a duration"):
        _duration_ms("a week", "retention")
    assert _time_ms("1970-01-01T00:00:01Z", "horizon") == 1000
    assert _time_ms("1970-01-01T00:00:02", "horizon") == 2000  # UTC unless it says otherwise
    assert _time_ms("-5", "horizon") == -5
    with pytest.raises(ConfigError, match="--horizon takes an ISO-8601 time"):
        _time_ms("yesterday", "horizon")


def test_compact_needs_exactly_one_of_retention_and_horizon(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("LAKEHOUSE_CONFIG", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["compact", str(tmp_path / "rates"), "--retention", "7d", "--horizon", "0"])
    assert exited.value.code == 2
    assert "exactly one of --retention" in " ".join(capsys.readouterr().err.split())
