"""The pipelines of the crash and recovery tests: their inputs, configurations and the
comparison of their tables (tests/integration/test_crash_matrix.py, test_recovery_commands.py).

An ingest of a Debezium change log that goes through every kind of batch the build sink has
(the table's creation, dead letters, the marker, a widening, a re-snapshot, a schema block),
and a row-time or processing-time join of three files of orders against a small build table;
each runs as the installed command (``argv``) or in the test session's Spark (``finish``).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helpers import assert_rows_equal

from lakehouse import delta
from lakehouse.config import load_settings
from lakehouse.dimension.layout import (
    EVENT_TIME,
    KAFKA_OFFSET,
    OP,
    PROP_CONNECT_SCHEMAS,
    PROP_EVENT_TIME,
    PROP_PRIMARY_KEY,
    PROP_SCHEMA_BLOCK,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_SIGNAL,
    PROP_SNAPSHOT_STATE,
    PROP_SOURCE_TABLE,
    PROP_TABLE_KIND,
    SEQ,
    SNAPSHOT,
)
from lakehouse.testing import DebeziumTable

START_MS = 1_700_000_000_000


# ------------------------------------------------------------------------------ the inputs


def write_lines(path: Path, lines: Sequence[str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    tmp.rename(path)


def line(message: Any) -> str:
    return "null" if message.value is None else json.dumps(message.value)


def with_rate_schema(message: Any, **rate_field: Any) -> Any:
    """The message with the ``rate`` field of its row schemas replaced by ``rate_field``."""
    out = copy.deepcopy(message)
    for row in out.value["schema"]["fields"][:2]:
        row["fields"] = [
            {**rate_field, "field": "rate", "optional": True} if f["field"] == "rate" else f
            for f in row["fields"]
        ]
    return out


def cdc_batches() -> list[list[str]]:
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
    log = [
        t.update({"currency": "EUR", "rate": "1.1"}),
        *t.delete("GBP"),
        t.insert({"currency": "GBP", "rate": "1.3"}),
    ]
    # the newest record, with a schema of its own: the table's newest schema from here on
    log.append(
        with_rate_schema(
            t.update({"currency": "JPY", "rate": "1234567890.1234"}),
            type="bytes",
            name="org.apache.kafka.connect.data.Decimal",
            version=1,
            parameters={"scale": "4", "connect.decimal.precision": "16"},
        )
    )
    t.advance(60_000)
    again = t.snapshot([{"currency": c, "rate": "2.0"} for c in ("EUR", "JPY", "CHF")])
    t.advance(60_000)
    conflict = t.update({"currency": "CHF", "rate": "9.9"})
    conflict = with_rate_schema(conflict, type="string")
    for image in ("after",):
        conflict.value["payload"][image]["rate"] = "nine point nine"
    held = t.update({"currency": "EUR", "rate": "2.5"})
    t.advance(60_000)
    after = t.insert({"currency": "USD", "rate": "0.9"})
    return [
        [line(m) for m in snap[:2]] + ["{not json"],
        [line(m) for m in snap[2:]],
        [line(m) for m in log],
        [line(m) for m in again[:2]],
        [line(m) for m in again[2:]],
        [line(conflict), line(held)],
        [line(after)],
    ]


def steady_batches() -> list[list[str]]:
    """A steady change log, one file (one micro-batch) each: a snapshot of four rows (the
    marker) and an undecodable line (a dead letter), then four batches of an update of each
    key. From the second batch of a process
    on that reads the table's recorded Connect schema, each is written in one pass
    (:mod:`lakehouse.dimension.one_pass`)."""
    t = DebeziumTable("public", "rates", key="currency", start_ms=START_MS)
    codes = ("EUR", "GBP", "JPY", "CHF")

    def compact(m: Any) -> str:  # as the connector's JsonConverter writes it
        return m.value_bytes().decode()

    snap = [compact(m) for m in t.snapshot([{"currency": c, "rate": "1.0"} for c in codes])]
    out = [[*snap, "{not json"]]
    for i in range(4):
        t.advance(60_000)
        out.append([compact(t.update({"currency": c, "rate": f"1.{i + 1}"})) for c in codes])
    return out


#: An order of the last file whose time the watermark passed two files earlier: a row-time
#: join releases it at once, as ``_released_by = 'late'``.
LATE_ORDER = 99


def probe_batches() -> list[list[str]]:
    """The join's input: three files of six orders and one bad line each, and in the last
    one a late order (:data:`LATE_ORDER`)."""
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
        if batch == 2:
            late = {"order_id": LATE_ORDER, "currency": "EUR", "order_ts": 1_000}
            rows.append(json.dumps(late))
        out.append([*rows, "{ bad"])
    return out


# ------------------------------------------------------------------------------ the pipelines


def config(tmp: Path, name: str, *, section: str, body: str, conf: str = "") -> Path:
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


def ingest(
    tmp: Path, name: str, inputs: Path, *, conf: str = "", storage: str | None = None
) -> Run:
    """An ingest of ``inputs`` with its tables and checkpoint under ``tmp / name``, or under
    ``storage / name`` (an ``s3a://`` root).

    Two build tables: ``rates``, created by the commit of its first rows, and ``idle``, whose
    source table sends nothing (created empty, in two commits beside the writer's lease,
    and waiting for its snapshot). The tables are worked on one at a time, in that order, so
    that each failpoint of a batch is met in one order."""
    out = f"{storage}/{name}" if storage else str(tmp / name)
    cfg = config(
        tmp,
        name,
        section="ingest",
        conf=conf,
        body=(
            f'pipeline_id = "ingest"\nsource = "files"\npath = "{inputs}"\n'
            f'checkpoint = "{out}/checkpoint"\ndead_letter_table = "{out}/dead_letter"\n'
            'trigger = "available-now"\nmax_records_per_trigger = 1\ntable_parallelism = 1\n'
            f'[[ingest.tables]]\ntable = "{out}/rates"\nkey = ["currency"]\n'
            'source_table = "public.rates"\n'
            f'[[ingest.tables]]\ntable = "{out}/idle"\nkey = ["id"]\n'
            'source_table = "public.idle"\n'
        ),
    )
    tables = {"build": f"{out}/rates", "idle": f"{out}/idle", "dead": f"{out}/dead_letter"}
    return Run(tmp / name, cfg, tables)


def join(tmp: Path, name: str, inputs: Path, build: str, *, mode: str) -> Run:
    out = tmp / name
    extra = (
        'mode = "proctime"\nwatermark = "none"\n'
        if mode == "proctime"
        else "out_of_orderness_ms = 2000\n"
    )
    cfg = config(
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


@dataclass(frozen=True)
class Step:
    """One command of a scenario: ``argv`` for the installed command (the killed runs) and
    ``finish``, the same work in this session's Spark (the run to the end)."""

    name: str
    argv: Callable[[Run], list[str]]
    finish: Callable[[Any, Run], None]
    before: Callable[[], None] | None = None  # e.g. the input that arrives before it
    env: dict[str, str] = field(default_factory=dict)  # for the killed runs of the step


def stream(start: Callable[..., Any]) -> Callable[[Any, Run], None]:
    """The pipeline run to the end of its input in this session's Spark; returns once its
    writer leases are released (a command started next finds the tables free)."""

    def finish(spark: Any, run: Run) -> None:
        from lakehouse.lease import lease_path
        from lakehouse.storage import local_path

        query = start(spark, load_settings(run.config))
        query.awaitTermination()
        assert query.exception() is None
        leases = [local_path(lease_path(t)) for t in run.tables.values()]
        deadline = time.monotonic() + 30
        while any(p and Path(p).exists() for p in leases) and time.monotonic() < deadline:
            time.sleep(0.2)

    return finish


def build_rows(spark: Any, uri: str) -> list[Any]:
    cols = ["currency", "rate", OP, EVENT_TIME, SEQ, SNAPSHOT, KAFKA_OFFSET]
    return delta.read(spark, uri).select(*cols).collect()


def dead_rows(spark: Any, uri: str) -> list[Any]:
    return delta.read(spark, uri).select("_partition", "_offset", "_error_kind").collect()


#: Build-table properties that must end the same (versions and times may differ: a
#: restart may add a commit, such as the one that finishes an interrupted creation).
SAME_PROPERTIES = (
    PROP_TABLE_KIND,
    PROP_PRIMARY_KEY,
    PROP_EVENT_TIME,
    PROP_SOURCE_TABLE,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_STATE,
    PROP_SNAPSHOT_SIGNAL,
    PROP_SCHEMA_BLOCK,
    PROP_CONNECT_SCHEMAS,
)


def same_properties(props: dict[str, str]) -> dict[str, Any]:
    """The :data:`SAME_PROPERTIES` of a build table, as two runs over the same input must have
    them: of an open schema block, what it blocks on (not where, when, nor which table)."""
    out: dict[str, Any] = {k: props.get(k) for k in SAME_PROPERTIES}
    if out.get(PROP_SCHEMA_BLOCK):
        block = json.loads(out[PROP_SCHEMA_BLOCK])
        same = ("column", "table_type", "record_type", "batch_id", "pipeline", "watermark_ms")
        out[PROP_SCHEMA_BLOCK] = {k: block.get(k) for k in same}
    return out


def output_rows(spark: Any, uri: str) -> list[Any]:
    # everything but the wall-clock columns (arrival and release time)
    cols = ["order_id", "currency", "order_ts", "value", "_matched", "_build_version"]
    cols += ["_build_event_time", "_watermark", "_batch_id", "_released_by"]
    return delta.read(spark, uri).select(*cols).collect()


def assert_same_join(spark: Any, got: Run, ref: Run) -> None:
    assert_rows_equal(
        output_rows(spark, got.tables["output"]), output_rows(spark, ref.tables["output"])
    )
    assert_rows_equal(
        delta.read(spark, got.tables["pending"]).select("order_id").collect(),
        delta.read(spark, ref.tables["pending"]).select("order_id").collect(),
    )
    assert_rows_equal(dead_rows(spark, got.tables["dead"]), dead_rows(spark, ref.tables["dead"]))
