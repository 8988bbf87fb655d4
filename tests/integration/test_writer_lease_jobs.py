"""Concurrent writers, for real: ``lakehouse ingest`` processes on one build table.

A running ingest holds the table's writer lease: a second one is refused with a message
naming the first; ``--take-over`` makes the first stop at its next batch without writing; a
SIGKILLed holder's lease is stale at once on its machine, so a restart goes ahead; a clean
stop (Ctrl-C) releases the lease. In-process, a join holds its output and pending tables.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.dimension.layout import OP
from lakehouse.errors import WriterLeaseError
from lakehouse.lease import read_lease
from lakehouse.runner import start_join
from lakehouse.testing import DebeziumTable

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DEADLINE_S = 300  # a hang guard only: every wait below ends on an event, not a time


def _write_lines(path: Path, lines: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(path)


def _config(tmp: Path, name: str, cdc: Path, checkpoint: str) -> Path:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(
        '[spark]\nmaster = "local[1]"\n'
        'conf = { "spark.sql.shuffle.partitions" = "1", "spark.ui.enabled" = "false" }\n'
        f'[ingest]\npipeline_id = "rates"\nsource = "files"\npath = "{cdc}"\n'
        f'checkpoint = "{tmp / checkpoint}"\ndead_letter_table = "{tmp}/dead_letter"\n'
        'trigger = "processing-time"\ninterval = "1 second"\nwriter_lease_timeout_ms = 4000\n'
        f'[[ingest.tables]]\ntable = "{tmp}/rates"\nkey = ["currency"]\n'
    )
    return cfg


class Job:
    """A ``lakehouse ingest`` process whose stderr goes to a file the test can poll."""

    def __init__(self, tmp: Path, name: str, cfg: Path, *extra: str) -> None:
        self.log = tmp / f"{name}.log"
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lakehouse.cli", "ingest", "-c", str(cfg), *extra],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, "COLUMNS": "4000"},  # one line per message
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while what not in self.text():
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.text()}"
            assert time.monotonic() < deadline, f"never printed {what!r}:\n{self.text()}"
            time.sleep(0.2)

    def exit_code(self) -> int:
        return self.proc.wait(timeout=DEADLINE_S)


@pytest.mark.timeout(1800)  # four Spark processes, one after another
def test_second_ingest_is_refused_take_over_stops_the_holder_dead_holders_go_stale(spark, tmp_path):
    cdc = tmp_path / "cdc"
    cdc.mkdir()
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snap = t.snapshot([{"currency": c, "rate": "1.0"} for c in ("EUR", "GBP", "JPY")])
    t.advance(60_000)
    updates = [t.update({"currency": c, "rate": "1.5"}) for c in ("EUR", "GBP", "JPY")]
    _write_lines(cdc / "0001.jsonl", [json.dumps(m.value) for m in snap])
    table = f"{tmp_path}/rates"
    cfg = _config(tmp_path, "job", cdc, "checkpoint")

    # 1. the first ingest runs and holds the lease
    first = Job(tmp_path, "first", cfg)
    first.wait_for("ingest batch 0")
    holder = read_lease(table)
    assert holder is not None and holder.pid == first.proc.pid

    # 2. a second one on the same table is refused (before Spark starts), naming the first,
    #    in one line
    second = subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", "ingest", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        env={**os.environ, "COLUMNS": "4000"},
        check=False,
    )
    assert second.returncode == 1, second.stderr
    assert f"error: table '{table}' is being written by another job: ingest 'rates'" in (
        second.stderr
    )
    assert f"pid {first.proc.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    assert read_lease(table).pid == first.proc.pid  # the refused job took nothing

    # 3. SIGKILL the first: its lease stays, but its process is gone, so a restart starts
    first.proc.send_signal(signal.SIGKILL)
    assert first.exit_code() == -signal.SIGKILL
    assert read_lease(table).pid == first.proc.pid
    restarted = Job(tmp_path, "restarted", cfg)
    restarted.wait_for(f"(stale: its process {first.proc.pid} no longer runs on this machine)")
    restarted.wait_for("running")
    assert read_lease(table).pid == restarted.proc.pid

    # 4. another job takes the live job's table over: the live one sees it at its next
    #    heartbeat and stops, naming the new holder
    assert restarted.proc.poll() is None, restarted.text()
    taker = Job(tmp_path, "taker", cfg, "--take-over")
    taker.wait_for("live, taken over")
    assert restarted.exit_code() == 1
    log = restarted.text()
    assert "error: ingest 'rates' no longer holds the writer lease" in log
    assert f"pid {taker.proc.pid}" in log
    taker.wait_for("running")
    _write_lines(cdc / "0002.jsonl", [json.dumps(m.value) for m in updates])
    taker.wait_for("ingest batch 1")

    # 5. a clean stop releases the lease
    taker.proc.send_signal(signal.SIGINT)
    assert taker.exit_code() == 0, taker.text()
    assert read_lease(table) is None

    # every change is in the build table exactly once
    rows = delta.read(spark, table).select("currency", "rate", OP).collect()
    assert sorted((r.currency, str(r.rate), r[OP]) for r in rows) == sorted(
        [(c, "1.0000", "r") for c in ("EUR", "GBP", "JPY")]
        + [(c, "1.5000", "u") for c in ("EUR", "GBP", "JPY")]
    )


def test_a_running_join_holds_its_output_and_pending_tables(spark, tmp_path):
    from helpers import write_build_table
    from reference import Version

    build = str(tmp_path / "rates")
    write_build_table(spark, build, [Version("EUR", 0, "1", "r", 10)], key="currency")
    probe = tmp_path / "orders"
    probe.mkdir()
    cfg = tmp_path / "join.toml"
    cfg.write_text(
        f'[join]\npipeline_id = "orders"\nsource = "files"\npath = "{probe}"\n'
        f'checkpoint = "{tmp_path}/ck"\ntrigger = "processing-time"\ninterval = "1 second"\n'
        'probe_schema = "order_id bigint, currency string, order_ts bigint"\n'
        'probe_key = ["currency"]\nprobe_time = "order_ts"\n'
        f'build_table = "{build}"\noutput_table = "{tmp_path}/out"\n'
        f'pending_table = "{tmp_path}/pending"\ndead_letter_table = "{tmp_path}/dead"\n'
    )
    settings = load_settings(cfg)
    query = start_join(spark, settings)
    try:
        other = settings.model_copy(
            update={"join": settings.join.model_copy(update={"checkpoint": f"{tmp_path}/ck2"})}
        )
        with pytest.raises(WriterLeaseError, match=r"being written by another job: join 'orders'"):
            start_join(spark, other)
        assert read_lease(f"{tmp_path}/pending").pipeline_id == "orders"
    finally:
        query.stop()
    # the stopped query's lease no longer blocks a new start in this process
    again = start_join(spark, settings)
    again.stop()
