"""Damaged state without Spark (lakehouse.recovery): what counts as damage, and each rule of
the repair (docs/operations/recovery.md), on checkpoints and Delta logs laid out on disk.

Delta tables whose app transactions matter are written by delta-rs (a test's own writer);
the commits a rule only reads are written as the JSON lines Delta's log holds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lakehouse.errors import DamagedStateError
from lakehouse.recovery import apply, check, inspect, plan_repair

PIPELINE = "orders"
QUERY_ID = "5f1d2c3b-0000-4000-8000-000000000001"


def _checkpoint(root: Path, batches: int, *, committed: int | None = None) -> Path:
    """A query checkpoint with offsets 0..batches-1 and commits 0..committed."""
    ck = root / "checkpoint"
    (ck / "offsets").mkdir(parents=True)
    (ck / "commits").mkdir()
    (ck / "metadata").write_text(json.dumps({"id": QUERY_ID}))
    for n in range(batches):
        (ck / "offsets" / str(n)).write_text(
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"t":{"0":' + f"{n}}}}}"
        )
    last = batches - 1 if committed is None else committed
    for n in range(last + 1):
        (ck / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return ck


def _commit(table: Path, version: int, *, batch: int | None, operation: str = "WRITE") -> Path:
    """A commit of ``table`` as delta-spark writes it: commitInfo, then the txn of the batch."""
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    meta = {"lakehouse.pipeline": PIPELINE, "lakehouse.checkpointId": QUERY_ID}
    if batch is not None:
        meta["lakehouse.batchId"] = str(batch)
    actions: list[dict[str, object]] = [
        {"commitInfo": {"timestamp": 1, "operation": operation, "userMetadata": json.dumps(meta)}}
    ]
    if batch is not None:
        actions.append({"txn": {"appId": PIPELINE, "version": batch}})
    actions.append({"add": {"path": f"part-{version}.parquet", "size": 1}})
    path = log / f"{version:020d}.json"
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return path


def _tear(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _aside_names(steps) -> list[str]:
    return [s.path.rsplit("/", 1)[-1] for s in steps if s.action == "set_aside"]


def test_intact_state_is_no_damage_and_missing_state_is_none_either(tmp_path):
    ck = _checkpoint(tmp_path, 3)
    table = tmp_path / "out"
    for v in range(3):
        _commit(table, v, batch=v)
    assert inspect(str(ck), [str(table), str(tmp_path / "no-such-table")]) == []
    assert inspect(str(tmp_path / "new-checkpoint"), []) == []
    check(str(ck), [str(table)], [], repair="lakehouse repair join")  # does not raise


@pytest.mark.parametrize(
    ("damage", "kind", "problem"),
    [
        (lambda ck: _tear(ck / "offsets" / "2"), "offsets", "line 2 is not JSON"),
        (lambda ck: (ck / "offsets" / "2").write_text("v1\n"), "offsets", "cut short"),
        (lambda ck: (ck / "commits" / "2").write_text(""), "commits", "empty"),
        (lambda ck: (ck / "commits" / "2").write_bytes(b"v1\n\xff\xfe"), "commits", "UTF-8"),
        (lambda ck: (ck / "metadata").write_text('{"id":'), "metadata", "not JSON"),
        (lambda ck: (ck / "metadata").write_text("{}"), "metadata", "no query id"),
    ],
)
def test_a_damaged_checkpoint_file_is_named_with_what_is_wrong(tmp_path, damage, kind, problem):
    ck = _checkpoint(tmp_path, 3)
    damage(ck)
    (found,) = inspect(str(ck), [])
    assert (found.kind, found.owner) == (kind, str(ck)) and problem in found.problem
    with pytest.raises(DamagedStateError) as e:
        check(str(ck), [], [], repair="lakehouse repair join -c job.toml")
    assert str(e.value).startswith(f"{kind} file {found.path} of {ck} is damaged: ")
    assert "lakehouse repair join -c job.toml" in str(e.value)


def test_only_the_entries_a_restart_reads_are_checked(tmp_path):
    # Spark reads the newest two offsets and the newest commit; older ones are history
    ck = _checkpoint(tmp_path, 4)
    _tear(ck / "offsets" / "1")
    _tear(ck / "commits" / "2")
    assert inspect(str(ck), []) == []


def test_every_commit_delta_reads_is_checked_and_none_before_its_checkpoint(tmp_path):
    table = tmp_path / "t"
    for v in range(5):
        _commit(table, v, batch=v)
    _tear(table / "_delta_log" / f"{1:020d}.json")
    assert [d.number for d in inspect(None, [str(table)])] == [1]
    # a Delta checkpoint at version 2 holds the state up to it: version 1 is not read
    (table / "_delta_log" / f"{2:020d}.checkpoint.parquet").write_bytes(b"PAR1")
    assert inspect(None, [str(table)]) == []
    (table / "_delta_log" / "_last_checkpoint").write_text('{"version": 2, "si')
    assert [d.kind for d in inspect(None, [str(table)])] == ["last checkpoint"]
    # with its pointer whole, the log is not listed: commits are looked up from the
    # checkpoint on, one after the other, as Delta does
    (table / "_delta_log" / "_last_checkpoint").write_text('{"version": 2, "size": 3}')
    _tear(table / "_delta_log" / f"{4:020d}.json")
    assert [d.number for d in inspect(None, [str(table)])] == [4]


def test_a_torn_checkpoint_commit_is_set_aside_so_the_batch_runs_again(tmp_path):
    ck = _checkpoint(tmp_path, 3)
    _tear(ck / "commits" / "2")
    (ck / "commits" / ".2.crc").write_bytes(b"crc")
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[])
    assert plan.unrepairable == () and _aside_names(plan.steps) == ["2", ".2.crc"]
    apply(plan)
    assert not (ck / "commits" / "2").exists() and inspect(str(ck), []) == []
    assert sorted(p.name.split(".")[0] for p in (ck / "damaged").iterdir()) == ["", "2"]


def test_torn_offsets_are_planned_again_only_when_no_table_holds_their_batch(tmp_path):
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    ck = _checkpoint(tmp_path, 3, committed=1)
    _tear(ck / "offsets" / "2")
    table = tmp_path / "out"
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[str(table)])
    assert plan.unrepairable == () and _aside_names(plan.steps) == ["2"]
    # the table holds batch 2: its offsets cannot be planned again
    write_deltalake(
        str(table),
        pa.table({"x": [1]}),
        commit_properties=CommitProperties(app_transactions=[Transaction(PIPELINE, 2)]),
    )
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[str(table)])
    (why,) = plan.unrepairable
    assert f"batch 2 is committed to {table}" in why and "restore the file from a backup" in why
    with pytest.raises(DamagedStateError, match="not repaired: "):
        apply(plan)
    assert (ck / "offsets" / "2").exists()  # nothing was done


def test_metadata_is_written_again_with_the_query_id_the_tables_record(tmp_path):
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    ck = _checkpoint(tmp_path, 1)
    (ck / "metadata").write_text('{"id": "5f1d')
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[])
    assert "no table records the query id" in plan.unrepairable[0]
    table = tmp_path / "out"
    meta = {"lakehouse.pipeline": PIPELINE, "lakehouse.checkpointId": QUERY_ID}
    write_deltalake(
        str(table),
        pa.table({"x": [1]}),
        commit_properties=CommitProperties(custom_metadata={"userMetadata": json.dumps(meta)}),
    )
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[str(table)])
    assert plan.unrepairable == ()
    apply(plan)
    assert json.loads((ck / "metadata").read_text()) == {"id": QUERY_ID}


def test_a_torn_output_commit_rolls_back_the_later_tables_and_the_batch(tmp_path):
    # the join writes its dead letters, its output, then its pending table; the output's
    # commit of the newest batch is torn: the pending table's commit of it must go too (a
    # replay skips a batch the pending table holds), the dead letters' stays (skipped)
    ck = _checkpoint(tmp_path, 3)
    dead, out, pending = (tmp_path / n for n in ("dead", "out", "pending"))
    _commit(dead, 0, batch=2)
    _commit(out, 0, batch=1)
    torn = _commit(out, 1, batch=2)
    _commit(pending, 0, batch=1)
    _commit(pending, 1, batch=2)
    _tear(torn)
    tables = [str(dead), str(out), str(pending)]
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=tables)
    assert plan.unrepairable == ()
    assert [s.path for s in plan.steps] == [
        str(torn),
        str(pending / "_delta_log" / f"{1:020d}.json"),
        str(ck / "commits" / "2"),
    ]
    assert "written after the damaged commit" in plan.steps[1].why


def test_a_torn_commit_of_an_older_batch_or_of_another_writer_is_not_repaired(tmp_path):
    ck = _checkpoint(tmp_path, 4)
    out = tmp_path / "out"
    _commit(out, 0, batch=1)
    torn = _commit(out, 1, batch=2)
    torn.write_bytes(torn.read_bytes()[:-12])  # its last action cut: it still says its batch
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[str(out)])
    (why,) = plan.unrepairable
    assert "holds batch 2, and the checkpoint has moved on to batch 3" in why
    assert plan.steps == ()
    # a healthy commit after the torn one that a replay would not write again
    other = tmp_path / "other"
    first = _commit(other, 0, batch=3)
    _commit(other, 1, batch=None, operation="MERGE")
    first.write_bytes(first.read_bytes()[:-12])
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[str(other)])
    assert "MERGE of another writer" in plan.unrepairable[0]


def test_a_torn_commit_that_changed_no_rows_is_set_aside_without_a_replay(tmp_path):
    ck = _checkpoint(tmp_path, 2)
    build = tmp_path / "build"
    _commit(build, 0, batch=1)
    marker = _commit(build, 1, batch=None, operation="SET TBLPROPERTIES")
    marker.write_bytes(marker.read_bytes()[:-12])  # its last action cut; commitInfo is whole
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[str(build)])
    assert [s.path for s in plan.steps] == [str(marker)]  # commits/1 stays: no replay
    assert "changed no rows" in plan.steps[0].why


def test_an_unreadable_commit_is_told_by_its_time(tmp_path):
    # nothing of it parses: written after the newest batch was planned, it is that batch's
    ck = _checkpoint(tmp_path, 2)
    out = tmp_path / "out"
    _commit(out, 0, batch=0)
    torn = out / "_delta_log" / f"{1:020d}.json"
    torn.write_text('{"commitIn')
    planned = (ck / "offsets" / "1").stat().st_mtime
    os.utime(torn, (planned + 5, planned + 5))
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[str(out)])
    assert plan.unrepairable == () and str(ck / "commits" / "1") in [s.path for s in plan.steps]
    os.utime(torn, (planned - 60, planned - 60))
    plan = plan_repair(checkpoint=str(ck), pipeline_id=PIPELINE, tables=[str(out)])
    assert "written before batch 1 started" in plan.unrepairable[0]


def test_a_damaged_table_the_job_only_reads_is_left_to_its_writer(tmp_path):
    ck = _checkpoint(tmp_path, 1)
    build = tmp_path / "build"
    _tear(_commit(build, 0, batch=0))
    plan = plan_repair(
        checkpoint=str(ck), pipeline_id=PIPELINE, tables=[], read_tables=[str(build)]
    )
    assert "which this job only reads" in plan.unrepairable[0] and plan.steps == ()
