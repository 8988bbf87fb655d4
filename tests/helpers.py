"""Table assertions with readable, side-by-side failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lakehouse.dimension.layout import (
    META_BATCH_ID,
    META_MAX_EVENT_TIME,
    META_WATERMARK,
    PROP_PRIMARY_KEY,
    PROP_SNAPSHOT_COMPLETE,
    PROP_TABLE_KIND,
)

#: The one entry of the suite's ``LAKEHOUSE_SPARK_CONF`` (tests/conftest.py) that is not a JVM
#: option: projections and predicates interpreted instead of generated and compiled.
INTERPRETED_PROJECTIONS = "spark.sql.codegen.factoryMode=NO_CODEGEN"


def _render(expected: Sequence[tuple[Any, ...]], actual: Sequence[tuple[Any, ...]]) -> str:
    table = Table("#", "expected", "actual", "", show_lines=False)
    for i in range(max(len(expected), len(actual))):
        e = expected[i] if i < len(expected) else None
        a = actual[i] if i < len(actual) else None
        table.add_row(str(i), repr(e), repr(a), "" if e == a else "<- differs")
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def assert_rows_equal(
    actual: Iterable[Sequence[Any]], expected: Iterable[Sequence[Any]], *, ordered: bool = False
) -> None:
    """Assert two row collections are equal; unordered unless ``ordered``; on failure show
    both side by side, sorted, with the differing rows marked."""
    a = [tuple(r) for r in actual]
    e = [tuple(r) for r in expected]
    if not ordered:
        a = sorted(a, key=repr)
        e = sorted(e, key=repr)
    if a != e:
        raise AssertionError(f"rows differ ({len(e)} expected, {len(a)} actual):\n" + _render(e, a))


def assert_table_at_version(
    spark: Any,
    uri: str,
    version: int | None,
    rows: Iterable[Sequence[Any]],
    *,
    columns: Sequence[str] | None = None,
) -> None:
    """Assert the Delta table at ``version`` holds exactly ``rows`` (in any order)."""
    from lakehouse import delta

    df = delta.read(spark, uri, version=version)
    if columns is not None:
        df = df.select(*columns)
    assert_rows_equal(df.collect(), rows)


def data_commit_of_batch(uri: str, batch_id: int) -> int:
    """The version of the data commit (``WRITE``) batch ``batch_id`` made in a table: a table
    created where files already are (a writer's lease, recorded Connect schemas) takes two
    commits to create, so version numbers alone do not say which commit holds the data."""
    from lakehouse import delta

    versions = [
        c.version
        for c in delta.history(uri)
        if c.operation == "WRITE" and c.metadata.get(META_BATCH_ID) == str(batch_id)
    ]
    assert len(versions) == 1, f"batch {batch_id} made {len(versions)} data commits in {uri}"
    return versions[0]


def write_build_table(
    spark: Any,
    uri: str,
    versions: Iterable[Any],
    *,
    complete: bool = True,
    watermark_ms: int | None = None,
    batch_id: int = 0,
    key: str = "k",
) -> int:
    """Append ``reference.Version`` rows to a build table in the build layout, with the
    commit metadata the build sink writes; set the snapshot marker when ``complete``.

    Returns the data commit's version.
    """
    from datetime import UTC, datetime

    from pyspark.sql.types import StructType

    from lakehouse import delta
    from lakehouse.dimension.marker import set_marker

    schema = StructType.fromDDL(
        f"{key} string, value bigint, _op string, _event_time timestamp, _seq string, "
        "_snapshot boolean, _ingested_at timestamp, _kafka_topic string, "
        "_kafka_partition int, _kafka_offset bigint"
    )
    now = datetime.now(UTC)
    rows = [
        (
            v.key,
            v.value,
            v.op,
            datetime.fromtimestamp(v.time / 1000, UTC),
            v.seq,
            v.op == "r",
            now,
            "t",
            0,
            i,
        )
        for i, v in enumerate(versions)
    ]
    if not delta.table_exists(uri):
        delta.create_table(
            uri,
            schema,
            properties={
                PROP_PRIMARY_KEY: key,
                PROP_SNAPSHOT_COMPLETE: "false",
                PROP_TABLE_KIND: "build",
            },
        )
    max_t = max((v.time for v in versions), default=None) if versions else None
    wm = (
        watermark_ms if watermark_ms is not None else (max_t - 1 if max_t is not None else -(2**63))
    )
    result = delta.append(
        spark.createDataFrame(rows, schema),
        uri,
        txn=("build-test", batch_id),
        metadata={
            META_BATCH_ID: batch_id,
            META_WATERMARK: wm,
            META_MAX_EVENT_TIME: max_t if max_t is not None else "",
        },
    )
    if complete and delta.get_properties(uri).get(PROP_SNAPSHOT_COMPLETE) != "true":
        set_marker(uri, signal="test", data_version=result.version)
    return result.version


def raw_records(
    spark: Any,
    values: Iterable[Any],
    *,
    topic: str = "probe",
    partition: int = 0,
    first_offset: int = 0,
) -> Any:
    """A DataFrame in the sources' raw schema, one record per value (dicts become JSON)."""
    import json
    from datetime import UTC, datetime

    from pyspark.sql.types import StructType

    from lakehouse.sources.schema import RAW_SCHEMA_DDL

    rows = []
    for i, value in enumerate(values):
        data = (
            value
            if isinstance(value, bytes | None)
            else (value.encode() if isinstance(value, str) else json.dumps(value).encode())
        )
        rows.append((None, data, topic, partition, first_offset + i, datetime.now(UTC), 0))
    return spark.createDataFrame(rows, StructType.fromDDL(RAW_SCHEMA_DDL))


def connector_records(
    spark: Any, messages: Iterable[Any], offsets: dict[str, int], *, topic: str | None = None
) -> Any:
    """Debezium messages (:class:`lakehouse.testing.debezium.Message`) in the sources' raw
    schema, as Spark's Kafka source reads a connector's topics: a topic per table
    (``dbserver1.public.<table>``), one input partition per topic. With ``topic``, all of
    them in that one topic, in Spark's default partitions. A tombstone (no value) goes to the
    topic of the message before it, as Debezium writes it after its delete. ``offsets`` holds
    each topic's next offset, advanced here."""
    from datetime import UTC, datetime

    from pyspark.sql.types import StructType

    from lakehouse.sources.schema import RAW_SCHEMA_DDL

    by_topic: dict[str, list[Any]] = {}
    name = topic
    for m in messages:
        if topic is None and m.value is not None:
            payload = m.value.get("payload", m.value)  # without its Connect schema: bare
            name = f"dbserver1.public.{payload['source']['table']}"
        assert name is not None, "a tombstone needs its delete before it"
        by_topic.setdefault(name, []).append(m)
    rows, now = [], datetime.now(UTC)
    for name, listed in by_topic.items():
        first = offsets.get(name, 0)
        rows += [
            (m.key_bytes(), m.value_bytes(), name, 0, first + i, now, 0)
            for i, m in enumerate(listed)
        ]
        offsets[name] = first + len(listed)
    schema = StructType.fromDDL(RAW_SCHEMA_DDL)
    if topic is not None:
        return spark.createDataFrame(rows, schema)
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, len(by_topic)), schema)


def add_column(message: Any, name: str, connect_type: str, value: Any) -> Any:
    """A Debezium ``message`` (:class:`lakehouse.testing.debezium.Message`, with its Connect
    schema) whose row images have one more optional column ``name`` of ``connect_type``, its
    ``after`` image holding ``value``."""
    import copy

    from lakehouse.testing.debezium import Message

    document = copy.deepcopy(dict(message.value))
    for image in document["schema"]["fields"]:
        if image["field"] in ("before", "after"):
            image["fields"].append({"type": connect_type, "optional": True, "field": name})
    document["payload"]["after"][name] = value
    return Message(message.key, document)


def json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON document (keys and list indexes), the root ``()`` first."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += json_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += json_paths(v, (*prefix, i))
    return out


def join_options(**overrides: Any) -> Any:
    """:class:`lakehouse.join.JoinOptions` of a row-time join over placeholder tables (for
    decisions tested without Spark); ``overrides`` replace any setting."""
    from lakehouse.join import JoinOptions

    base: dict[str, Any] = dict(
        build_table="b",
        output_table="o",
        pending_table="p",
        dead_letter_table="d",
        pipeline_id="j",
        probe_schema="id bigint, k string, ts bigint",
        probe_key=("k",),
        probe_time="ts",
    )
    base.update(overrides)
    return JoinOptions(**base)


def lakehouse_command(
    *args: str,
    cwd: Path | None = None,
    columns: int = 4000,
    timeout: float = 600,
    compiled_projections: bool = False,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """The installed ``lakehouse`` command, run as a user or a scheduler runs it: a new
    process, output captured as text, the exit code left to the caller. ``columns`` is the
    terminal width rich wraps at (wide by default, so that one line stays one line).
    ``compiled_projections`` runs it with Spark's code generation exactly as users get it,
    without the suite's :data:`INTERPRETED_PROJECTIONS`. ``env``: variables set on top of
    this process's (an object store's credentials, a failpoint)."""
    full = {**os.environ, "COLUMNS": str(columns), **(env or {})}
    if compiled_projections and "LAKEHOUSE_SPARK_CONF" in full:
        entries = full["LAKEHOUSE_SPARK_CONF"].split(";")
        full["LAKEHOUSE_SPARK_CONF"] = ";".join(e for e in entries if e != INTERPRETED_PROJECTIONS)
    return subprocess.run(
        [str(Path(sys.executable).parent / "lakehouse"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full,
        check=False,
    )


def comparable_summary(summary_path: Path, report_dir: Path) -> dict[str, Any]:
    """A quality report's ``summary.json`` without what differs between any two runs of the
    same tables (when, how long, into which directory), to compare two engines' reports."""
    import json

    summary: dict[str, Any] = json.loads(
        summary_path.read_text().replace(str(report_dir), "<report>")
    )
    del summary["run"]["started_at"], summary["run"]["duration_s"]
    return summary


#: The README, whose worked example several tests run.
README = Path(__file__).resolve().parents[1] / "README.md"


def readme_block(folder: str) -> str:
    """The README tutorial's ``<folder>/0001.jsonl`` (``cdc`` or ``orders``), from its first
    block."""
    text = README.read_text()
    opening = f"cat > {folder}/0001.jsonl <<'JSON'\n"
    start = text.index(opening) + len(opening)
    return text[start : text.index("JSON\n", start)]


def wait_for_lease_release(table: str) -> None:
    """Wait for the lease watcher (it polls every second) to give a stopped job's lease back."""
    from lakehouse.lease import read_lease

    for _ in range(300):
        if read_lease(table) is None:
            return
        time.sleep(0.1)
    raise AssertionError(f"the lease of {table} was not released: {read_lease(table)}")


def summary_in_tasks(decoded: Any, tasks: int = 2) -> Any:
    """:func:`lakehouse.dimension.summary.summarise`'s answers for ``decoded``, as the one-pass
    write's tasks aggregate them (``dev.lakehouse.write.BatchSummary``, over ``tasks`` tasks,
    writing no table) and the driver folds them
    (:func:`~lakehouse.dimension.summary.fold_tasks`)."""
    from lakehouse.dimension.summary import fold_tasks, record_summary

    sc = decoded.sparkSession.sparkContext
    write = sc._jvm.dev.lakehouse.write
    rows = decoded.select(record_summary(decoded.schema))
    outputs = sc._gateway.new_array(write.TableOutput, 0)
    outcome = write.MultiTableWrite.write(rows._jdf.queryExecution(), outputs, tasks, False, True)
    return fold_tasks([str(t) for t in outcome.summaries()])


def same_summary(got: Any, want: Any) -> None:
    """Assert two :data:`lakehouse.dimension.summary.Summary` answers agree, whatever the order
    of their entries (a grouped aggregation's rows come in no set order)."""

    def entries(rows: Any) -> list[str]:
        return sorted(
            json.dumps({**r, "images": sorted(r.get("images", ()))}, sort_keys=True, default=str)
            for r in rows
        )

    assert entries(got[0]) == entries(want[0])
    assert got[1] == want[1]
    assert entries(got[2]) == entries(want[2])
