"""The crash matrix: the installed ``lakehouse`` command is SIGKILLed at every failpoint
(:data:`lakehouse.failpoints.POINTS`), restarted, and the tables it ends with are compared with
those of a run that was never interrupted. Nothing may be lost, duplicated or blocked, and no
manual step may be needed.

The kills are real: each runs the command in a new process with ``LAKEHOUSE_FAILPOINTS`` set to
one point, and the process SIGKILLs itself there (no ``finally``, no flush). Each point is one
restart: a *chain* kills the same pipeline at its points one after the other, each run
resuming what the previous kill left behind (a kill during the replay of a killed batch
included), and only then lets the step run to its end in this test session's Spark. So a
chain costs one command start per point, and the reference run (in this session) is shared
by every chain over the same input.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import scenario
from helpers import assert_rows_equal, lakehouse_command, write_build_table
from reference import Version
from scenario import START_MS, Run, Step

from lakehouse import delta
from lakehouse.dimension.layout import (
    META_SNAPSHOT_ENDED,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_VERSION,
)
from lakehouse.failpoints import POINTS
from lakehouse.runner import start_ingest, start_join

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# ------------------------------------------------------------------------------ the steps


def _resolve(spark: Any, run: Run) -> None:
    from lakehouse.dimension.schema_block import resolve

    resolve(
        spark,
        run.tables["build"],
        reason="crash matrix",
        dead_letter_table=run.tables["dead"],
        accept_loss=True,
    )


HORIZON_MS = START_MS + 150_000


def _compact(spark: Any, run: Run) -> None:
    from lakehouse.maintenance.compact import compact

    compact(spark, run.tables["build"], horizon_ms=HORIZON_MS)


def _vacuum(spark: Any, run: Run) -> None:
    from lakehouse.maintenance.vacuum import vacuum_table

    vacuum_table(None, run.tables["build"], retention_hours=0, dry_run=False)


def _ingest_steps(
    inputs: Path, *, batches_only: int | None = None, steady: bool = False
) -> list[Step]:
    """The ingest scenario's steps; ``batches_only``: just the ingest of that many batches;
    ``steady``: of the steady change log (:func:`scenario.steady_batches`) instead."""
    batches = scenario.steady_batches() if steady else scenario.cdc_batches()

    def write(first: int, last: int) -> Callable[[], None]:
        def go() -> None:
            inputs.mkdir(parents=True, exist_ok=True)
            for i in range(first, min(last, len(batches))):
                if not (inputs / f"{i:04d}.jsonl").exists():
                    scenario.write_lines(inputs / f"{i:04d}.jsonl", batches[i])

        return go

    build = ["ingest", "-c"]
    if batches_only is not None:
        write_some = write(0, batches_only)
        return [
            Step(
                "ingest",
                lambda r: [*build, str(r.config)],
                scenario.stream(start_ingest),
                write_some,
            )
        ]
    return [
        Step(
            "ingest",
            lambda r: [*build, str(r.config)],
            scenario.stream(start_ingest),
            write(0, 6),
            # a log checkpoint every 8 versions of the tables the killed runs create, so that
            # one falls on a data commit (delta.checkpoint): the build table's version 8 is
            # batch 3's
            env={
                "LAKEHOUSE_SPARK_CONF": _with_conf(
                    "spark.databricks.delta.properties.defaults.checkpointInterval=8"
                )
            },
        ),
        Step(
            "schema-resolve",
            lambda r: [
                "schema-resolve",
                r.tables["build"],
                "--reason",
                "crash matrix",
                "--dead-letter-table",
                r.tables["dead"],
                "--accept-loss",
            ],
            _resolve,
        ),
        Step(
            "ingest",
            lambda r: [*build, str(r.config)],
            scenario.stream(start_ingest),
            write(6, 7),
            # a compaction (OPTIMIZE) after every append, in the killed runs of this step only,
            # so that one falls in the batch optimize.after_commit names
            env={"LAKEHOUSE_SPARK_CONF": _with_conf("spark.lakehouse.compactEveryVersions=1")},
        ),
        Step(
            "compact",
            lambda r: ["compact", r.tables["build"], "--horizon", str(HORIZON_MS)],
            _compact,
        ),
        Step(
            "vacuum",
            lambda r: [
                *("vacuum", r.tables["build"], "--apply", "--retention-hours", "0"),
                "--ignore-lineage",
            ],
            _vacuum,
        ),
    ]


def _join_steps(inputs: Path) -> list[Step]:
    def write() -> None:
        inputs.mkdir(parents=True, exist_ok=True)
        for i, lines in enumerate(scenario.probe_batches()):
            if not (inputs / f"{i:04d}.jsonl").exists():
                scenario.write_lines(inputs / f"{i:04d}.jsonl", lines)

    return [
        Step("join", lambda r: ["join", "-c", str(r.config)], scenario.stream(start_join), write)
    ]


def _with_conf(entry: str) -> str:
    """The suite's ``LAKEHOUSE_SPARK_CONF`` with one more ``key=value``."""
    suite = os.environ.get("LAKEHOUSE_SPARK_CONF", "")
    return f"{suite};{entry}" if suite else entry


def _killed(argv: list[str], point: str, cwd: Path, env: dict[str, str]) -> None:
    """Run the installed command with ``point`` armed; it must die there."""
    proc = lakehouse_command(*argv, cwd=cwd, env={**env, "LAKEHOUSE_FAILPOINTS": point})
    assert proc.returncode == -signal.SIGKILL, (
        f"{point}: the command was expected to die there, but exited {proc.returncode} "
        f"(the point was never reached, or the restart failed):\n{proc.stderr[-4000:]}"
    )


def _run_chain(spark: Any, steps: list[Step], run: Run, kills: dict[int, Sequence[str]]) -> None:
    """Each step: first the kills listed for it (each a restart of the previous one), then
    the step to its end, in this session."""
    run.root.mkdir(parents=True, exist_ok=True)
    for i, step in enumerate(steps):
        if step.before is not None:
            step.before()
        for point in kills.get(i, ()):
            _killed(step.argv(run), point, run.root.parent, {**run.env, **step.env})
        step.finish(spark, run)


# ------------------------------------------------------------------------------ the comparison


def _assert_same_build(spark: Any, got: Run, ref: Run) -> None:
    got_uri, ref_uri = got.tables["build"], ref.tables["build"]
    assert_rows_equal(scenario.build_rows(spark, got_uri), scenario.build_rows(spark, ref_uri))
    assert_rows_equal(
        scenario.dead_rows(spark, got.tables["dead"]), scenario.dead_rows(spark, ref.tables["dead"])
    )
    got_props, ref_props = delta.get_properties(got_uri), delta.get_properties(ref_uri)
    assert scenario.same_properties(got_props) == scenario.same_properties(ref_props)
    # the marker points at the data commit that ended the (re-)snapshot, as in the reference
    for props, uri in ((got_props, got_uri), (ref_props, ref_uri)):
        completed = delta.commit_info(uri, int(props[PROP_SNAPSHOT_COMPLETED_VERSION]))
        assert completed is not None and completed.metadata.get(META_SNAPSHOT_ENDED), props


# ------------------------------------------------------------------------------ the chains


#: step index -> the points killed in it, in order. Together with JOIN_CHAINS they cover
#: every failpoint (test_every_failpoint_is_in_the_matrix).
INGEST_CHAINS: dict[str, dict[int, tuple[str, ...]]] = {
    "create-and-log": {
        0: (
            "batch.start@0",
            "ingest.after_dead_letters@0",
            # the build table's first rows are staged, not yet committed by the commit that
            # creates the table (into a log folder without a commit, see below)
            "delta.before_commit@0",
            # the idle table: its empty commit made, its properties not yet
            "create.before_properties@0",
            # batch 1's rows are staged (written before the dead letters), not yet committed
            "delta.before_commit@1",
            "ingest.batch_end@1",
            "ingest.after_connect_schemas@2",
            "widen.before_data@2",
        ),
    },
    "resnapshot-block-maintenance": {
        0: (
            # the idle table created, its first (empty) data commit not yet
            "ingest.after_create@0",
            "ingest.after_resnapshot_start@3",
            # batch 3's data commit is the build table's version 8 (a checkpoint due, see
            # _ingest_steps): its log checkpoint is written beside the next batch, and the
            # process dies before it is
            "delta.checkpoint@3",
            "delta.before_commit@4",
            "ingest.after_data@4",
            "ingest.after_block@5",
        ),
        1: ("schema_resolve.after_replay",),
        2: ("optimize.after_commit@6",),
        3: ("compact.before_commit",),
        4: ("vacuum.before_delete",),
    },
    # the steady change log: the first process's third batch is written in one pass (its
    # second is the first decoded with the table's recorded Connect schema); the restart
    # replays it in two jobs, then writes the next ones in one pass
    "one-pass": {0: ("ingest.after_one_pass@2",)},
}

JOIN_CHAINS: dict[str, tuple[str, dict[int, tuple[str, ...]]]] = {
    "rowtime": (
        "rowtime",
        {
            0: (
                "join.after_create_pending@0",
                "delta.before_commit@1",
                "join.after_dead_letters@1",
                "join.after_output@1",
                "join.batch_end@1",
            )
        },
    ),
    # processing time: the one-pass path writes the output first, then the dead letters
    "proctime": (
        "proctime",
        {0: ("join.after_output@0", "join.after_dead_letters@0")},
    ),
}


#: Against object storage (no atomic rename; Delta's S3 log store writes a commit with a
#: single PUT): the tables' creation (the build table's by its first rows' commit, the idle
#: table's in two commits) and the first commits.
S3_CHAIN: tuple[str, ...] = (
    "delta.before_commit@0",
    "create.before_properties@0",
    "ingest.after_data@0",
)


def test_every_failpoint_is_in_the_matrix():
    covered = {
        p.partition("@")[0]
        for chain in [*INGEST_CHAINS.values(), *(k for _, k in JOIN_CHAINS.values())]
        for points in chain.values()
        for p in points
    } | {p.partition("@")[0] for p in S3_CHAIN}
    assert covered == set(POINTS)


#: The chains that stop after the ingest's first command (its first six batches): their
#: reference is that command alone.
FIRST_COMMAND_ONLY = frozenset({"create-and-log", "one-pass"})


#: The chains of the extended tier (``make test-extended``): each restarts the command ten or
#: more times. ``make test`` keeps the others, a chain of each kind (ingest, join, object storage).
EXTENDED_CHAINS = frozenset({"create-and-log", "resnapshot-block-maintenance", "rowtime"})


def _chains(names: Iterable[str]) -> list[Any]:
    return [
        pytest.param(n, marks=pytest.mark.extended) if n in EXTENDED_CHAINS else n
        for n in sorted(names)
    ]


@pytest.mark.timeout(1500)  # up to twelve commands, each a Spark process, and a reference run
@pytest.mark.parametrize("chain", _chains(INGEST_CHAINS))
def test_ingest_killed_at_every_point_ends_as_an_uninterrupted_run(spark, tmp_path, chain):
    kills = INGEST_CHAINS[chain]
    batches_only = 6 if chain in FIRST_COMMAND_ONLY else None
    # each run its own input folder: a step writes the files that arrive before it
    steady = chain == "one-pass"
    reference = scenario.ingest(tmp_path, "reference", tmp_path / "reference-cdc")
    steps = _ingest_steps(tmp_path / "reference-cdc", batches_only=batches_only, steady=steady)
    _run_chain(spark, steps, reference, {})
    run = scenario.ingest(tmp_path, "crashed", tmp_path / "cdc")
    if chain == "create-and-log":
        # what a process killed inside the table's first commit leaves: Delta's log folder,
        # no commit (Delta's CREATE TABLE then says the table does not exist)
        (Path(run.tables["build"]) / "_delta_log" / "_staged_commits").mkdir(parents=True)
    crashed = _ingest_steps(tmp_path / "cdc", batches_only=batches_only, steady=steady)
    _run_chain(spark, crashed, run, kills)
    _assert_same_build(spark, run, reference)


@pytest.fixture(scope="module")
def join_build(spark, tmp_path_factory):
    build = str(tmp_path_factory.mktemp("join-build") / "rates")
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
    return build


@pytest.mark.parametrize("chain", _chains(JOIN_CHAINS))
def test_join_killed_at_every_point_ends_as_an_uninterrupted_run(
    spark, tmp_path, join_build, chain
):
    mode, kills = JOIN_CHAINS[chain]
    reference = scenario.join(tmp_path, "reference", tmp_path / "orders", join_build, mode=mode)
    _run_chain(spark, _join_steps(tmp_path / "orders"), reference, {})
    crashed = scenario.join(tmp_path, "crashed", tmp_path / "orders", join_build, mode=mode)
    _run_chain(spark, _join_steps(tmp_path / "orders"), crashed, kills)
    scenario.assert_same_join(spark, crashed, reference)
    if mode == "rowtime":  # 19 orders; the last 3 wait for the watermark
        assert len(scenario.output_rows(spark, crashed.tables["output"])) == 16


def test_ingest_on_object_storage_killed_at_its_first_commits_ends_as_an_uninterrupted_run(
    spark, tmp_path, s3, monkeypatch
):
    for key, value in s3.env().items():  # the writer lease's and the checkpoint's reads here
        monkeypatch.setenv(key, value)
    bucket = s3.create_bucket("crash-matrix")
    conf = "".join(f', "{k}" = "{v}"' for k, v in s3.spark_conf().items())
    steps = _ingest_steps(tmp_path / "cdc", batches_only=2)
    reference = scenario.ingest(tmp_path, "reference", tmp_path / "cdc", conf=conf, storage=bucket)
    _run_chain(spark, steps, reference, {})
    crashed = scenario.ingest(tmp_path, "crashed", tmp_path / "cdc", conf=conf, storage=bucket)
    crashed.env = s3.env()
    # what S3A leaves of a process killed inside the table's first commit: the marker object
    # of Delta's log folder, no commit
    s3.client().put_object(Bucket="crash-matrix", Key="crashed/rates/_delta_log/", Body=b"")
    _run_chain(spark, steps, crashed, {0: S3_CHAIN})
    got, ref = crashed.tables, reference.tables
    assert_rows_equal(
        scenario.build_rows(spark, got["build"]), scenario.build_rows(spark, ref["build"])
    )
    assert_rows_equal(
        scenario.dead_rows(spark, got["dead"]), scenario.dead_rows(spark, ref["dead"])
    )
    got_props, ref_props = delta.get_properties(got["build"]), delta.get_properties(ref["build"])
    assert scenario.same_properties(got_props) == scenario.same_properties(ref_props)
    assert got_props[PROP_SNAPSHOT_COMPLETE] == "true"
