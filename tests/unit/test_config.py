"""Configuration: TOML file < environment < flags, validated with errors naming the setting."""

from __future__ import annotations

import pytest

from lakehouse.config import env_overrides, load_settings
from lakehouse.errors import ConfigError

JOIN = """
[join]
pipeline_id = "j"
source = "files"
path = "/data/orders"
checkpoint = "/ck"
probe_schema = "id bigint, k string, ts timestamp"
probe_key = ["k"]
probe_time = "ts"
build_table = "/t/build"
output_table = "/t/out"
pending_table = "/t/pending"
dead_letter_table = "/t/dlq"
"""


def _file(tmp_path, text=JOIN):
    path = tmp_path / "lakehouse.toml"
    path.write_text(text)
    return path


def test_file_then_environment_then_flags(tmp_path):
    cfg = _file(tmp_path, JOIN + 'mode = "rowtime"\nout_of_orderness_ms = 10\n')
    env = {"LAKEHOUSE_JOIN__MODE": "proctime", "LAKEHOUSE_JOIN__OUT_OF_ORDERNESS_MS": "20"}
    settings = load_settings(cfg, environ=env, overrides={"join": {"out_of_orderness_ms": 30}})
    assert settings.join.mode == "proctime"  # environment over file
    assert settings.join.out_of_orderness_ms == 30  # flags over environment
    assert settings.join.probe_key == ("k",)  # file (a list in TOML, a tuple in the options)


def test_flags_given_as_none_do_not_override(tmp_path):
    settings = load_settings(_file(tmp_path), environ={}, overrides={"join": {"mode": None}})
    assert settings.join.mode == "rowtime"


def test_environment_lists_and_dotted_kafka_options():
    env = {
        "LAKEHOUSE_JOIN__PROBE_KEY": "a, b",
        "LAKEHOUSE_KAFKA__OPTIONS__SASL_MECHANISM": "PLAIN",
        "LAKEHOUSE_KAFKA__BOOTSTRAP_SERVERS": "b:9092",
        "OTHER": "x",
        "LAKEHOUSE_CONFIG": "f",
    }
    assert env_overrides(env) == {
        "join": {"probe_key": ["a", "b"]},
        "kafka": {"options": {"sasl.mechanism": "PLAIN"}, "bootstrap_servers": "b:9092"},
    }


def test_config_file_from_environment(tmp_path):
    settings = load_settings(environ={"LAKEHOUSE_CONFIG": str(_file(tmp_path))})
    assert settings.join.pipeline_id == "j"


@pytest.mark.parametrize(
    ("text", "setting", "message"),
    [
        # a value outside a closed set names the setting and the value given
        (
            JOIN + 'mode = "eventtime"\n',
            "join.mode",
            r"'join.mode': Input should be 'rowtime' or "
            r"'proctime' \(got 'eventtime'\)",
        ),
        # a negative duration
        (JOIN + "out_of_orderness_ms = -1\n", "join.out_of_orderness_ms", "greater than or equal"),
        # a typo is not silently ignored
        (JOIN + 'modee = "rowtime"\n', "join.modee", "Extra inputs are not permitted"),
        # a kafka source without topics
        (JOIN.replace('source = "files"', 'source = "kafka"'), "join", "needs topics"),
        # a delta source without its table; a negative version
        (JOIN.replace('source = "files"', 'source = "delta"'), "join", "needs delta_table"),
        (
            JOIN.replace('source = "files"', 'source = "delta"\ndelta_table = "bronze.orders"')
            + "starting_version = -3\n",
            "join.starting_version",
            r"a table version is 0 or more, or 'latest' \(got -3\)",
        ),
    ],
)
def test_invalid_settings_name_the_setting(tmp_path, text, setting, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_settings(_file(tmp_path, text), environ={})
    assert err.value.setting == setting


def test_every_missing_setting_is_listed_at_once(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_settings(_file(tmp_path, '[join]\npipeline_id = "j"\n'), environ={})
    text = str(err.value)
    for name in ("checkpoint", "probe_schema", "probe_key", "build_table", "output_table"):
        assert f"'join.{name}': Field required" in text


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", environ={})
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(_file(tmp_path, "[join\n"), environ={})


@pytest.mark.parametrize(
    ("extra", "watermark"),
    [
        ('mode = "rowtime"\n', "bounded"),
        ('mode = "proctime"\n', "none"),  # FLIP-326: no event-time watermark from the probe
        ('mode = "proctime"\nwatermark = "bounded"\n', "bounded"),  # unless asked for
    ],
)
def test_processing_time_has_no_probe_watermark_unless_configured(tmp_path, extra, watermark):
    from lakehouse.runner import join_options

    settings = load_settings(_file(tmp_path, JOIN + extra), environ={})
    assert join_options(settings.join).watermark == watermark


def test_a_join_setting_has_one_name_from_toml_to_flag_to_options():
    """Every JoinOptions field is the [join] key of the same name, and every `lakehouse
    join` flag that sets a [join] key has its name (``--build-table`` sets ``build_table``)."""
    import inspect

    from lakehouse.cli.streams import join
    from lakehouse.config import JoinConfig, MonitoringConfig
    from lakehouse.join import JoinOptions

    config = set(JoinConfig.model_fields)
    assert set(JoinOptions.model_fields) <= config
    # flags that are not [join] keys: where the settings come from and how the run behaves;
    # [monitoring] keys keep their names too
    monitoring = set(MonitoringConfig.model_fields)
    not_settings = {"config", "topic", "bootstrap_servers", "take_over", "wait_for_build"}
    assert {"metrics_port", "log_format"} <= monitoring
    not_settings |= monitoring
    flags = set(inspect.signature(join).parameters) - not_settings
    assert flags <= config, sorted(flags - config)


def test_a_delta_source_takes_deltas_options_and_only_for_the_join(tmp_path):
    text = JOIN.replace('source = "files"', 'source = "delta"\ndelta_table = "bronze.orders"')
    settings = load_settings(
        _file(tmp_path, text + "max_records_per_trigger = 10\nskip_change_commits = true\n"),
        environ={"LAKEHOUSE_JOIN__STARTING_VERSION": "latest"},
    )
    source = settings.join.delta_source
    assert source.is_name
    assert source.spark_options == {
        "startingVersion": "latest",
        "maxFilesPerTrigger": "10",
        "skipChangeCommits": "true",
    }
    ingest = (
        '[ingest]\npipeline_id = "i"\nsource = "delta"\ndelta_table = "bronze.cdc"\n'
        'checkpoint = "/ck"\ndead_letter_table = "/t/dlq"\n[[ingest.tables]]\ntable = "/t/b"\n'
    )
    with pytest.raises(ConfigError, match="the ingest reads Debezium records") as err:
        load_settings(_file(tmp_path, ingest), environ={})
    assert err.value.setting == "ingest.source"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(table=" "), "needs delta_table"),
        (dict(table="t", starting_version=2, starting_timestamp="2026-01-01"), "not both"),
        (dict(table="t", max_files_per_trigger=0), "at least 1"),
        (dict(table="t", max_bytes_per_trigger="lots"), "is not a size"),
    ],
)
def test_delta_source_options_refuse_what_delta_would_fail_on_later(options, message):
    from lakehouse.sources import DeltaSourceOptions

    with pytest.raises(ConfigError, match=message):
        DeltaSourceOptions(**options)
    assert DeltaSourceOptions(table="./orders", max_bytes_per_trigger="1g").spark_options == {
        "maxBytesPerTrigger": "1g"
    }
