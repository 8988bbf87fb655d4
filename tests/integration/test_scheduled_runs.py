"""Scheduled runs (issue 15): runs that finish their work, triggers that change, exit codes. Every
test drives the installed ``lakehouse`` command as a scheduler does, and reads the tables it
leaves with the test session's Spark. A join scheduled before its ingest is refused unless told
to wait; once the ingest has run, the next available-now run of the join releases what waited
although no probe row is new (the tick source is in every join's stream, so each run has a
batch); the same checkpoint then runs with a processing-time trigger, stopped with Ctrl-C (exit
0: that is how a processing-time run ends), and back with available-now. An available-now run
stopped by SIGINT or SIGTERM exits 130 or 143 and the next run finishes it. A backfill runs to
completion (``--until-complete``) and equals the reference; records that contradict the probe
schema are refused, then kept.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_rows_equal, lakehouse_command, write_build_table
from reference import ProbeRow, Version, rowtime_join

from lakehouse import delta
from lakehouse.testing import DebeziumTable
from lakehouse.testing.broker import free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _write(path: Path, lines: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(path)


def _config(tmp: Path, *, mode: str = "proctime", relative: bool = False) -> Path:
    """An ingest of rates and a join of orders on JSON-lines files, both available-now: a
    processing-time join of ``order_id, currency``, or a row-time one with ``order_ts``. With
    ``relative`` every location is relative to ``tmp`` (the directory the commands then run
    in), as a user writes them."""
    cfg = tmp / "lakehouse.toml"
    at = "" if relative else f"{tmp}/"
    probe = (
        'probe_schema = "order_id bigint, currency string"'
        if mode == "proctime"
        else 'probe_schema = "order_id bigint, currency string, order_ts bigint"\n'
        'probe_time = "order_ts"'
    )
    cfg.write_text(f"""
[spark]
master = "local[1]"
conf = {{ "spark.sql.shuffle.partitions" = "1", "spark.ui.enabled" = "false" }}

[ingest]
pipeline_id = "rates"
source = "files"
path = "{at}cdc"
checkpoint = "{at}ck/ingest"
dead_letter_table = "{at}out/dead_letter"
trigger = "available-now"
[[ingest.tables]]
table = "{at}out/rates"
key = ["currency"]

[join]
pipeline_id = "orders"
source = "files"
path = "{at}orders"
checkpoint = "{at}ck/join"
trigger = "available-now"
interval = "1 second"
{probe}
probe_key = ["currency"]
probe_id = "order_id"
mode = "{mode}"
join_type = "left"
build_table = "{at}out/rates"
output_table = "{at}out/output"
pending_table = "{at}out/pending"
dead_letter_table = "{at}out/join_dead_letter"
""")
    return cfg


def _released(spark, tmp: Path) -> list[int]:
    out = f"{tmp}/out/output"
    if not delta.table_exists(out):
        return []
    return sorted(r.order_id for r in delta.read(spark, out).collect())


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stderr


def test_an_available_now_join_after_its_ingest_releases_what_waited_and_triggers_can_change(
    spark, tmp_path
):
    # as cron runs it: the installed command, one run after another on the same checkpoint
    (tmp_path / "cdc").mkdir()
    (tmp_path / "orders").mkdir()
    cfg = str(_config(tmp_path))
    _write(
        tmp_path / "orders" / "0001.jsonl",
        [json.dumps({"order_id": i, "currency": c}) for i, c in enumerate(["EUR", "GBP"])],
    )
    # 1. the join is scheduled before its ingest: refused (a mistyped path would keep every
    #    row pending), unless it is told to wait, which it says
    missing = lakehouse_command("join", "-c", cfg)
    assert missing.returncode == 1 and "does not exist" in missing.stderr, missing.stderr
    assert "--wait-for-build" in missing.stderr and "Traceback" not in missing.stderr
    assert "waits for it" in _ok(lakehouse_command("join", "-c", cfg, "--wait-for-build"))
    assert _released(spark, tmp_path) == []

    # 2. the ingest runs (the whole snapshot, marker set)
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snap = t.snapshot([{"currency": c, "rate": "1.5"} for c in ("EUR", "GBP")])
    _write(tmp_path / "cdc" / "0001.jsonl", [json.dumps(m.value) for m in snap])
    _ok(lakehouse_command("ingest", "-c", cfg))

    # 3. the next run of the join has no new order, and releases both
    _ok(lakehouse_command("join", "-c", cfg))
    assert _released(spark, tmp_path) == [0, 1]

    # 4. the same checkpoint with a processing-time trigger (Spark refused it before: the
    #    tick source made the source lists differ), stopped with Ctrl-C as a person would,
    #    then available-now again
    #    While it runs, a monitoring system scrapes its metrics endpoint.
    _write(tmp_path / "orders" / "0002.jsonl", [json.dumps({"order_id": 2, "currency": "EUR"})])
    port = free_port()
    running = subprocess.Popen(
        [str(Path(sys.executable).parent / "lakehouse"), "join", "-c", cfg],
        env={
            **os.environ,
            "COLUMNS": "4000",
            "LAKEHOUSE_JOIN__TRIGGER": "processing-time",
            "LAKEHOUSE_MONITORING__METRICS_PORT": str(port),
        },
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        scraped = ""
        # released, and two more batches (quiet ticks: nothing new arrives) after it
        while (
            not re.search(
                r'lakehouse_join_rows_total\{outcome="released",pipeline="orders"\} 1', scraped
            )
            or _sample(scraped, "lakehouse_batches_total") < 3
        ):
            assert running.poll() is None, running.communicate()[1][-4000:]
            assert time.monotonic() < deadline, (
                f"the processing-time run released nothing: {scraped}"
            )
            time.sleep(0.5)
            scraped = _scrape(port)
        assert _released(spark, tmp_path) == [0, 1, 2]
        running.send_signal(signal.SIGINT)
        err = running.communicate(timeout=120)[1]
    finally:
        if running.poll() is None:
            running.kill()
    # a processing-time run ends this way: exit 0, saying where it stopped
    assert running.returncode == 0, err[-4000:]
    assert "stopping join (Ctrl-C); it resumes from its checkpoint" in err
    assert "join stopped by SIGINT after batch" in err and "Traceback" not in err
    # what the endpoint served: the join's counts and watermarks, and Spark's own progress
    assert f"metrics at http://127.0.0.1:{port}/metrics" in err
    assert _sample(scraped, "lakehouse_join_pending_rows") == 0
    assert _sample(scraped, "lakehouse_join_processing_time") == 1
    assert _sample(scraped, "lakehouse_join_build_version") >= 1
    assert _sample(scraped, "lakehouse_query_input_rows_total") >= 1
    assert "lakehouse_join_watermark_lag_seconds" in scraped
    # quiet ticks print nothing: fewer batch lines than batches
    assert 1 <= err.count("join batch ") < _sample(scraped, "lakehouse_batches_total"), err

    # 5. a run for a log pipeline: every batch, notice and the start as one JSON object each
    _write(tmp_path / "orders" / "0003.jsonl", [json.dumps({"order_id": 3, "currency": "GBP"})])
    logged = _ok(lakehouse_command("join", "-c", cfg, "--log-format", "json"))
    records = [json.loads(line) for line in logged.splitlines() if line.startswith("{")]
    assert "join batch" not in logged and {"started", "batch"} <= {r["event"] for r in records}
    batch = next(r for r in records if r["event"] == "batch" and r["released"])
    assert batch["pipeline"] == "orders" and batch["released"] == batch["matched"] == 1
    assert batch["processing_time"] is True and batch["pending"] == 0
    assert _released(spark, tmp_path) == [0, 1, 2, 3]


def _scrape(port: int) -> str:
    """The metrics endpoint's text ("" until it answers)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return answer.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return ""


def _sample(text: str, name: str) -> float:
    """The first value of a sample of ``name`` (-1 when there is none yet)."""
    found = re.search(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else -1.0


def _spark_commits(commits: Path) -> int:
    """How many batches a streaming checkpoint's commit log holds."""
    return sum(p.name.isdigit() for p in commits.iterdir()) if commits.is_dir() else 0


def _stopped_mid_run(cfg: str, tmp: Path, sig: signal.Signals) -> str:
    """Start an available-now join that reads one file per batch, send ``sig`` once a
    batch is done (its line printed and Spark's commit of it in the checkpoint: the line
    comes from inside the batch, which a stop in between abandons whole), and return what
    it printed (it must have exited 128 + ``sig``)."""
    log = tmp / f"join-{sig.name}.log"
    commits = tmp / "ck" / "join" / "commits"
    before = _spark_commits(commits)
    with open(log, "w") as out:
        running = subprocess.Popen(
            [str(Path(sys.executable).parent / "lakehouse"), "join", "-c", cfg],
            env={**os.environ, "COLUMNS": "4000", "LAKEHOUSE_JOIN__MAX_RECORDS_PER_TRIGGER": "1"},
            stderr=out,
            text=True,
        )
    try:
        deadline = time.monotonic() + 300
        while "join batch " not in log.read_text() or _spark_commits(commits) == before:
            assert running.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "no batch in 300 s"
            time.sleep(0.2)
        running.send_signal(sig)
        running.wait(timeout=180)
    finally:
        if running.poll() is None:
            running.kill()
    err = log.read_text()
    assert running.returncode == 128 + sig, err[-4000:]
    assert "Traceback" not in err and "EOFError" not in err, err[-4000:]
    return err


def test_a_run_stopped_by_sigint_or_sigterm_exits_non_zero_and_the_next_run_finishes_it(
    spark, tmp_path
):
    # a scheduler (cron, Databricks, Kubernetes, systemd) stops a backfill half-way: the
    # run says where it stopped and exits 130 / 143, never 0; nothing is lost or doubled
    (tmp_path / "cdc").mkdir()
    orders = tmp_path / "orders"
    orders.mkdir()
    cfg = str(_config(tmp_path))
    t = DebeziumTable("public", "rates", key="currency", start_ms=1_700_000_000_000)
    snap = t.snapshot([{"currency": c, "rate": "1.5"} for c in ("EUR", "GBP")])
    _write(tmp_path / "cdc" / "0001.jsonl", [json.dumps(m.value) for m in snap])
    _ok(lakehouse_command("ingest", "-c", cfg))
    for i in range(12):
        _write(orders / f"{i:04d}.jsonl", [json.dumps({"order_id": i, "currency": "EUR"})])

    err = _stopped_mid_run(cfg, tmp_path, signal.SIGINT)
    assert "join stopped by SIGINT after batch" in err and "before its input was read" in err
    assert "Exit code 130" in err
    assert len(_released(spark, tmp_path)) < 12
    err = _stopped_mid_run(cfg, tmp_path, signal.SIGTERM)
    assert "stopping join (SIGTERM)" in err and "join stopped by SIGTERM after batch" in err
    assert len(_released(spark, tmp_path)) < 12
    _ok(lakehouse_command("join", "-c", cfg))
    assert _released(spark, tmp_path) == list(range(12))  # each once


# ------------------------------------------------------------- bounded runs, as a user runs them


def test_a_backfill_runs_to_completion_and_equals_the_reference(spark, tmp_path):
    # "join last month's orders with the rates valid at each order's time", as a scheduler
    # runs it: the installed command, its exit code, its last line
    (tmp_path / "cdc").mkdir()
    (tmp_path / "orders").mkdir()
    cfg = _config(tmp_path, mode="rowtime", relative=True)  # relative locations, run from tmp_path
    t0 = 1_700_000_000_000
    t = DebeziumTable("public", "rates", key="currency", start_ms=t0)
    cdc = t.snapshot([{"currency": c, "rate": "1.5"} for c in ("EUR", "GBP", "CHF")])
    cdc += [
        t.update({"currency": "EUR", "rate": "1.6"}),
        t.update({"currency": "GBP", "rate": "0.8"}),
    ]
    cdc += [*t.delete("CHF"), t.update({"currency": "EUR", "rate": "1.7"})]
    _write(tmp_path / "cdc" / "0001.jsonl", [json.dumps(m.value) for m in cdc if m.value])
    # orders before the first version, between the changes, at a change, after the deleted
    # key, for a key never seen, and after the last change (beyond the build watermark)
    times = [t0 - 500, t0 + 500, t0 + 3_000, t0 + 3_500, t0 + 5_500, t0 + 5_800, t0 + 60_000]
    currencies = ["EUR", "EUR", "EUR", "GBP", "CHF", "XXX", "GBP"]
    orders = [
        {"order_id": i, "currency": c, "order_ts": ts}
        for i, (c, ts) in enumerate(zip(currencies, times, strict=True))
    ]
    # out of order, over two files (two batches at most)
    _write(tmp_path / "orders" / "0001.jsonl", [json.dumps(o) for o in orders[4:]])
    _write(tmp_path / "orders" / "0002.jsonl", [json.dumps(o) for o in orders[:4]])

    ingest = lakehouse_command("ingest", "-c", cfg.name, cwd=tmp_path)
    assert ingest.returncode == 0, ingest.stderr[-4000:]

    # 1. the build table's watermark is at its last change: the order after it stays pending,
    #    and the run says so, with what to do, and exit 3
    first = lakehouse_command("join", "-c", cfg.name, "--until-complete", cwd=tmp_path)
    assert first.returncode == 3, first.stderr[-4000:]
    assert "incomplete: 1 row(s) left pending" in first.stderr
    assert "--build-complete" in first.stderr and "after the build watermark" in first.stderr
    pending = delta.read(spark, f"{tmp_path}/out/pending").collect()
    assert [r.order_id for r in pending] == [6]

    # 2. the dimension is finished (a backfill): the end releases everything, exit 0
    second = lakehouse_command(
        "join", "-c", cfg.name, "--until-complete", "--build-complete", cwd=tmp_path
    )
    assert second.returncode == 0, second.stderr[-4000:]
    assert "complete: the probe input is joined, nothing is pending" in second.stderr
    assert delta.row_count(f"{tmp_path}/out/pending") == 0
    # what a run prints is lakehouse's own lines: not the JVM's warning about the incubator
    # module Spark's launcher adds at every start
    for run in (ingest, first, second):
        assert "incubator" not in run.stderr, run.stderr[:2000]

    build = delta.read(spark, f"{tmp_path}/out/rates").collect()
    versions = [
        Version(r.currency, int(r._event_time.timestamp() * 1000), r._seq, r._op, str(r.rate))
        for r in build
    ]
    probes = [ProbeRow(o["order_id"], o["currency"], o["order_ts"]) for o in orders]
    expected, waiting = rowtime_join(probes, versions, watermark=2**63 - 1, left=True)
    assert waiting == []
    out = delta.read(spark, f"{tmp_path}/out/output").collect()
    assert_rows_equal(
        [(r.order_id, None if r.rate is None else str(r.rate)) for r in out], expected
    )
    assert {r.order_id: r._released_by for r in out}[6] == "end_of_input"
    status = lakehouse_command("status", "out/pending", cwd=tmp_path)
    assert status.returncode == 0 and "pending backlog" in status.stdout, status.stderr


def test_a_bounded_run_refuses_a_trigger_that_never_ends_before_spark_starts(tmp_path):
    (tmp_path / "cdc").mkdir()
    (tmp_path / "orders").mkdir()
    cfg = _config(tmp_path, mode="rowtime")
    proc = lakehouse_command(
        "join", "-c", str(cfg), "--until-complete", "--trigger", "processing-time"
    )
    assert proc.returncode == 2, proc.stderr
    assert "until_complete" in proc.stderr and "available-now" in proc.stderr
    alone = lakehouse_command("join", "-c", str(cfg), "--build-complete")
    assert alone.returncode == 2 and "needs until_complete" in alone.stderr, alone.stderr


def test_records_that_contradict_the_probe_schema_are_refused_then_dead_lettered_on_request(
    spark, tmp_path
):
    (tmp_path / "orders").mkdir()
    cfg = _config(tmp_path, mode="rowtime")
    t0 = 1_700_000_000_000
    write_build_table(
        spark, f"{tmp_path}/out/rates", [Version("EUR", t0, "1", "r", 10)], key="currency"
    )
    # order ids are text in the source, bigint in probe_schema
    bad = [{"order_id": f"A-{i}", "currency": "EUR", "order_ts": t0 + i} for i in range(3)]
    _write(tmp_path / "orders" / "0001.jsonl", [json.dumps(o) for o in bad])

    # 1. the join's first records: refused before anything is written, naming the column
    refused = lakehouse_command("join", "-c", str(cfg))
    assert refused.returncode == 1, refused.stderr[-4000:]
    assert "probe_schema contradicts the join's first probe records (3 of them)" in refused.stderr
    assert "column 'order_id' holds 'A-0', which probe_schema reads as bigint" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not delta.table_exists(f"{tmp_path}/out/join_dead_letter")

    # 2. told that such records are expected: dead-lettered with the reason, exit 0
    allowed = lakehouse_command("join", "-c", str(cfg), "--allow-dead-letters")
    assert allowed.returncode == 0, allowed.stderr[-4000:]
    assert "warning: every probe record of batch 0 (3) was dead-lettered" in allowed.stderr
    dead = delta.read(spark, f"{tmp_path}/out/join_dead_letter").collect()
    assert {(d._error_kind, d._error.split(",")[0]) for d in dead} == {
        ("schema_mismatch", f"column 'order_id' holds 'A-{i}'") for i in range(3)
    }

    # 3. a later scheduled run whose records all fail: the warning, and exit 1
    _write(tmp_path / "orders" / "0002.jsonl", ["{not json", "[1, 2]"])
    failed = lakehouse_command("join", "-c", str(cfg))
    assert failed.returncode == 1, failed.stderr[-4000:]
    assert re.search(r"every probe record of batch\(es\) \d+ was dead-lettered", failed.stderr)
    assert "--allow-dead-letters" in failed.stderr
    assert delta.row_count(f"{tmp_path}/out/join_dead_letter") == 5
