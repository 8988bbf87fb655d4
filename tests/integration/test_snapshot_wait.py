"""End to end: a processing-time join started before the CDC snapshot completes emits nothing
until the marker is set, then every probe row matches — never a row joined against a
half-loaded dimension (FLINK-19830)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.dimension.layout import PROP_SNAPSHOT_COMPLETE, PROP_SNAPSHOT_COMPLETED_VERSION
from lakehouse.runner import start_ingest, start_join
from lakehouse.testing import DebeziumTable

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _write(path: Path, lines: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(path)


def _wait(predicate, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _pending_rows(uri: str) -> int | None:
    if not delta.table_exists(uri):
        return None
    for entry in delta.history(uri, limit=1):
        if "lakehouse.pendingRows" in entry.metadata:
            return int(entry.metadata["lakehouse.pendingRows"])
    return None


def test_proctime_join_waits_for_snapshot_then_matches_everything(spark, tmp_path):
    cdc, orders, out = tmp_path / "cdc", tmp_path / "orders", tmp_path / "tables"
    cdc.mkdir()
    orders.mkdir()
    cfg = tmp_path / "lakehouse.toml"
    cfg.write_text(f"""
[ingest]
pipeline_id = "ingest"
source = "files"
path = "{cdc}"
checkpoint = "{tmp_path}/ck/ingest"
dead_letter_table = "{out}/dead_letter"
interval = "1 second"
[[ingest.tables]]
table = "{out}/rates"
key = ["currency"]

[join]
pipeline_id = "join"
source = "files"
path = "{orders}"
checkpoint = "{tmp_path}/ck/join"
interval = "1 second"
probe_schema = "order_id bigint, currency string"
probe_key = ["currency"]
probe_id = "order_id"
mode = "proctime"
watermark = "none"
join_type = "left"
build_table = "{out}/rates"
output_table = "{out}/output"
pending_table = "{out}/pending"
dead_letter_table = "{out}/join_dead_letter"
""")
    settings = load_settings(cfg)
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snapshot = t.snapshot([{"currency": c, "rate": "1.5"} for c in ("EUR", "GBP", "JPY")])
    _write(cdc / "0001.jsonl", [json.dumps(m.value) for m in snapshot[:2]])  # first, true
    _write(
        orders / "0001.jsonl",
        [
            json.dumps({"order_id": i, "currency": c})
            for i, c in enumerate(["EUR", "GBP", "JPY", "JPY"])
        ],
    )
    ingest = start_ingest(spark, settings)
    join = start_join(spark, settings)
    try:
        build = f"{out}/rates"
        _wait(
            lambda: delta.table_exists(build) and delta.row_count(build) == 2,
            "the first half of the snapshot",
        )
        _wait(lambda: _pending_rows(f"{out}/pending") == 4, "the orders to be pending")
        # half the dimension is loaded and all orders are there: nothing may be emitted
        time.sleep(3)
        assert not delta.table_exists(f"{out}/output") or delta.row_count(f"{out}/output") == 0
        assert delta.get_properties(build)[PROP_SNAPSHOT_COMPLETE] == "false"

        _write(cdc / "0002.jsonl", [json.dumps(snapshot[2].value)])  # JPY, 'last'
        _wait(
            lambda: delta.get_properties(build)[PROP_SNAPSHOT_COMPLETE] == "true",
            "the snapshot marker",
        )
        # no new order arrives: the join's ticks release the waiting rows
        _wait(lambda: _pending_rows(f"{out}/pending") == 0, "the release")
    finally:
        join.stop()
        ingest.stop()
    rows = delta.read(spark, f"{out}/output").collect()
    assert sorted(r.order_id for r in rows) == [0, 1, 2, 3]
    assert all(r._matched for r in rows)
    completed = int(delta.get_properties(build)[PROP_SNAPSHOT_COMPLETED_VERSION])
    assert all(r._build_version >= completed for r in rows)
    assert {r.currency: str(r.rate) for r in rows} == {
        "EUR": "1.5000",
        "GBP": "1.5000",
        "JPY": "1.5000",
    }
