"""The pipelines' metrics (issue 34): each batch's record, its JSON line and its Prometheus
samples, from the batch reports alone."""

from __future__ import annotations

import json
import math
import re
import time

from lakehouse.dimension.targets import BatchReport, TargetReport
from lakehouse.join import JoinBatchReport, ReleasePlan
from lakehouse.metrics import Metrics, ingest_record, join_record
from lakehouse.time import Watermark, WatermarkStatus

NOW = 1_800_000_000_000


def _plan(combined: Watermark, *, probe_max: int | None = None) -> ReleasePlan:
    return ReleasePlan(
        batch_id=7,
        build_version=12,
        combined=combined,
        previous=Watermark.MIN,
        probe=combined,
        build=Watermark(NOW - 5_000, False),
        build_status=WatermarkStatus.ACTIVE,
        probe_max_ts_ms=probe_max,
        decided_at_ms=NOW,
    )


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus' text format."""
    for line in text.splitlines():
        found = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if found and all(f'{k}="{v}"' in found.group(1) for k, v in labels.items()):
            return float(found.group(2))
    raise AssertionError(f"no sample {name} {labels} in:\n{text}")


def test_a_join_batch_becomes_a_record_and_samples():
    report = JoinBatchReport(
        batch_id=7,
        arrived=10,
        released=8,
        matched=6,
        pending=2,
        dead_lettered=1,
        seconds=1.25,
        plan=_plan(Watermark(NOW - 60_000, False), probe_max=NOW - 30_000),
    )
    record = join_record(report, pipeline="orders", now_ms=NOW)
    assert json.loads(json.dumps(record)) == record  # one JSON line as it is
    assert record["unmatched"] == 2 and record["build_version"] == 12
    assert record["watermark_delay_ms"] == 60_000 and record["event_lag_ms"] == 30_000
    assert record["watermark_ms"] == {
        "combined": NOW - 60_000,
        "probe": NOW - 60_000,
        "build": NOW - 5_000,
    }
    metrics = Metrics()
    metrics.observe(record)
    metrics.observe(
        join_record(
            JoinBatchReport(batch_id=8, arrived=5, released=5, matched=5, plan=report.plan),
            pipeline="orders",
            now_ms=NOW,
        )
    )
    text = metrics.text()
    # counters sum over batches; gauges hold the last batch's
    assert _sample(text, "lakehouse_join_rows_total", outcome="released", pipeline="orders") == 13
    assert _sample(text, "lakehouse_join_rows_total", outcome="unmatched") == 2
    assert _sample(text, "lakehouse_join_rows_total", outcome="dead_lettered") == 1
    assert _sample(text, "lakehouse_join_pending_rows", pipeline="orders") == 0
    assert _sample(text, "lakehouse_join_build_version") == 12
    assert _sample(text, "lakehouse_batches_total", command="join") == 2
    assert _sample(text, "lakehouse_last_batch_id", command="join") == 8
    assert _sample(text, "lakehouse_join_event_lag_seconds") == 30
    # the lag behind the wall clock is taken when scraped: it grows while nothing happens
    lag = _sample(text, "lakehouse_join_watermark_lag_seconds", channel="combined")
    assert lag >= time.time() - (NOW - 60_000) / 1000 - 5


def test_a_watermark_without_a_timestamp_is_nan_and_null():
    for combined in (Watermark.MIN, Watermark(Watermark.MIN.timestamp, True)):
        record = join_record(
            JoinBatchReport(batch_id=1, plan=_plan(combined)), pipeline="p", now_ms=NOW
        )
        assert record["watermark_ms"]["combined"] is None
        assert record["watermark_delay_ms"] is None and record["event_lag_ms"] is None
        assert record["processing_time"] == combined.use_processing_time
        metrics = Metrics()
        metrics.observe(record)
        text = metrics.text()
        assert math.isnan(
            _sample(text, "lakehouse_join_watermark_timestamp_seconds", channel="combined")
        )
        assert _sample(text, "lakehouse_join_processing_time") == int(combined.use_processing_time)


def test_an_ingest_batch_becomes_a_record_and_samples():
    report = BatchReport(
        batch_id=3,
        records=9,
        changes=7,
        dead_lettered=2,
        errors_by_kind={"malformed_json": 2},
        seconds=0.8,
        targets=(
            TargetReport(
                table_uri="t/rates",
                version=4,
                rows=7,
                watermark_ms=NOW - 2_000,
                max_event_time_ms=NOW - 1_000,
                snapshot_complete=True,
                phase="complete",
            ),
        ),
    )
    record = ingest_record(report, pipeline="rates", now_ms=NOW)
    assert json.loads(json.dumps(record)) == record
    (table,) = record["tables"]
    assert table["watermark_delay_ms"] == 2_000 and table["event_lag_ms"] == 1_000
    metrics = Metrics()
    metrics.observe(record)
    text = metrics.text()
    assert _sample(text, "lakehouse_ingest_records_total", pipeline="rates") == 9
    assert _sample(text, "lakehouse_ingest_dead_letters_total", kind="malformed_json") == 2
    assert _sample(text, "lakehouse_build_rows_total", table="t/rates") == 7
    assert _sample(text, "lakehouse_build_version", table="t/rates") == 4
    assert _sample(text, "lakehouse_build_snapshot_complete", table="t/rates") == 1
    assert _sample(text, "lakehouse_build_schema_blocked", table="t/rates") == 0
