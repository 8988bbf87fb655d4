"""Crash and restart: SIGKILL a pipeline process mid-batch, restart it, compare with a run that
was never interrupted. Nothing may be lost or duplicated.

The kill is real: the pipeline runs as ``lakehouse ingest|join`` in a subprocess, and a
failpoint (``LAKEHOUSE_FAILPOINTS``) makes that process SIGKILL itself at an exact place of a
batch. The restart runs the same configuration from the same checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_rows_equal, write_build_table
from reference import Version

from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.dimension import layout as L
from lakehouse.runner import start_ingest, start_join
from lakehouse.testing import DebeziumTable

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _write_lines(path: Path, lines: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(path)


def _cdc_files(directory: Path) -> None:
    """Three files, one batch each: snapshot start; snapshot end + a bad record; the log."""
    directory.mkdir(parents=True)
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snap = t.snapshot([{"currency": c, "rate": "1.0"} for c in ("EUR", "GBP", "JPY", "CHF")])
    t.advance(60_000)
    log = [
        t.update({"currency": "EUR", "rate": "1.1"}),
        *t.delete("GBP"),
        t.insert({"currency": "GBP", "rate": "1.3"}),
        t.truncate(),
    ]

    def line(m):
        return "null" if m.value is None else json.dumps(m.value)

    _write_lines(directory / "0001.jsonl", [line(m) for m in snap[:2]])
    _write_lines(directory / "0002.jsonl", [line(m) for m in snap[2:]] + ["{not json"])
    _write_lines(directory / "0003.jsonl", [line(m) for m in log])


def _config(tmp: Path, name: str, *, section: str, body: str) -> Path:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(
        '[spark]\nmaster = "local[2]"\n'
        'conf = { "spark.sql.shuffle.partitions" = "2", "spark.ui.enabled" = "false" }\n'
        f"[{section}]\n{body}"
    )
    return cfg


def _ingest_config(tmp: Path, name: str, cdc: Path) -> Path:
    out = tmp / name
    return _config(
        tmp,
        name,
        section="ingest",
        body=(
            f'pipeline_id = "ingest"\nsource = "files"\npath = "{cdc}"\n'
            f'checkpoint = "{out}/checkpoint"\ndead_letter_table = "{out}/dead_letter"\n'
            'trigger = "available-now"\nmax_records_per_trigger = 1\n'
            f'[[ingest.tables]]\ntable = "{out}/rates"\nkey = ["currency"]\n'
        ),
    )


def _run_killed(command: str, cfg: Path, failpoint: str) -> None:
    env = {**os.environ, "LAKEHOUSE_FAILPOINTS": failpoint}
    proc = subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", command, "-c", str(cfg)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-3000:])


def _run_in_process(spark, cfg: Path, start) -> None:
    query = start(spark, load_settings(cfg))
    query.awaitTermination()
    assert query.exception() is None


def _build_rows(spark, uri: str):
    cols = [
        "currency",
        "rate",
        L.OP,
        L.EVENT_TIME,
        L.SEQ,
        L.SNAPSHOT,
        L.KAFKA_PARTITION,
        L.KAFKA_OFFSET,
    ]
    return delta.read(spark, uri).select(*cols).collect()


def _dead_rows(spark, uri: str):
    return delta.read(spark, uri).select("_partition", "_offset", "_error_kind").collect()


@pytest.mark.parametrize(
    "failpoint",
    [
        # killed after the dead letters of the batch with the last snapshot row, before its data
        "ingest.after_dead_letters@1",
        # killed after that batch's data commit, before the snapshot marker commit
        "ingest.after_data@1",
    ],
)
def test_ingest_killed_mid_batch_restarts_to_the_same_tables(spark, tmp_path, failpoint):
    cdc = tmp_path / "cdc"
    _cdc_files(cdc)
    reference = _ingest_config(tmp_path, "reference", cdc)
    _run_in_process(spark, reference, start_ingest)

    crashed = _ingest_config(tmp_path, "crashed", cdc)
    _run_killed("ingest", crashed, failpoint)
    _run_in_process(spark, crashed, start_ingest)

    ref, got = tmp_path / "reference", tmp_path / "crashed"
    assert_rows_equal(_build_rows(spark, f"{got}/rates"), _build_rows(spark, f"{ref}/rates"))
    assert_rows_equal(
        _dead_rows(spark, f"{got}/dead_letter"), _dead_rows(spark, f"{ref}/dead_letter")
    )
    props = delta.get_properties(f"{got}/rates")
    assert props[L.PROP_SNAPSHOT_COMPLETE] == "true"
    # the marker covers the data commit of batch 1, the one with the 'last' record
    completed = int(props[L.PROP_SNAPSHOT_COMPLETED_VERSION])
    assert delta.read(spark, f"{got}/rates", version=completed).count() == 4


def _probe_files(directory: Path) -> None:
    directory.mkdir(parents=True)
    for batch in range(3):
        rows = [
            {
                "order_id": batch * 10 + i,
                "currency": ["EUR", "GBP", "ZZZ"][i % 3],
                "order_ts": 1_000 * (batch * 10 + i),
            }
            for i in range(6)
        ]
        rows.append("{ bad")
        _write_lines(
            directory / f"{batch:04d}.jsonl",
            [r if isinstance(r, str) else json.dumps(r) for r in rows],
        )


def _join_config(tmp: Path, name: str, probe: Path, build: str) -> Path:
    out = tmp / name
    return _config(
        tmp,
        name,
        section="join",
        body=(
            f'pipeline_id = "join"\nsource = "files"\npath = "{probe}"\n'
            f'checkpoint = "{out}/checkpoint"\ntrigger = "available-now"\n'
            "max_records_per_trigger = 1\n"
            'probe_schema = "order_id bigint, currency string, order_ts bigint"\n'
            'probe_key = ["currency"]\nprobe_time = "order_ts"\nprobe_id = "order_id"\n'
            'join_type = "left"\nout_of_orderness_ms = 2000\n'
            f'build_table = "{build}"\noutput_table = "{out}/output"\n'
            f'pending_table = "{out}/pending"\ndead_letter_table = "{out}/dead_letter"\n'
        ),
    )


def _output_rows(spark, uri: str):
    # everything but the wall-clock columns (arrival and release time)
    return (
        delta.read(spark, uri)
        .select(
            "order_id",
            "currency",
            "order_ts",
            "value",
            "_matched",
            "_build_version",
            "_build_event_time",
            "_watermark",
            "_batch_id",
        )
        .collect()
    )


@pytest.mark.parametrize(
    "failpoint",
    [
        "join.before_output@1",  # decided, nothing written yet
        "join.after_output@1",  # output committed, pending not: the replay must reuse the plan
        "join.after_pending@1",  # both committed, Spark's checkpoint not: the replay is a no-op
    ],
)
def test_join_killed_mid_batch_restarts_to_the_same_output(spark, tmp_path, failpoint):
    probe = tmp_path / "orders"
    _probe_files(probe)
    build = str(tmp_path / "rates")
    write_build_table(
        spark,
        build,
        [
            Version("EUR", 0, "1", "r", 10),
            Version("GBP", 0, "2", "r", 20),
            Version("EUR", 12_000, "3", "u", 11),
        ],
        watermark_ms=10**13,
        key="currency",
    )
    reference = _join_config(tmp_path, "reference", probe, build)
    _run_in_process(spark, reference, start_join)

    crashed = _join_config(tmp_path, "crashed", probe, build)
    _run_killed("join", crashed, failpoint)
    _run_in_process(spark, crashed, start_join)

    ref, got = tmp_path / "reference", tmp_path / "crashed"
    expected = _output_rows(spark, f"{ref}/output")
    assert len(expected) == 15  # 18 orders, the last 3 wait for the watermark
    assert_rows_equal(_output_rows(spark, f"{got}/output"), expected)
    pending = delta.read(spark, f"{got}/pending").select("order_id").collect()
    assert sorted(r.order_id for r in pending) == [23, 24, 25]
    assert_rows_equal(
        _dead_rows(spark, f"{got}/dead_letter"), _dead_rows(spark, f"{ref}/dead_letter")
    )
