"""Scheduled runs (issue 15): available-now runs that finish their work, and triggers that change.

A join scheduled before its ingest leaves its rows pending; once the ingest has run, the next
available-now run of the join releases them although no probe row is new (the tick source is
in every join's stream, so each run has a batch). The same checkpoint then runs with a
processing-time trigger and back with available-now: the query's source list never changes.
In-process, on the test session's Spark, through the runner the CLI uses.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.runner import start_ingest, start_join
from lakehouse.testing import DebeziumTable

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _write(path: Path, lines: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(path)


def _config(tmp: Path, trigger: str) -> Path:
    cfg = tmp / f"{trigger}.toml"
    cfg.write_text(f"""
[ingest]
pipeline_id = "ingest"
source = "files"
path = "{tmp}/cdc"
checkpoint = "{tmp}/ck/ingest"
dead_letter_table = "{tmp}/out/dead_letter"
trigger = "available-now"
[[ingest.tables]]
table = "{tmp}/out/rates"
key = ["currency"]

[join]
pipeline_id = "join"
source = "files"
path = "{tmp}/orders"
checkpoint = "{tmp}/ck/join"
trigger = "{trigger}"
interval = "1 second"
probe_schema = "order_id bigint, currency string"
probe_key = ["currency"]
probe_id = "order_id"
mode = "proctime"
join_type = "left"
build_table = "{tmp}/out/rates"
output_table = "{tmp}/out/output"
pending_table = "{tmp}/out/pending"
dead_letter_table = "{tmp}/out/join_dead_letter"
""")
    return cfg


def _run_available_now(starter, spark, cfg: Path) -> None:
    query = starter(spark, load_settings(cfg))
    query.awaitTermination()
    assert query.exception() is None


def _released(spark, tmp: Path) -> list[int]:
    out = f"{tmp}/out/output"
    if not delta.table_exists(out):
        return []
    return sorted(r.order_id for r in delta.read(spark, out).collect())


def test_an_available_now_join_after_its_ingest_releases_what_waited_and_triggers_can_change(
    spark, tmp_path
):
    (tmp_path / "cdc").mkdir()
    (tmp_path / "orders").mkdir()
    now = _config(tmp_path, "available-now")
    _write(
        tmp_path / "orders" / "0001.jsonl",
        [json.dumps({"order_id": i, "currency": c}) for i, c in enumerate(["EUR", "GBP"])],
    )
    # 1. the join is scheduled before its ingest: nothing to join against yet
    _run_available_now(start_join, spark, now)
    assert _released(spark, tmp_path) == []

    # 2. the ingest runs (the whole snapshot, marker set)
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snap = t.snapshot([{"currency": c, "rate": "1.5"} for c in ("EUR", "GBP")])
    _write(tmp_path / "cdc" / "0001.jsonl", [json.dumps(m.value) for m in snap])
    _run_available_now(start_ingest, spark, now)

    # 3. the next run of the join has no new order, and releases both
    _run_available_now(start_join, spark, now)
    assert _released(spark, tmp_path) == [0, 1]

    # 4. the same checkpoint with a processing-time trigger (Spark refused it before: the
    #    tick source made the source lists differ), then available-now again
    _write(tmp_path / "orders" / "0002.jsonl", [json.dumps({"order_id": 2, "currency": "EUR"})])
    running = start_join(spark, load_settings(_config(tmp_path, "processing-time")))
    try:
        deadline = time.monotonic() + 120
        while _released(spark, tmp_path) != [0, 1, 2]:
            assert running.exception() is None
            assert time.monotonic() < deadline, "the processing-time run released nothing"
            time.sleep(0.5)
    finally:
        running.stop()
    _write(tmp_path / "orders" / "0003.jsonl", [json.dumps({"order_id": 3, "currency": "GBP"})])
    _run_available_now(start_join, spark, now)
    assert _released(spark, tmp_path) == [0, 1, 2, 3]
