"""Kafka credentials never leak: real commands, a real broker, then a grep of everything.

The credentials come from an environment variable (``LAKEHOUSE_KAFKA__OPTIONS__SASL_PASSWORD``)
and from a librdkafka properties file (``kafka.config_file``). The broker has a SASL/PLAIN
listener and the pipelines authenticate with them: the password from the environment is
checked by the broker (through Spark's Kafka source, which gets it translated into its JAAS
configuration, and through confluent-kafka's high-watermark reads), and the key password from
the file travels in the Java client's settings too (unused without TLS). ``lakehouse ingest``
and ``lakehouse join`` run as real subprocesses (Spark event logging on, Spark's log at INFO),
then ``status``, ``sql`` and ``quality``; the test then searches their stdout and stderr, every
file under the run's directory (Delta logs and data, checkpoints, Spark event logs, quality
report, anything a command left in its working directory) for the secret strings.
``lakehouse sql`` is checked to be read-only over the project's tables.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lakehouse.cli import app
from lakehouse.errors import ConfigError
from lakehouse.sources.kafka_admin import create_topic, produce
from lakehouse.testing import DebeziumTable
from lakehouse.testing.broker import KafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.broker]

START = 1_700_000_000_000


def _config(root: Path, bootstrap: str, cdc: str, orders: str, properties: Path) -> Path:
    cfg = root / "lakehouse.toml"
    cfg.write_text(
        f"""
[kafka]
bootstrap_servers = "{bootstrap}"
config_file = "{properties}"

[kafka.options]
"security.protocol" = "SASL_PLAINTEXT"

[ingest]
pipeline_id = "ingest-secrets"
topics = ["{cdc}"]
checkpoint = "{root}/checkpoints/ingest"
trigger = "available-now"
dead_letter_table = "{root}/tables/dead_letter"

[[ingest.tables]]
table = "{root}/tables/rates"
key = ["currency"]

[join]
pipeline_id = "join-secrets"
topics = ["{orders}"]
probe_schema = "order_id bigint, currency string, ts bigint"
probe_key = ["currency"]
probe_id = "order_id"
mode = "proctime"
watermark = "none"
join_type = "left"
build_table = "{root}/tables/rates"
output_table = "{root}/tables/orders_out"
pending_table = "{root}/tables/orders_pending"
dead_letter_table = "{root}/tables/join_dead_letter"
checkpoint = "{root}/checkpoints/join"
trigger = "available-now"

[quality]
report_dir = "{root}/quality"
"""
    )
    return cfg


def _lakehouse(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        timeout=600,
    )


def _files_containing(root: Path, secrets: list[bytes], skip: set[Path]) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and path not in skip:
            data = path.read_bytes()
            hits += [f"{path}: {s.decode()}" for s in secrets if s in data]
    return hits


@pytest.fixture
def sasl_broker(tmp_path):
    """A broker with a SASL/PLAIN listener for user alice, and alice's (secret) password."""
    password = f"env-pw-{uuid.uuid4().hex}"
    # outside the run's directory: its configuration holds the password by design
    broker = KafkaBroker(tmp_path / "broker", sasl_users={"alice": password})
    try:
        broker.start()
        yield broker, password
    finally:
        broker.stop()


def test_credentials_from_env_and_file_never_appear_anywhere(
    sasl_broker, kafka_topic, tmp_path, monkeypatch
):
    broker, env_secret = sasl_broker
    file_secret = f"file-pw-{uuid.uuid4().hex}"
    secrets = [env_secret.encode(), file_secret.encode()]
    root = tmp_path / "run"
    work = root / "cwd"
    work.mkdir(parents=True)
    properties = tmp_path / "kafka.properties"  # outside root: it holds the secret by design
    properties.write_text(
        f"sasl.mechanism=PLAIN\nsasl.username=alice\nssl.key.password={file_secret}\n"
    )
    admin = broker.bootstrap  # the test's own clients use the plain listener
    cdc, orders = f"{kafka_topic}-cdc", f"{kafka_topic}-orders"
    create_topic(admin, cdc, 1)
    create_topic(admin, orders, 1)
    t = DebeziumTable("public", "rates", key="currency", start_ms=START)
    messages = t.snapshot(
        [{"currency": "EUR", "rate": "1.08"}, {"currency": "GBP", "rate": "1.27"}]
    )
    produce(admin, cdc, [(m.key_bytes(), m.value_bytes(), 0) for m in messages])
    produce(
        admin,
        orders,
        [
            (None, f'{{"order_id": {i}, "currency": "EUR", "ts": {START}}}'.encode(), 0)
            for i in range(3)
        ],
    )
    # the pipelines authenticate on the SASL listener with the secrets
    cfg = _config(root, broker.sasl_bootstrap, cdc, orders, properties)
    env = {
        **os.environ,
        "LAKEHOUSE_KAFKA__OPTIONS__SASL_PASSWORD": env_secret,
        "LAKEHOUSE_SPARK_MASTER": "local[1]",
        "LAKEHOUSE_SPARK_CONF": (
            f"{os.environ.get('LAKEHOUSE_SPARK_CONF', '')};"
            f"spark.eventLog.enabled=true;spark.eventLog.dir={root}/eventlog"
        ),
        "LAKEHOUSE_SPARK_LOG_LEVEL": "INFO",  # Spark's plans and options, in the logs
    }
    (root / "eventlog").mkdir()
    outputs = []
    for command in ("ingest", "join"):
        done = _lakehouse([command, "-c", str(cfg)], env, work)
        outputs.append(done.stdout + done.stderr)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert b"ingest batch 0" in outputs[0] and b"join batch" in outputs[1]

    # the other commands, in this process (they share the test session's Spark)
    for key in ("LAKEHOUSE_KAFKA__OPTIONS__SASL_PASSWORD",):
        monkeypatch.setenv(key, env_secret)
    runner = CliRunner()
    for args in (
        ["status", f"{root}/tables/rates"],
        ["status", f"{root}/tables/orders_out"],
        ["sql", "-c", str(cfg), "SELECT currency, count(*) FROM orders_out GROUP BY currency"],
        ["quality", "-c", str(cfg)],
    ):
        result = runner.invoke(app, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), args
        outputs.append(result.output.encode())
    assert b"EUR" in outputs[-2]  # the sql query ran

    leaks = [f"output of command {i}" for i, o in enumerate(outputs) for s in secrets if s in o]
    leaks += _files_containing(root, secrets, skip={cfg})
    assert not leaks, leaks
    # the search looked at what matters: commit logs, checkpoints, event logs, the report
    assert list(root.glob("tables/*/_delta_log/*.json"))
    assert list(root.glob("checkpoints/*/offsets/*"))
    assert any((root / "eventlog").iterdir())
    assert list(root.glob("quality/**/*.json"))


def test_no_command_takes_a_credential_on_the_command_line():
    import typer.main

    command = typer.main.get_command(app)
    suspicious = ("password", "secret", "token", "sasl", "ssl", "credential", "option", "jaas")
    for name, sub in command.commands.items():
        for param in sub.params:
            flags = " ".join(param.opts).lower()
            assert not any(word in flags for word in suspicious), (name, param.opts)
    refused = CliRunner().invoke(app, ["ingest", "--kafka-sasl-password", "x"])
    assert refused.exit_code == 2 and "No such option" in refused.output


@pytest.mark.parametrize(
    "query",
    [
        "FROM rates INSERT OVERWRITE DIRECTORY '{out}' USING parquet SELECT *",
        "WITH x AS (SELECT 1 AS a) INSERT INTO rates SELECT * FROM x",
        "SELECT reflect('java.lang.System', 'getProperty', 'user.home')",
        "SELECT `java_method`('java.lang.System', 'exit', 0)",
        "SHOW TABLES; DROP TABLE rates",
    ],
)
@pytest.mark.parametrize("engine", ["spark", "duckdb"])
def test_sql_refuses_writes_whatever_word_they_start_with(spark, tmp_path, query, engine):
    from lakehouse import delta

    uri, out = str(tmp_path / "rates"), tmp_path / "written"
    delta.append(spark.sql("SELECT 'EUR' AS currency"), uri, txn=("t", 0))
    before = delta.latest_version(uri)
    try:
        result = CliRunner().invoke(
            app, ["sql", "--engine", engine, "--table", f"rates={uri}", query.format(out=out)]
        )
    finally:
        spark.conf.unset("spark.sql.runSQLOnFiles")
    assert isinstance(result.exception, ConfigError) or result.exit_code != 0, result.output
    assert delta.latest_version(uri) == before and not out.exists()


@pytest.mark.parametrize(
    ("engine", "file_query"),
    [("spark", "SELECT * FROM parquet.`{uri}`"), ("duckdb", "SELECT * FROM '{uri}/*.parquet'")],
)
def test_sql_reads_only_the_registered_tables(spark, tmp_path, engine, file_query):
    from lakehouse import delta

    uri = str(tmp_path / "rates")
    delta.append(spark.sql("SELECT 'EUR' AS currency"), uri, txn=("t", 0))
    sql = ["sql", "--engine", engine, "--table", f"rates={uri}"]
    try:
        ok = CliRunner().invoke(app, [*sql, "SELECT * FROM rates"])
        files = CliRunner().invoke(app, [*sql, file_query.format(uri=uri)])
    finally:
        spark.conf.unset("spark.sql.runSQLOnFiles")
    assert ok.exit_code == 0 and "EUR" in ok.output
    assert files.exit_code != 0 or files.exception is not None


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "SELECT * FROM ratez",
            r"`ratez` cannot be found.*\[TABLE_OR_VIEW_NOT_FOUND\]; the tables are rates",
        ),
        (
            "SELECT * FORM rates",
            r"Syntax error at or near 'rates'.*\(line 1, column 15\) \[PARSE_SYNTAX_ERROR\]",
        ),
        ("SELECT curency FROM rates", r"`curency` cannot be resolved. Did you mean .*`currency`"),
    ],
)
def test_a_query_spark_refuses_is_one_line_naming_the_cause(spark, tmp_path, query, expected):
    from lakehouse import delta

    uri = str(tmp_path / "rates")
    delta.append(spark.sql("SELECT 'EUR' AS currency"), uri, txn=("t", 0))
    try:
        result = CliRunner().invoke(
            app, ["sql", "--engine", "spark", "--table", f"rates={uri}", query]
        )
    finally:
        spark.conf.unset("spark.sql.runSQLOnFiles")
    assert isinstance(result.exception, ConfigError), result.output
    message = str(result.exception)
    assert "\n" not in message and re.search(expected, message), message
