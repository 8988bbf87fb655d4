"""Hostile input through the real ingest: nothing raises out of a batch, nothing is dropped.

Every record of a batch of mutated real fixtures, random bytes and pathological JSON ends up
exactly once as a build table version, a recognised non-change (tombstone, transaction
marker, schema change) or a dead-letter row with a reason.
"""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import StructType

from lakehouse import delta
from lakehouse.dimension import BuildSink, BuildTarget, SnapshotOptions
from lakehouse.sources.schema import RAW_SCHEMA_DDL

pytestmark = pytest.mark.spark


def _mutations(seed: int, count: int) -> list[bytes]:
    """Byte-level and structural mutations of the real Debezium fixtures."""
    rng = random.Random(seed)
    texts = [p.read_bytes() for p in sorted(FIXTURES.glob("debezium/*.json"))]
    out: list[bytes] = []
    for _ in range(count):
        data = bytearray(rng.choice(texts))
        kind = rng.randrange(5)
        if kind == 0:  # flip bytes
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:  # truncate
            data = data[: rng.randrange(len(data))]
        elif kind == 2:  # splice two fixtures
            other = rng.choice(texts)
            data = data[: rng.randrange(len(data))] + other[rng.randrange(len(other)) :]
        elif kind == 3:  # change a value's JSON type
            doc = json.loads(data)
            payload = doc.get("payload", doc) if isinstance(doc, dict) else doc
            if isinstance(payload, dict) and payload:
                key = rng.choice(sorted(payload))
                payload[key] = rng.choice([None, 5, "x", [1], {"a": 1}, True, 1e308])
            data = bytearray(json.dumps(doc).encode())
        else:  # duplicate a chunk
            i = rng.randrange(len(data))
            data = data[:i] + data[i : i + rng.randint(1, 64)] * 3 + data[i:]
        out.append(bytes(data))
    return out


HOSTILE = [
    b"",
    b"null",
    b"\x00\x01\x02",
    '{"op": "c"}'.encode("utf-16"),  # wrong encoding
    b'\xef\xbb\xbf{"op": "c", "after": {"id": 1}, "source": {"ts_ms": 1}}',  # BOM
    b"[" * 100_000 + b"]" * 100_000,  # deeply nested
    b'{"op": "c", "after": {"id": 1, "s": "' + b"x" * 3_000_000 + b'"}, "source": {"ts_ms": 1}}',
    b'{"op": "c", "after": {"id": NaN}, "source": {"ts_ms": 1}}',
    b'{"op": "c", "after": {"id": Infinity}, "source": {"ts_ms": 1}}',
    b'{"op": "c", "after": {"id": 1e999}, "source": {"ts_ms": 1}}',
    b'{"op": "c", "after": {"id": "\\ud800"}, "source": {"ts_ms": 1}}',  # lone surrogate
    b'{"op": "c", "after": {"id": 1}, "source": {"ts_ms": 1}, "op": "d"}',  # duplicate key
    bytes(random.Random(1).randrange(256) for _ in range(4096)),
    b'{"op": "c", "after": {"id": 1, "d": ' + b'{"a":' * 10_000 + b"1" + b"}" * 10_000 + b"}}",
    '{"op": "c", "after": {"id": 1}}'.encode("utf-16-le"),
]


def test_hostile_batch_is_fully_accounted_for(spark, tmp_path):
    values = HOSTILE + _mutations(seed=11, count=150)

    rows = [(None, v, "cdc", 0, i, datetime.now(UTC), 0) for i, v in enumerate(values)]
    raw = spark.createDataFrame(rows, StructType.fromDDL(RAW_SCHEMA_DDL))
    # one build table per source table would be the production setup; here everything that
    # decodes goes to one table keyed by whatever key columns the records carry
    sink = BuildSink(
        [BuildTarget(str(tmp_path / "build"), key_columns=("id",))],
        dead_letter_table=str(tmp_path / "dlq"),
        pipeline_id="fuzz",
        max_record_bytes=1_000_000,
    )
    report = sink.process(raw, 0)
    assert report.records == len(values)
    dead = delta.read(spark, str(tmp_path / "dlq")).collect()
    versions = (
        delta.row_count(str(tmp_path / "build"))
        if delta.table_exists(str(tmp_path / "build"))
        else 0
    )
    recognised = report.tombstones + report.transactions + report.schema_changes
    # every record is accounted for exactly once
    assert versions + len(dead) + recognised == len(values)
    assert sorted({d._offset for d in dead}) == sorted(d._offset for d in dead)
    assert all(d._error and d._error_kind for d in dead)
    assert "internal_error" not in {d._error_kind for d in dead}
    kinds = {d._offset: d._error_kind for d in dead}
    assert kinds[5] == "too_deep"
    assert kinds[6] == "too_large"  # 3 MB > max_record_bytes
    assert kinds[3] == "encoding"
    assert kinds[13] == "too_deep"
    # UTF-16-LE without a BOM is valid UTF-8 (ASCII with NUL bytes), just not JSON
    assert kinds[14] == "malformed_json"

    # the tables open with every reader users point at them, and a replay changes nothing
    import polars as pl
    from deltalake import DeltaTable

    for uri in (str(tmp_path / "build"), str(tmp_path / "dlq")):
        if not delta.table_exists(uri):
            continue
        n = delta.row_count(uri)
        assert DeltaTable(uri).to_pyarrow_table().num_rows == n
        assert pl.read_delta(uri).height == n
    versions_before = {
        uri: delta.latest_version(uri)
        for uri in (str(tmp_path / "build"), str(tmp_path / "dlq"))
        if delta.table_exists(uri)
    }
    sink.process(raw, 0)
    assert {uri: delta.latest_version(uri) for uri in versions_before} == versions_before


def test_nan_and_infinity_land_in_double_columns_as_themselves(spark, tmp_path):
    # as Debezium's JsonConverter sends them for double columns; not NULL
    from datetime import UTC, datetime

    value = json.dumps(
        {
            "schema": {
                "type": "struct",
                "fields": [
                    {
                        "field": "after",
                        "type": "struct",
                        "optional": True,
                        "fields": [
                            {"field": "id", "type": "int32"},
                            {"field": "nan_x", "type": "double", "optional": True},
                            {"field": "inf_y", "type": "double", "optional": True},
                        ],
                    }
                ],
            },
            "payload": {
                "op": "c",
                "after": {"id": 13, "nan_x": "NaN", "inf_y": "-Infinity"},
                "source": {"ts_ms": 1},
            },
        }
    ).encode()
    raw = spark.createDataFrame(
        [(None, value, "cdc", 0, 0, datetime.now(UTC), 0)], StructType.fromDDL(RAW_SCHEMA_DDL)
    )
    sink = BuildSink(
        [BuildTarget(str(tmp_path / "build"), key_columns=("id",))],
        dead_letter_table=str(tmp_path / "dlq"),
        pipeline_id="nan",
    )
    assert sink.process(raw, 0).dead_lettered == 0
    (row,) = delta.read(spark, str(tmp_path / "build")).collect()
    assert math.isnan(row.nan_x) and row.inf_y == float("-inf")


# Each example is four Spark batches: a fixed (derandomized) set of six keeps CI's run the
# same every time; raise max_examples and drop derandomize to explore further.
@settings(
    max_examples=6,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(seeds=st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=2))
def test_successive_batches_of_mutated_fixtures_are_accounted_for_and_replay_to_nothing(
    spark, tmp_path_factory, seeds
):
    # batches meet the table the previous one left (new columns, widened or blocked types):
    # after each, every record is a version, a recognised non-change or a dead letter with a
    # reason; the tables open everywhere; replaying a batch changes nothing
    import polars as pl
    from deltalake import DeltaTable

    tmp = tmp_path_factory.mktemp("fuzz")
    build, dlq = str(tmp / "build"), str(tmp / "dlq")
    # mutated snapshot rows may look like a new snapshot run that ends every key: allowed
    # here, where the fuzz is about accounting (the guard has its own test)
    everything = SnapshotOptions(resnapshot_max_ended=1.0)
    sink = BuildSink(
        [BuildTarget(build, key_columns=("id",), snapshot=everything)],
        dead_letter_table=dlq,
        pipeline_id="fuzz",
        max_record_bytes=1_000_000,
    )
    offset = 0
    for batch_id, seed in enumerate(seeds):
        # a table of the configured key exists, as in production (the first batch of a
        # table none of whose records has its key is a configuration error, said so)
        valid = json.dumps({"op": "c", "after": {"id": seed}, "source": {"ts_ms": 1}}).encode()
        values = [valid, *_mutations(seed=seed, count=40)]
        rows = [(None, v, "cdc", 0, offset + i, datetime.now(UTC), 0) for i, v in enumerate(values)]
        offset += len(values)
        raw = spark.createDataFrame(rows, StructType.fromDDL(RAW_SCHEMA_DDL))
        before = delta.row_count(build) if delta.table_exists(build) else 0
        dead_before = delta.row_count(dlq) if delta.table_exists(dlq) else 0
        report = sink.process(raw, batch_id)
        versions = (delta.row_count(build) if delta.table_exists(build) else 0) - before
        dead = delta.read(spark, dlq).filter(f"_batch_id = {batch_id}").collect()
        assert delta.row_count(dlq) - dead_before == len(dead)
        recognised = report.tombstones + report.transactions + report.schema_changes
        synthetic = sum(t.synthetic_deletes for t in report.targets)
        assert versions - synthetic + len(dead) + recognised == len(values), seed
        assert all(d._error and d._error_kind for d in dead)
        assert "internal_error" not in {d._error_kind for d in dead}
        for uri in (build, dlq):
            if delta.table_exists(uri):
                n = delta.row_count(uri)
                assert DeltaTable(uri).to_pyarrow_table().num_rows == n
                assert pl.read_delta(uri).height == n
        tables = [u for u in (build, dlq) if delta.table_exists(u)]
        latest = {u: delta.latest_version(u) for u in tables}
        sink.process(raw, batch_id)
        assert {u: delta.latest_version(u) for u in tables} == latest
