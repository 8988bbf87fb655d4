"""Damaged files, as docs/operations/recovery.md describes them: each case is damaged for real on
storage, the installed command refuses to start with one line naming the file, ``lakehouse repair``
shows then applies the repair, and the job ends with the tables a run without the damage has.

The refusals and the repairs need no Spark (a second each); the runs after a repair are the
installed command (the join) or this session's Spark (the ingest).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import scenario
from helpers import assert_rows_equal, lakehouse_command, write_build_table
from reference import Version

from lakehouse import delta
from lakehouse.dimension.layout import PROP_SNAPSHOT_COMPLETE
from lakehouse.runner import start_ingest, start_join

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _tear(path: Path) -> None:
    """Cut a file in the middle, as a write the disk filled under leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _newest_commit(table: str) -> Path:
    return max(Path(table, "_delta_log").glob("*.json"))


def _refused(proc: subprocess.CompletedProcess[str], damaged: Path) -> str:
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert str(damaged) in lines[0] and "lakehouse repair" in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_a_torn_checkpoint_commit_table_commit_and_metadata_of_a_join_are_repaired(spark, tmp_path):
    build = str(tmp_path / "rates")
    write_build_table(
        spark,
        build,
        [Version("EUR", 0, "1", "r", 10), Version("GBP", 0, "2", "r", 20)],
        watermark_ms=10**13,
        key="currency",
    )
    orders = tmp_path / "orders"
    orders.mkdir()
    for i, lines in enumerate(scenario.probe_batches()):
        scenario.write_lines(orders / f"{i:04d}.jsonl", lines)
    run = scenario.join(tmp_path, "join", orders, build, mode="rowtime")
    scenario.stream(start_join)(spark, run)
    before = tmp_path / "before"
    for name in ("output", "pending", "dead"):
        shutil.copytree(run.tables[name], before / name)

    # the newest batch's checkpoint commit, the output's newest commit (written by that
    # batch) and the checkpoint's metadata, all torn
    checkpoint = run.root / "checkpoint"
    newest = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    output_commit = _newest_commit(run.tables["output"])
    for damaged in (checkpoint / "commits" / str(newest), output_commit, checkpoint / "metadata"):
        _tear(damaged)

    # the job refuses to start, naming the first damaged file; nothing is written
    line = _refused(lakehouse_command("join", "-c", str(run.config), cwd=tmp_path), checkpoint)
    assert "is damaged" in line and "(and 2 more)" in line

    # the dry run lists every damaged file and every step, and changes nothing
    shown = lakehouse_command("repair", "join", "-c", str(run.config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    for damaged in (checkpoint / "commits" / str(newest), output_commit, checkpoint / "metadata"):
        assert f"damaged: {damaged}:" in shown.stdout
        assert damaged.exists()
    assert "would set aside" in shown.stdout and "dry run: nothing changed" in shown.stdout

    # the repair sets the files aside and writes the metadata again
    done = lakehouse_command("repair", "join", "-c", str(run.config), "--apply", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "repaired:" in done.stdout
    assert any((checkpoint / "damaged").iterdir())
    assert any(Path(run.tables["output"], "_lakehouse", "damaged").iterdir())
    again = lakehouse_command("repair", "join", "-c", str(run.config), cwd=tmp_path)
    assert "nothing damaged" in again.stdout

    # the job runs the rolled-back batch again and ends where it was
    rerun = lakehouse_command("join", "-c", str(run.config), cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    tables = {name: str(before / name) for name in ("output", "pending", "dead")}
    scenario.assert_same_join(spark, run, scenario.Run(before, run.config, tables))
    # the late order says so in the output, and the quality report counts it
    late = delta.read(spark, run.tables["output"]).filter("_released_by = 'late'").collect()
    assert [r.order_id for r in late] == [scenario.LATE_ORDER]
    report = tmp_path / "quality"
    checked = lakehouse_command(
        "quality", "-c", str(run.config), "--report-dir", str(report), cwd=tmp_path
    )
    assert checked.returncode == 1, checked.stderr[-3000:]  # the ZZZ orders match nothing
    summary = json.loads((report / "summary.json").read_text())
    matched = next(c for c in summary["checks"] if c["name"] == "output_matched")
    assert matched["observed"]["late"] == 1 and "1 released late" in matched["message"]

    # a damaged build table is the ingest's: the join's repair names it and changes nothing
    build_commit = _newest_commit(build)
    _tear(build_commit)
    refused = lakehouse_command("repair", "join", "-c", str(run.config), "--apply", cwd=tmp_path)
    assert refused.returncode == 1
    assert "which this job only reads" in refused.stderr and "repair ingest" in refused.stderr
    assert build_commit.exists()


def test_torn_offsets_a_torn_marker_commit_and_last_checkpoint_of_an_ingest_are_repaired(
    spark, tmp_path
):
    batches = scenario.cdc_batches()
    cdc = tmp_path / "cdc"
    cdc.mkdir()
    for i in range(2):  # the snapshot: the marker is the table's newest commit
        scenario.write_lines(cdc / f"{i:04d}.jsonl", batches[i])
    run = scenario.ingest(tmp_path, "ingest", cdc)
    scenario.stream(start_ingest)(spark, run)
    table = Path(run.tables["build"])
    assert delta.get_properties(str(table))[PROP_SNAPSHOT_COMPLETE] == "true"

    # the next batch's offsets torn as a full disk leaves them (no table holds batch 2), the
    # marker commit torn, and a torn _last_checkpoint
    checkpoint = run.root / "checkpoint"
    (checkpoint / "offsets" / "2").write_text('v1\n{"batchWatermarkMs":0,"batchTimes')
    marker_commit = _newest_commit(str(table))
    _tear(marker_commit)
    (table / "_delta_log" / "_last_checkpoint").write_text('{"version":1,"si')

    _refused(lakehouse_command("ingest", "-c", str(run.config), cwd=tmp_path), checkpoint)
    done = lakehouse_command("repair", "ingest", "-c", str(run.config), "--apply", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for why in ("no table holds batch 2", "it changed no rows", "by listing the log"):
        assert why in done.stdout, done.stdout

    # the ingest goes on: the marker is derived again, batch 2 is planned from the new file
    scenario.write_lines(cdc / "0002.jsonl", batches[2])
    scenario.stream(start_ingest)(spark, run)
    reference = scenario.ingest(tmp_path, "reference", cdc)
    scenario.stream(start_ingest)(spark, reference)
    assert_rows_equal(
        scenario.build_rows(spark, str(table)),
        scenario.build_rows(spark, reference.tables["build"]),
    )
    props = delta.get_properties(str(table))
    assert props[PROP_SNAPSHOT_COMPLETE] == "true"

    # the newest offsets of a batch the table holds: not repaired, nothing changed
    newest = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    _tear(checkpoint / "offsets" / str(newest))
    refused = lakehouse_command("repair", "ingest", "-c", str(run.config), "--apply", cwd=tmp_path)
    assert refused.returncode == 1
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("error: not repaired:") and f"batch {newest} is committed" in line
    assert "restore the file from a backup" in line
    assert (checkpoint / "offsets" / str(newest)).exists()
    _refused(lakehouse_command("ingest", "-c", str(run.config), cwd=tmp_path), checkpoint)
