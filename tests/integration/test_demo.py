"""The demo in files mode, end to end (what `make demo ARGS="--source files"` runs), through the
installed command."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from helpers import lakehouse_command

from lakehouse import delta

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _demo(*args: str, compiled_projections: bool = False) -> subprocess.CompletedProcess[str]:
    return lakehouse_command(
        "demo", *args, columns=120, timeout=900, compiled_projections=compiled_projections
    )


def _succeeded(proc: subprocess.CompletedProcess[str]) -> str:
    """The demo's output when it exited 0; otherwise fail with its output and its whole error
    output, untruncated (an assertion's message would be cut to a few lines)."""
    if proc.returncode != 0:
        pytest.fail(
            f"lakehouse demo exited {proc.returncode}\n--- output (end) ---\n"
            f"{proc.stdout[-6000:]}\n--- error output ---\n{proc.stderr[-20000:]}",
            pytrace=False,
        )
    return proc.stdout


def test_demo_refuses_an_unknown_source_before_spark_starts():
    proc = _demo("--source", "carrier-pigeon")
    assert proc.returncode == 2, proc.stderr
    assert "--source must be 'kafka', 'files' or 'postgres'" in proc.stderr


def test_demo_in_files_mode_passes_its_quality_checks(spark, tmp_path):
    # with Spark's generated code as users run it (the rest of the suite interprets its
    # projections, tests/conftest.py)
    proc = _demo(
        "--source",
        "files",
        "--output",
        str(tmp_path / "demo"),
        "--orders",
        "240",
        compiled_projections=True,
    )
    text = _succeeded(proc)
    assert "demo summary" in text
    tables = tmp_path / "demo" / "tables"
    # every order was joined by the processing-time join, after the snapshot completed
    proc = delta.read(spark, str(tables / "orders_proctime")).collect()
    assert len(proc) == 240 and all(r._matched for r in proc)
    completed = int(
        delta.get_properties(str(tables / "rates"))["lakehouse.snapshot.completedVersion"]
    )
    assert min(r._build_version for r in proc) >= completed
    # the row-time join released orders as its watermark passed them; at the end the demo
    # ended its input, which released the newest ones too: nothing is left pending
    rows = delta.read(spark, str(tables / "orders_rowtime")).collect()
    assert len(rows) == 240 and all(r._matched for r in rows)
    assert delta.row_count(str(tables / "orders_rowtime_pending")) == 0
    by = {r._released_by for r in rows}
    assert by == {"watermark", "end_of_input"}, by
    for join in ("rowtime", "proctime"):
        summary = json.loads((tmp_path / "demo" / "quality" / join / "summary.json").read_text())
        assert summary["success"] is True
        # the batches the demo counted are the ones the report's ledger holds
        checks = {c["name"]: c for c in summary["checks"]}
        counted = re.search(rf"{join}: batches written\W+(\d+)", text)
        assert counted, text[-3000:]
        assert int(counted[1]) == checks["watermark_monotonic"]["observed"]["batches"]
        # report paths are printed whole, on lines of their own
        docs = tmp_path / "demo" / "quality" / join / "data_docs" / "index.html"
        assert f"{join} report:".ljust(22) + str(docs) in text.splitlines()
    # not a terminal: plain progress lines, not a live view redrawn into the log
    assert "demo — wave" not in text and "demo — settling" not in text
    assert re.search(r"^done: ingest \d+ records -> \d+ versions; rowtime", text, re.M), text


@pytest.mark.extended  # its own PostgreSQL, Connect and broker, started and stopped by the demo
@pytest.mark.broker
@pytest.mark.debezium
def test_demo_on_a_real_database_passes_its_quality_checks(spark, tmp_path):
    # --source postgres: PostgreSQL, Debezium's connector in Kafka Connect, the broker; the
    # rates come from the database's snapshot and its committed transactions
    from lakehouse.demo.data import make_database_demo

    out = tmp_path / "demo"
    proc = _demo("--source", "postgres", "--output", str(out), "--orders", "240")
    text = _succeeded(proc)
    assert "Debezium (Kafka Connect pid" in text and "read the snapshot of 24 rows" in text
    assert "at org.apache" not in text + proc.stderr  # no Java trace on a clean stop

    # the build table ends where the database ended: its newest version of each key
    rates = dict(make_database_demo(orders=240).rates)
    for wave in make_database_demo(orders=240).waves:
        for transaction in wave.transactions:
            for sql, params in transaction:
                if sql.startswith("DELETE"):
                    del rates[params[0]]
                elif sql.startswith("INSERT"):
                    rates[params[0]] = params[1]
                else:
                    rates[params[1]] = params[0]
    tables = out / "tables"
    latest: dict[str, object] = {}
    versions = delta.read(spark, str(tables / "rates")).collect()
    for v in sorted(versions, key=lambda v: (v._event_time, v._seq)):
        if v._op == "d":
            latest.pop(v.currency, None)
        else:
            latest[v.currency] = v.rate
    assert latest == rates
    props = delta.get_properties(str(tables / "rates"))
    assert props["lakehouse.snapshot.complete"] == "true"
    assert props["lakehouse.snapshot.signal"] in ("notification", "heartbeat", "last")

    # both joins matched every order; the processing-time one only after the marker
    completed = int(props["lakehouse.snapshot.completedVersion"])
    proctime = delta.read(spark, str(tables / "orders_proctime")).collect()
    assert len(proctime) == 240 and all(r._matched for r in proctime)
    assert min(r._build_version for r in proctime) >= completed
    rowtime = delta.read(spark, str(tables / "orders_rowtime")).collect()
    assert len(rowtime) == 240 and all(r._matched for r in rowtime)
    assert delta.row_count(str(tables / "orders_rowtime_pending")) == 0

    # the connector's configuration, to copy, without its password
    connector = json.loads((out / "debezium-connector.json").read_text())
    assert connector["config"]["connector.class"].endswith("PostgresConnector")
    assert connector["config"]["database.password"].startswith("<")
    toml = (out / "lakehouse.toml").read_text()
    assert 'notification_topic = "dbserver1.notifications"' in toml
