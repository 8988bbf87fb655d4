"""The pending bound on real Spark and real Delta: a row-time join whose build watermark is held
back, so the backlog grows past ``pending_max_rows``/``pending_max_age_ms``.

The rows over the bound must reach the dead-letter table with the reason (never vanish), the
pending table must stay within the bound, the alert must be visible (batch report, progress
line, commit metadata, ``lakehouse status``), the ``fail`` policy must stop the join before it
writes anything, and a SIGKILLed batch must evict the same rows once after the restart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_rows_equal, raw_records, write_build_table
from reference import Version

from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.errors import PendingBoundError
from lakehouse.join import JoinOptions, TemporalJoin
from lakehouse.progress import join_line
from lakehouse.runner import start_join

pytestmark = pytest.mark.spark

PROBE_SCHEMA = "id bigint, k string, ts bigint"


def _options(tmp: Path, **kw) -> JoinOptions:
    base = dict(
        build_table=str(tmp / "build"),
        output_table=str(tmp / "out"),
        pending_table=str(tmp / "pending"),
        dead_letter_table=str(tmp / "dlq"),
        pipeline_id="bound-test",
        probe_schema=PROBE_SCHEMA,
        probe_key=("k",),
        probe_time="ts",
        probe_id="id",
        join_type="left",
    )
    base.update(kw)
    return JoinOptions(**base)


def _probe(spark, rows: list[tuple[int, int]]):
    return raw_records(spark, [{"id": i, "k": "a", "ts": ts} for i, ts in rows])


def _pending_ids(spark, opts) -> list[int]:
    return sorted(r.id for r in delta.read(spark, opts.pending_table).select("id").collect())


def _dead(spark, opts) -> list[tuple[int, str, int]]:
    rows = delta.read(spark, opts.dead_letter_table).collect()
    return sorted((json.loads(r._raw_value)["id"], r._error_kind, r._batch_id) for r in rows)


def _held_back_build(spark, opts) -> None:
    # the snapshot is complete but the build watermark stays at 9: nothing after 9 releases
    write_build_table(spark, opts.build_table, [Version("a", 1, "1", "r", 10)], watermark_ms=9)


def test_rows_over_the_bound_go_to_the_dead_letter_table_oldest_first(spark, tmp_path, capsys):
    opts = _options(tmp_path, pending_max_rows=3)
    _held_back_build(spark, opts)
    op = TemporalJoin(opts, num_buckets=2)

    # batch 0: four rows wait (build watermark 9); one over the bound: the oldest (ts 20)
    report = op.process(_probe(spark, [(2, 30), (1, 20), (3, 40), (4, 50)]), 0)
    assert (report.released, report.pending, report.evicted) == (0, 3, 1)
    assert report.bound_alert is not None and "pending_max_rows = 3" in report.bound_alert
    assert "ALERT" in join_line(report) and "evicted 1" in join_line(report)
    assert _pending_ids(spark, opts) == [2, 3, 4]

    # batch 1: two more arrive, one of them older than everything pending (ts 25): the two
    # oldest of the five go
    report = op.process(_probe(spark, [(5, 25), (6, 60)]), 1)
    assert (report.pending, report.evicted, report.dead_lettered) == (3, 2, 2)
    assert _pending_ids(spark, opts) == [3, 4, 6]
    assert _dead(spark, opts) == [
        (1, "pending_bound_rows", 0),
        (2, "pending_bound_rows", 1),
        (5, "pending_bound_rows", 1),
    ]
    reason = delta.read(spark, opts.dead_letter_table).first()._error
    assert "pending_max_rows = 3" in reason and "replay" in reason

    # the alert is in the metadata of both commits the batch made (it released nothing, so
    # it did not write the output table) and in `lakehouse status` on the pending table
    pending_meta = delta.history(opts.pending_table, limit=1)[0].metadata
    assert pending_meta["lakehouse.evicted"] == "2"
    assert "pending_max_rows = 3" in pending_meta["lakehouse.pendingBoundAlert"]
    assert json.loads(pending_meta["lakehouse.state"])["evictedTotal"] == 3
    assert not delta.table_exists(opts.output_table)
    dead_meta = delta.history(opts.dead_letter_table, limit=1)[0].metadata
    assert "pending_max_rows = 3" in dead_meta["lakehouse.pendingBoundAlert"]
    from lakehouse.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["status", opts.pending_table])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "ALERT" in shown and "pending bound hit" in shown
    assert "evicted by the pending bound" in shown

    # a replayed batch evicts nothing twice
    assert op.process(_probe(spark, [(5, 25), (6, 60)]), 1).skipped
    assert len(_dead(spark, opts)) == 3

    # the build side moves on: what stayed within the bound joins; nothing was lost
    write_build_table(
        spark, opts.build_table, [Version("a", 2, "2", "u", 11)], batch_id=1, watermark_ms=10**12
    )
    report = op.process(_probe(spark, [(7, 70)]), 2)
    assert (report.evicted, report.bound_alert) == (0, None)
    out = sorted(r.id for r in delta.read(spark, opts.output_table).collect())
    assert out == [3, 4, 6]
    assert _pending_ids(spark, opts) == [7]  # ts 70 waits for the probe watermark (69)


def test_age_bound_in_event_time_then_rows_bound(spark, tmp_path):
    # age: how far a row's time is behind the probe watermark (here 49 after batch 0)
    opts = _options(tmp_path, pending_max_age_ms=15, pending_max_rows=1)
    _held_back_build(spark, opts)
    report = TemporalJoin(opts, num_buckets=2).process(
        _probe(spark, [(1, 20), (2, 30), (3, 40), (4, 50)]), 0
    )
    # 49 - 20 = 29 and 49 - 30 = 19 are over 15; of 40 and 50, the older goes by the row bound
    assert (report.evicted, report.pending) == (3, 1)
    assert _dead(spark, opts) == [
        (1, "pending_bound_age", 0),
        (2, "pending_bound_age", 0),
        (3, "pending_bound_rows", 0),
    ]
    assert _pending_ids(spark, opts) == [4]
    assert "pending_max_age_ms = 15" in report.bound_alert


def test_fail_policy_stops_the_join_before_it_writes_anything(spark, tmp_path):
    opts = _options(tmp_path, pending_max_rows=3, on_pending_bound="fail")
    _held_back_build(spark, opts)
    op = TemporalJoin(opts, num_buckets=2)
    op.process(_probe(spark, [(1, 20), (2, 30)]), 0)  # within the bound
    pending_version = delta.latest_version(opts.pending_table)
    with pytest.raises(PendingBoundError, match="pending_max_rows = 3") as failed:
        op.process(_probe(spark, [(3, 40), (4, 50)]), 1)
    assert failed.value.setting == "join.pending_max_rows"
    assert "on_pending_bound = 'fail'" in str(failed.value)
    assert delta.latest_version(opts.pending_table) == pending_version
    assert not delta.table_exists(opts.dead_letter_table)
    assert _pending_ids(spark, opts) == [1, 2]


# ------------------------------------------------------------------- crash and restart


def _write_lines(path: Path, lines: list[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(path)


def _probe_files(directory: Path) -> None:
    directory.mkdir(parents=True)
    for batch in range(3):
        rows = [
            {"id": batch * 4 + i, "k": "a", "ts": 100 + 1_000 * (batch * 4 + i)}
            for i in (3, 1, 0, 2)
        ]
        _write_lines(directory / f"{batch:04d}.jsonl", [json.dumps(r) for r in rows])


def _probe_table(spark, table: Path) -> None:
    """The rows of :func:`_probe_files` as a Delta table, one commit of one file per batch,
    with their times in pairs: which of two rows of one time is evicted is decided by their
    positions, so a replay that saw other positions would evict other rows."""
    for batch in range(3):
        rows = [(batch * 4 + i, "a", 100 + 1_000 * (batch * 4 + i // 2 * 2)) for i in (3, 1, 0, 2)]
        frame = spark.createDataFrame(rows, PROBE_SCHEMA).coalesce(1)
        frame.write.format("delta").mode("append").save(str(table))


def _join_config(tmp: Path, name: str, probe: Path, source: str = "files") -> Path:
    out = tmp / name
    cfg = tmp / f"{name}.toml"
    where = f'path = "{probe}"' if source == "files" else f'delta_table = "{probe}"'
    cfg.write_text(
        '[spark]\nmaster = "local[2]"\n'
        'conf = { "spark.sql.shuffle.partitions" = "2", "spark.ui.enabled" = "false" }\n'
        "[join]\n"
        f'pipeline_id = "join"\nsource = "{source}"\n{where}\n'
        f'checkpoint = "{out}/checkpoint"\ntrigger = "available-now"\n'
        "max_records_per_trigger = 1\n"
        f'probe_schema = "{PROBE_SCHEMA}"\n'
        'probe_key = ["k"]\nprobe_time = "ts"\nprobe_id = "id"\njoin_type = "left"\n'
        "pending_max_rows = 3\n"
        f'build_table = "{out}/build"\noutput_table = "{out}/output"\n'
        f'pending_table = "{out}/pending"\ndead_letter_table = "{out}/dead_letter"\n'
    )
    return cfg


def _run_in_process(spark, cfg: Path) -> None:
    query = start_join(spark, load_settings(cfg))
    query.awaitTermination()
    assert query.exception() is None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("failpoint", "source"),
    [
        # batch 1's evictions are dead-lettered, its output is not
        ("join.after_dead_letters@1", "files"),
        # output committed (with the plan), pending not
        ("join.after_output@1", "files"),
        # the same from a Delta table, whose rows' positions are hashes of their content
        ("join.after_output@1", "delta"),
    ],
)
def test_killed_batch_evicts_the_same_rows_once(spark, tmp_path, failpoint, source):
    probe = tmp_path / "probe"
    if source == "files":
        _probe_files(probe)
    else:
        _probe_table(spark, probe)
    reference = _join_config(tmp_path, "reference", probe, source)
    crashed = _join_config(tmp_path, "crashed", probe, source)
    for name in ("reference", "crashed"):
        write_build_table(
            spark, str(tmp_path / name / "build"), [Version("a", 0, "1", "r", 10)], watermark_ms=9
        )
    _run_in_process(spark, reference)

    env = {**os.environ, "LAKEHOUSE_FAILPOINTS": failpoint}
    proc = subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", "join", "-c", str(crashed)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-12000:])
    # Before the restart the build side moves on. A replay of batch 1 that decided afresh
    # would now release rows its first attempt had already evicted (duplicates); it must
    # reuse the recorded plan and evict exactly what the first attempt did.
    write_build_table(
        spark,
        str(tmp_path / "crashed" / "build"),
        [Version("a", 1, "2", "u", 11)],
        batch_id=1,
        watermark_ms=10**13,
    )
    _run_in_process(spark, crashed)

    def dead(name: str) -> list[tuple[int, str, int]]:
        rows = delta.read(spark, str(tmp_path / name / "dead_letter")).collect()
        return [(json.loads(r._raw_value)["id"], r._error_kind, r._batch_id) for r in rows]

    ref_dead, got_dead = dead("reference"), dead("crashed")
    # batches 0 and 1 were decided under the held-back build in both runs: same evictions
    assert_rows_equal([d for d in got_dead if d[2] <= 1], [d for d in ref_dead if d[2] <= 1])
    assert len(got_dead) == 5  # 1 in batch 0, 4 in batch 1, none in batch 2 (build moved on)
    out = [r.id for r in delta.read(spark, str(tmp_path / "crashed" / "output")).collect()]
    pending = [r.id for r in delta.read(spark, str(tmp_path / "crashed" / "pending")).collect()]
    # every probe row exactly once: output, dead letters or pending
    assert sorted(out + pending + [d[0] for d in got_dead]) == list(range(12))
    # the reference never released anything and kept the bound
    assert delta.read(spark, str(tmp_path / "reference" / "pending")).count() == 3
