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

import copy
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_rows_equal, write_build_table
from reference import Version

from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.dimension import layout as L
from lakehouse.failpoints import POINTS
from lakehouse.runner import start_ingest, start_join
from lakehouse.testing import DebeziumTable

pytestmark = [pytest.mark.spark, pytest.mark.slow]

START_MS = 1_700_000_000_000


# ------------------------------------------------------------------------------ the inputs


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(path)


def _line(message: Any) -> str:
    return "null" if message.value is None else json.dumps(message.value)


def _with_rate_schema(message: Any, **rate_field: Any) -> Any:
    """The message with the ``rate`` field of its row schemas replaced by ``rate_field``."""
    out = copy.deepcopy(message)
    for row in out.value["schema"]["fields"][:2]:
        row["fields"] = [
            {**rate_field, "field": "rate", "optional": True} if f["field"] == "rate" else f
            for f in row["fields"]
        ]
    return out


def _cdc_batches() -> list[list[str]]:
    """The ingest's input, one file (one micro-batch) each, with what each batch does:

    0. the first two snapshot rows and an undecodable line (dead letter; creates the table);
    1. the rest of the snapshot, ``last`` (the marker);
    2. the log: an update, a delete with its tombstone, an insert, and a record whose decimal
       is wider than the table's (the table is widened before the data commit);
    3. snapshot rows after the marker (a re-snapshot starts; the marker is cleared);
    4. the re-snapshot's ``last`` (the key it did not re-read is ended; the marker again);
    5. a record whose schema makes ``rate`` a string (the table blocks), and an update it holds
       back;
    6. after ``schema-resolve``: an insert (the ingest goes on).
    """
    t = DebeziumTable("public", "rates", key="currency", start_ms=START_MS)
    snap = t.snapshot([{"currency": c, "rate": "1.0"} for c in ("EUR", "GBP", "JPY", "CHF")])
    t.advance(60_000)
    wide = _with_rate_schema(
        t.update({"currency": "JPY", "rate": "1234567890.1234"}),
        type="bytes",
        name="org.apache.kafka.connect.data.Decimal",
        version=1,
        parameters={"scale": "4", "connect.decimal.precision": "16"},
    )
    log = [
        t.update({"currency": "EUR", "rate": "1.1"}),
        *t.delete("GBP"),
        t.insert({"currency": "GBP", "rate": "1.3"}),
        wide,
    ]
    t.advance(60_000)
    again = t.snapshot([{"currency": c, "rate": "2.0"} for c in ("EUR", "JPY", "CHF")])
    t.advance(60_000)
    conflict = t.update({"currency": "CHF", "rate": "9.9"})
    conflict = _with_rate_schema(conflict, type="string")
    for image in ("after",):
        conflict.value["payload"][image]["rate"] = "nine point nine"
    held = t.update({"currency": "EUR", "rate": "2.5"})
    t.advance(60_000)
    after = t.insert({"currency": "USD", "rate": "0.9"})
    return [
        [_line(m) for m in snap[:2]] + ["{not json"],
        [_line(m) for m in snap[2:]],
        [_line(m) for m in log],
        [_line(m) for m in again[:2]],
        [_line(m) for m in again[2:]],
        [_line(conflict), _line(held)],
        [_line(after)],
    ]


def _probe_batches() -> list[list[str]]:
    """The join's input: three files of six orders and one bad line each."""
    out = []
    for batch in range(3):
        rows: list[str] = [
            json.dumps(
                {
                    "order_id": batch * 10 + i,
                    "currency": ["EUR", "GBP", "ZZZ"][i % 3],
                    "order_ts": 1_000 * (batch * 10 + i),
                }
            )
            for i in range(6)
        ]
        out.append([*rows, "{ bad"])
    return out


# ------------------------------------------------------------------------------ the pipelines


def _config(tmp: Path, name: str, *, section: str, body: str, conf: str = "") -> Path:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(
        '[spark]\nmaster = "local[2]"\n'
        'conf = { "spark.sql.shuffle.partitions" = "2", "spark.ui.enabled" = "false"'
        f"{conf} }}\n[{section}]\n{body}"
    )
    return cfg


@dataclass
class Run:
    """One pipeline's directory: its configuration, tables and checkpoint."""

    root: Path
    config: Path
    tables: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # for the command (credentials)


def _ingest(
    tmp: Path, name: str, inputs: Path, *, conf: str = "", storage: str | None = None
) -> Run:
    """An ingest of ``inputs`` with its tables and checkpoint under ``tmp / name``, or under
    ``storage / name`` (an ``s3a://`` root)."""
    out = f"{storage}/{name}" if storage else str(tmp / name)
    cfg = _config(
        tmp,
        name,
        section="ingest",
        conf=conf,
        body=(
            f'pipeline_id = "ingest"\nsource = "files"\npath = "{inputs}"\n'
            f'checkpoint = "{out}/checkpoint"\ndead_letter_table = "{out}/dead_letter"\n'
            'trigger = "available-now"\nmax_records_per_trigger = 1\n'
            f'[[ingest.tables]]\ntable = "{out}/rates"\nkey = ["currency"]\n'
        ),
    )
    return Run(tmp / name, cfg, {"build": f"{out}/rates", "dead": f"{out}/dead_letter"})


def _join(tmp: Path, name: str, inputs: Path, build: str, *, mode: str) -> Run:
    out = tmp / name
    extra = (
        'mode = "proctime"\nwatermark = "none"\n'
        if mode == "proctime"
        else "out_of_orderness_ms = 2000\n"
    )
    cfg = _config(
        tmp,
        name,
        section="join",
        body=(
            f'pipeline_id = "join"\nsource = "files"\npath = "{inputs}"\n'
            f'checkpoint = "{out}/checkpoint"\ntrigger = "available-now"\n'
            "max_records_per_trigger = 1\n"
            'probe_schema = "order_id bigint, currency string, order_ts bigint"\n'
            'probe_key = ["currency"]\nprobe_time = "order_ts"\nprobe_id = "order_id"\n'
            f'join_type = "left"\n{extra}'
            f'build_table = "{build}"\noutput_table = "{out}/output"\n'
            f'pending_table = "{out}/pending"\ndead_letter_table = "{out}/dead_letter"\n'
        ),
    )
    return Run(
        out,
        cfg,
        {"output": f"{out}/output", "pending": f"{out}/pending", "dead": f"{out}/dead_letter"},
    )


# ------------------------------------------------------------------------------ the steps


@dataclass(frozen=True)
class Step:
    """One command of a scenario: ``argv`` for the installed command (the killed runs) and
    ``finish``, the same work in this session's Spark (the run to the end)."""

    name: str
    argv: Callable[[Run], list[str]]
    finish: Callable[[Any, Run], None]
    before: Callable[[], None] | None = None  # e.g. the input that arrives before it


def _stream(start: Callable[..., Any]) -> Callable[[Any, Run], None]:
    def finish(spark: Any, run: Run) -> None:
        query = start(spark, load_settings(run.config))
        query.awaitTermination()
        assert query.exception() is None

    return finish


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


def _ingest_steps(inputs: Path, *, batches_only: int | None = None) -> list[Step]:
    """The ingest scenario's steps; ``batches_only``: just the ingest of that many batches."""
    batches = _cdc_batches()

    def write(first: int, last: int) -> Callable[[], None]:
        def go() -> None:
            inputs.mkdir(parents=True, exist_ok=True)
            for i in range(first, last):
                if not (inputs / f"{i:04d}.jsonl").exists():
                    _write_lines(inputs / f"{i:04d}.jsonl", batches[i])

        return go

    build = ["ingest", "-c"]
    if batches_only is not None:
        write_some = write(0, batches_only)
        return [
            Step("ingest", lambda r: [*build, str(r.config)], _stream(start_ingest), write_some)
        ]
    return [
        Step("ingest", lambda r: [*build, str(r.config)], _stream(start_ingest), write(0, 6)),
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
        Step("ingest", lambda r: [*build, str(r.config)], _stream(start_ingest), write(6, 7)),
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
        for i, lines in enumerate(_probe_batches()):
            if not (inputs / f"{i:04d}.jsonl").exists():
                _write_lines(inputs / f"{i:04d}.jsonl", lines)

    return [Step("join", lambda r: ["join", "-c", str(r.config)], _stream(start_join), write)]


def _killed(argv: list[str], point: str, cwd: Path, env: dict[str, str]) -> None:
    """Run the installed command with ``point`` armed; it must die there."""
    env = {**os.environ, **env, "LAKEHOUSE_FAILPOINTS": point, "COLUMNS": "4000"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "lakehouse"), *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
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
            _killed(step.argv(run), point, run.root.parent, run.env)
        step.finish(spark, run)


# ------------------------------------------------------------------------------ the comparison


def _build_rows(spark: Any, uri: str) -> list[Any]:
    cols = ["currency", "rate", L.OP, L.EVENT_TIME, L.SEQ, L.SNAPSHOT, L.KAFKA_OFFSET]
    return delta.read(spark, uri).select(*cols).collect()


def _dead_rows(spark: Any, uri: str) -> list[Any]:
    return delta.read(spark, uri).select("_partition", "_offset", "_error_kind").collect()


#: Build-table properties that must end the same (versions and times may differ: a
#: restart may add a commit, such as the one that finishes an interrupted creation).
_SAME_PROPERTIES = (
    L.PROP_TABLE_KIND,
    L.PROP_PRIMARY_KEY,
    L.PROP_EVENT_TIME,
    L.PROP_SOURCE_TABLE,
    L.PROP_SNAPSHOT_COMPLETE,
    L.PROP_SNAPSHOT_STATE,
    L.PROP_SNAPSHOT_SIGNAL,
    L.PROP_SCHEMA_BLOCK,
)


def _assert_same_build(spark: Any, got: Run, ref: Run) -> None:
    got_uri, ref_uri = got.tables["build"], ref.tables["build"]
    assert_rows_equal(_build_rows(spark, got_uri), _build_rows(spark, ref_uri))
    assert_rows_equal(_dead_rows(spark, got.tables["dead"]), _dead_rows(spark, ref.tables["dead"]))
    got_props, ref_props = delta.get_properties(got_uri), delta.get_properties(ref_uri)
    assert {k: got_props.get(k) for k in _SAME_PROPERTIES} == {
        k: ref_props.get(k) for k in _SAME_PROPERTIES
    }
    # the marker points at the data commit that ended the (re-)snapshot, as in the reference
    for props, uri in ((got_props, got_uri), (ref_props, ref_uri)):
        completed = delta.commit_info(uri, int(props[L.PROP_SNAPSHOT_COMPLETED_VERSION]))
        assert completed is not None and completed.metadata.get(L.META_SNAPSHOT_ENDED), props


def _output_rows(spark: Any, uri: str) -> list[Any]:
    # everything but the wall-clock columns (arrival and release time)
    cols = ["order_id", "currency", "order_ts", "value", "_matched", "_build_version"]
    cols += ["_build_event_time", "_watermark", "_batch_id", "_released_by"]
    return delta.read(spark, uri).select(*cols).collect()


def _assert_same_join(spark: Any, got: Run, ref: Run) -> None:
    assert_rows_equal(
        _output_rows(spark, got.tables["output"]), _output_rows(spark, ref.tables["output"])
    )
    assert_rows_equal(
        delta.read(spark, got.tables["pending"]).select("order_id").collect(),
        delta.read(spark, ref.tables["pending"]).select("order_id").collect(),
    )
    assert_rows_equal(_dead_rows(spark, got.tables["dead"]), _dead_rows(spark, ref.tables["dead"]))


# ------------------------------------------------------------------------------ the chains


#: step index -> the points killed in it, in order. Together with JOIN_CHAINS they cover
#: every failpoint (test_every_failpoint_is_in_the_matrix).
INGEST_CHAINS: dict[str, dict[int, tuple[str, ...]]] = {
    "create-and-log": {
        0: (
            "ingest.batch_start@0",
            "ingest.after_dead_letters@0",
            "create.before_properties@0",
            "ingest.after_data@1",
            "ingest.batch_end@1",
            "widen.before_data@2",
        ),
    },
    "resnapshot-block-maintenance": {
        0: (
            "ingest.after_create@0",
            "ingest.after_resnapshot_start@3",
            "ingest.after_data@4",
            "ingest.after_block@5",
        ),
        1: ("schema_resolve.after_replay",),
        2: ("optimize.after_commit@6",),
        3: ("compact.before_commit",),
        4: ("vacuum.before_delete",),
    },
}

JOIN_CHAINS: dict[str, tuple[str, dict[int, tuple[str, ...]]]] = {
    "rowtime": (
        "rowtime",
        {
            0: (
                "join.batch_start@0",
                "join.after_create_pending@0",
                "join.after_dead_letters@1",
                "join.before_output@1",
                "join.after_output@1",
                "join.batch_end@1",
            )
        },
    ),
    # processing time: the one-pass path writes the output first, then the dead letters
    "proctime": (
        "proctime",
        {0: ("join.after_output@0", "join.after_dead_letters@0", "join.batch_end@0")},
    ),
}


#: Against object storage (no atomic rename; Delta's S3 log store writes a commit with a
#: single PUT): the table's creation and its first commits.
S3_CHAIN: tuple[str, ...] = (
    "ingest.after_dead_letters@0",
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


@pytest.fixture(scope="module")
def ingest_reference(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ingest-reference")
    run = _ingest(tmp, "reference", tmp / "cdc")
    _run_chain(spark, _ingest_steps(tmp / "cdc"), run, {})
    return run


@pytest.mark.parametrize("chain", sorted(INGEST_CHAINS))
def test_ingest_killed_at_every_point_ends_as_an_uninterrupted_run(
    spark, tmp_path, ingest_reference, chain
):
    kills = INGEST_CHAINS[chain]
    # a compaction after every append, so that one falls in the batch the point names
    conf = ', "spark.lakehouse.compactEveryVersions" = "1"' if 2 in kills else ""
    run = _ingest(tmp_path, "crashed", tmp_path / "cdc", conf=conf)
    if chain == "create-and-log":
        # what a process killed inside the table's first commit leaves: Delta's log folder,
        # no commit (Delta's CREATE TABLE then says the table does not exist)
        (Path(run.tables["build"]) / "_delta_log" / "_staged_commits").mkdir(parents=True)
    _run_chain(spark, _ingest_steps(tmp_path / "cdc"), run, kills)
    _assert_same_build(spark, run, ingest_reference)


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


@pytest.mark.parametrize("chain", sorted(JOIN_CHAINS))
def test_join_killed_at_every_point_ends_as_an_uninterrupted_run(
    spark, tmp_path, join_build, chain
):
    mode, kills = JOIN_CHAINS[chain]
    reference = _join(tmp_path, "reference", tmp_path / "orders", join_build, mode=mode)
    _run_chain(spark, _join_steps(tmp_path / "orders"), reference, {})
    crashed = _join(tmp_path, "crashed", tmp_path / "orders", join_build, mode=mode)
    _run_chain(spark, _join_steps(tmp_path / "orders"), crashed, kills)
    _assert_same_join(spark, crashed, reference)
    if mode == "rowtime":  # 18 orders; the last 3 wait for the watermark
        assert len(_output_rows(spark, crashed.tables["output"])) == 15


def test_ingest_on_object_storage_killed_at_its_first_commits_ends_as_an_uninterrupted_run(
    spark, tmp_path, s3, monkeypatch
):
    for key, value in s3.env().items():  # the writer lease's and the checkpoint's reads here
        monkeypatch.setenv(key, value)
    bucket = s3.create_bucket("crash-matrix")
    conf = "".join(f', "{k}" = "{v}"' for k, v in s3.spark_conf().items())
    steps = _ingest_steps(tmp_path / "cdc", batches_only=2)
    reference = _ingest(tmp_path, "reference", tmp_path / "cdc", conf=conf, storage=bucket)
    _run_chain(spark, steps, reference, {})
    crashed = _ingest(tmp_path, "crashed", tmp_path / "cdc", conf=conf, storage=bucket)
    crashed.env = s3.env()
    # what S3A leaves of a process killed inside the table's first commit: the marker object
    # of Delta's log folder, no commit
    s3.client().put_object(Bucket="crash-matrix", Key="crashed/rates/_delta_log/", Body=b"")
    _run_chain(spark, steps, crashed, {0: S3_CHAIN})
    got, ref = crashed.tables, reference.tables
    assert_rows_equal(_build_rows(spark, got["build"]), _build_rows(spark, ref["build"]))
    assert_rows_equal(_dead_rows(spark, got["dead"]), _dead_rows(spark, ref["dead"]))
    got_props, ref_props = delta.get_properties(got["build"]), delta.get_properties(ref["build"])
    assert {k: got_props.get(k) for k in _SAME_PROPERTIES} == {
        k: ref_props.get(k) for k in _SAME_PROPERTIES
    }
    assert got_props[L.PROP_SNAPSHOT_COMPLETE] == "true"
