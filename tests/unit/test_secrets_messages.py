"""Messages that handle Kafka settings never show a credential's value."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from lakehouse.config import load_settings
from lakehouse.errors import ConfigError
from lakehouse.sources._kafka_client import connection_error

SECRET = "pw-5f1d9c2e"


def test_an_invalid_kafka_option_is_reported_without_its_value(tmp_path):
    cfg = tmp_path / "lakehouse.toml"
    # a numeric password is not a string: the error names the setting, not the value
    cfg.write_text('[kafka.options]\n"sasl.password" = 5193\n')
    with pytest.raises(ConfigError) as e:
        load_settings(cfg, environ={})
    assert "kafka.options.sasl.password" in str(e.value) and "5193" not in str(e.value)
    assert "value not shown" in str(e.value)


def test_an_invalid_ordinary_setting_still_shows_its_value(tmp_path):
    with pytest.raises(ConfigError, match=r"got 'sideways'"):
        load_settings(
            None,
            environ={},
            overrides={
                "join": {
                    "pipeline_id": "j",
                    "checkpoint": "c",
                    "source": "sideways",
                    "topics": ["t"],
                    "probe_schema": "a int",
                    "probe_key": ["a"],
                    "build_table": "b",
                    "output_table": "o",
                    "pending_table": "p",
                    "dead_letter_table": "d",
                }
            },
        )


@pytest.mark.parametrize(
    "code", [KafkaError._AUTHENTICATION, KafkaError._TRANSPORT, KafkaError._SSL]
)
def test_connection_errors_name_security_settings_without_values(code):
    config = {
        "bootstrap.servers": "b:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "alice",
        "sasl.password": SECRET,
        "ssl.key.password": SECRET,
        "sasl.oauthbearer.client.secret": SECRET,
    }
    error = connection_error(
        config,
        doing="listing topics",
        timeout_ms=1000,
        errors=[KafkaError(code, "failed")],
        log_lines=[],
    )
    assert SECRET not in str(error)
    if code != KafkaError._TRANSPORT:
        assert "kafka.sasl.password=<set>" in str(error)
