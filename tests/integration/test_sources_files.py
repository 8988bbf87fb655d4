"""The JSON-lines directory source: real files, and a real SparkSession where marked."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lakehouse.errors import ConfigError, SourceError
from lakehouse.sources import read_files_stream
from lakehouse.sources.files import (
    ADMISSION_CONTROL,
    FileInputPartition,
    FilesSourceOptions,
    FilesStreamReader,
    ReadAllAvailable,
)

#: A batch cap (maxFilesPerTrigger) is admission control, which Python sources have from
#: pyspark 4.1 on; on 4.0 the option is refused (test_a_batch_cap_needs_pyspark_4_1).
needs_admission_control = pytest.mark.skipif(
    not ADMISSION_CONTROL, reason="pyspark 4.0: Python sources cannot cap a batch"
)

Collected = list[tuple[int, Any]]


def collector() -> tuple[Collected, Callable[[Any, int], None]]:
    """A foreachBatch function that keeps ``(batch_id, row)`` for every row it sees."""
    rows: Collected = []

    def collect(df: Any, batch_id: int) -> None:
        rows.extend((batch_id, row) for row in df.collect())

    return rows, collect


def publish(directory: Path, name: str, lines: list[str], *, mtime_s: int | None = None) -> None:
    """Write a log file the documented way: under an ignored name, then rename into place."""
    temporary = directory / f".{name}.part"
    data = "".join(line + "\n" for line in lines).encode()
    if name.endswith(".gz"):
        data = gzip.compress(data)
    temporary.write_bytes(data)
    if mtime_s is not None:
        os.utime(temporary, (mtime_s, mtime_s))
    temporary.rename(directory / name)


def reader(directory: Path, **options: str) -> FilesStreamReader:
    return FilesStreamReader(FilesSourceOptions.from_options({"path": str(directory), **options}))


ALL = ReadAllAvailable() if ADMISSION_CONTROL else None


@pytest.mark.spark
def test_reads_files_incrementally_and_resumes_from_the_checkpoint(spark, tmp_path: Path):
    log = tmp_path / "orders"
    log.mkdir()
    publish(log, "0001.jsonl", ['{"id": 1}', "", "null", '{"id": 2}'], mtime_s=1_700_000_000)
    publish(log, "0002.jsonl.gz", ['{"id": 3}'], mtime_s=1_700_000_060)
    (log / "notes.txt").write_text("not part of the log\n")
    (log / "_SUCCESS.json").write_text("{}\n")  # ignored: starts with '_'
    checkpoint = str(tmp_path / "checkpoint")
    rows, collect = collector()
    df = read_files_stream(spark, str(log))

    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
        assert len(rows) == 4
        first = max(batch for batch, _ in rows)
        publish(log, "0003.jsonl", ['{"id": 4}', '{"id": 5}'])
        query.processAllAvailable()
        assert min(batch for batch, _ in rows[4:]) > first
    finally:
        query.stop()

    publish(log, "0004.json", ['{"id": 6}'])
    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    got = sorted((r.partition, r.offset, r.value) for _, r in rows)
    assert got == [
        # partition = file index, offset = line number (the blank line 1 leaves a gap)
        (0, 0, b'{"id": 1}'),
        (0, 2, b"null"),  # kept as text: the CDC decoder reads it as a tombstone
        (0, 3, b'{"id": 2}'),
        (1, 0, b'{"id": 3}'),
        (2, 0, b'{"id": 4}'),
        (2, 1, b'{"id": 5}'),
        (3, 0, b'{"id": 6}'),
    ]
    by_position = {(r.partition, r.offset): r for _, r in rows}
    assert {r.topic for r in by_position.values()} == {"orders"}
    assert all(r.key is None and r.timestampType == 1 for r in by_position.values())
    # collect() renders timestamps as naive local time, as datetime.fromtimestamp does
    assert by_position[(1, 0)].timestamp == datetime.fromtimestamp(1_700_000_060)


@pytest.mark.spark
@needs_admission_control
def test_envelope_files_replay_a_captured_topic_in_file_batches(spark, tmp_path: Path):
    log = tmp_path / "capture"
    log.mkdir()
    publish(
        log,
        "2024-01-01.jsonl",
        [
            '{"key": "k1", "value": {"op": "c", "after": {"id": 1}}, "partition": 2, '
            '"offset": 40, "timestamp": 1700000000123}',
            '{"key": "k1", "value": null, "partition": 2, "offset": 41, '
            '"timestamp": 1700000000124}',
        ],
    )
    publish(
        log,
        "2024-01-02.jsonl",
        ['{"key": null, "value": "{\\"op\\": \\"r\\"}", "partition": 0, "offset": 7}'],
    )
    rows, collect = collector()
    df = read_files_stream(
        spark,
        str(log),
        topic="dbserver1.inventory.customers",
        options={"format": "envelope", "maxFilesPerTrigger": "1"},
    )
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)

    assert len({batch for batch, _ in rows}) == 2  # one file per batch
    got = sorted(
        ((r.partition, r.offset, r.key, r.value, r.timestampType) for _, r in rows),
    )
    assert got == [
        (0, 7, None, b'{"op": "r"}', -1),  # a string value is used as is
        (2, 40, b"k1", b'{"op":"c","after":{"id":1}}', 0),  # an object is compact JSON
        (2, 41, b"k1", None, 0),  # null is a tombstone
    ]
    assert {r.topic for _, r in rows} == {"dbserver1.inventory.customers"}
    stamped = next(r for _, r in rows if r.offset == 40)
    assert stamped.timestamp == datetime.fromtimestamp(1_700_000_000) + timedelta(milliseconds=123)


def test_a_file_sorting_before_the_consumed_prefix_is_an_error(tmp_path: Path):
    publish(tmp_path, "0001.jsonl", ["a"])
    publish(tmp_path, "0003.jsonl", ["b"])
    source = reader(tmp_path)
    consumed = source.latestOffset(source.initialOffset(), ALL)
    assert consumed == {"files": 2, "lastFile": "0003.jsonl"}

    publish(tmp_path, "0002.jsonl", ["late"])
    rule = r"sorts before '0003.jsonl', the last file this query has consumed.*must sort after"
    with pytest.raises(SourceError, match=r"file '0002.jsonl' appeared in .*" + rule):
        source.latestOffset(consumed, ALL)
    # After a restart the reader has no memory of earlier listings; it still refuses.
    with pytest.raises(SourceError, match=r"file '0002.jsonl' \(most recently modified .*" + rule):
        reader(tmp_path).latestOffset(consumed, ALL)
    # A replayed batch would read other files than planned: refused too.
    with pytest.raises(SourceError, match=rule):
        reader(tmp_path).partitions({"files": 0}, consumed)


def test_a_removed_consumed_file_is_an_error(tmp_path: Path):
    publish(tmp_path, "0001.jsonl", ["a"])
    publish(tmp_path, "0002.jsonl", ["b"])
    source = reader(tmp_path)
    consumed = source.latestOffset(source.initialOffset(), ALL)
    (tmp_path / "0001.jsonl").unlink()
    with pytest.raises(SourceError, match=r"1 of the 2 files .* are gone"):
        source.latestOffset(consumed, ALL)


def test_a_batch_cap_needs_pyspark_4_1(tmp_path: Path):
    if ADMISSION_CONTROL:
        assert reader(tmp_path, maxFilesPerTrigger="2").getDefaultReadLimit().max_files == 2
    else:
        with pytest.raises(ConfigError, match=r"needs pyspark 4\.1 or newer") as refused:
            reader(tmp_path, maxFilesPerTrigger="2")
        assert refused.value.setting == "maxFilesPerTrigger"


@needs_admission_control
def test_new_files_after_the_consumed_prefix_are_planned_one_task_each(tmp_path: Path):
    publish(tmp_path, "a.jsonl", ["1"])
    source = reader(tmp_path, maxFilesPerTrigger="2")
    first = source.latestOffset(source.initialOffset(), ALL)
    publish(tmp_path, "b.jsonl", ["2"])
    publish(tmp_path, "c.jsonl", ["3"])
    publish(tmp_path, "d.jsonl", ["4"])
    second = source.latestOffset(first, source.getDefaultReadLimit())
    assert second == {"files": 3, "lastFile": "c.jsonl"}
    assert source.partitions(first, second) == [
        FileInputPartition(1, str(tmp_path / "b.jsonl")),
        FileInputPartition(2, str(tmp_path / "c.jsonl")),
    ]


def test_a_malformed_envelope_names_the_file_and_line(tmp_path: Path):
    publish(tmp_path, "0001.jsonl", ['{"value": "x", "partition": 0, "offset": 0}', "{oops"])
    source = reader(tmp_path, format="envelope")
    with pytest.raises(SourceError, match=r"file '.*0001.jsonl' line 2 is not a JSON envelope"):
        list(source.read(FileInputPartition(0, str(tmp_path / "0001.jsonl"))))


def test_a_missing_directory_is_a_source_error(tmp_path: Path):
    with pytest.raises(SourceError, match=r"directory '.*absent' \(option 'path'\) does not exist"):
        reader(tmp_path / "absent").initialOffset()


@pytest.mark.parametrize(
    ("options", "setting"),
    [
        ({}, "path"),  # a directory is required
        ({"path": "s3://bucket/prefix"}, "path"),  # only local or mounted paths
        ({"path": "/data", "format": "csv"}, "format"),
        ({"path": "/data", "maxFilesPerTrigger": "-1"}, "maxFilesPerTrigger"),
        ({"path": "/data", "pathGlob": "*.txt"}, "pathglob"),  # unknown options are errors
    ],
)
def test_invalid_options_name_the_setting(options, setting):
    with pytest.raises(ConfigError) as failure:
        FilesSourceOptions.from_options(options)
    assert failure.value.setting == setting


def test_topic_defaults_to_the_directory_name(tmp_path: Path):
    assert FilesSourceOptions.from_options({"path": f"{tmp_path}/orders/"}).topic == "orders"
    assert json.loads(json.dumps({"files": 0})) == reader(tmp_path).initialOffset()
