"""The pipelines' metrics, where monitoring looks.

Every micro-batch report of an ingest or a join becomes one **record**
(:func:`ingest_record`, :func:`join_record`): a flat, JSON-ready dict of what the batch did and
where the watermarks stand, decided from the report and the wall clock alone (no Spark). From
the record:

* ``--log-format json`` prints it as one JSON line (:mod:`lakehouse.progress`), for log
  pipelines;
* :class:`Metrics` keeps it as Prometheus samples, served on ``monitoring.metrics_port``
  (counters sum since the process started, as Prometheus expects);
* :class:`SparkProgressListener`, a ``StreamingQueryListener``, adds Spark's own progress of
  each query (input and processing rates, trigger phases) to the same endpoint.

A watermark at ``MIN`` (nothing may be released yet) or in processing time has no timestamp:
its samples are NaN and its JSON fields null. The lag of a watermark behind the wall clock is
computed when Prometheus scrapes, so a pipeline that stalls shows a growing lag, not the lag
of its last batch.

>>> from lakehouse.join import JoinBatchReport
>>> record = join_record(JoinBatchReport(batch_id=4, arrived=3, released=2, matched=1,
...     pending=1, seconds=0.5), pipeline="orders", now_ms=1_000)
>>> record["unmatched"], record["watermark_ms"], record["time"]
(1, {'combined': None, 'probe': None, 'build': None}, '1970-01-01T00:00:01.000Z')
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lakehouse.time import WATERMARK_MAX, WATERMARK_MIN, Watermark, format_epoch_ms

if TYPE_CHECKING:
    from lakehouse.dimension import BatchReport
    from lakehouse.join import JoinBatchReport

#: Buckets of the batch duration histogram, in seconds: sub-second batches to stuck ones.
DURATION_BUCKETS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)


def _ts(watermark: Watermark | None) -> int | None:
    """A watermark's timestamp in ms; None at MIN, at MAX (a bounded input's end) and in
    processing time."""
    if (
        watermark is None
        or watermark.use_processing_time
        or watermark.timestamp in (WATERMARK_MIN, WATERMARK_MAX)
    ):
        return None
    return watermark.timestamp


def _minus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def join_record(report: JoinBatchReport, *, pipeline: str, now_ms: int) -> dict[str, Any]:
    """One join batch as a flat record (module docstring).

    Fields: the counts of the batch (``arrived``, ``released``, ``matched``, ``unmatched``,
    ``pending`` after it, ``late``, ``expired``, ``dead_lettered``, ``evicted``), the build
    version it joined, the watermarks as text and in ms (``combined``, ``probe``, ``build``),
    ``processing_time`` (the combined watermark follows the wall clock), the combined
    watermark's lag behind the wall clock (``watermark_delay_ms``) and behind the newest probe
    event (``event_lag_ms``), the pending bound's ``alert``, and ``seconds``.
    """
    plan = report.plan
    marks = (
        {}
        if plan is None
        else {"combined": plan.combined, "probe": plan.probe, "build": plan.build}
    )
    combined = _ts(marks.get("combined"))
    return {
        "event": "batch",
        "command": "join",
        "pipeline": pipeline,
        "batch_id": report.batch_id,
        "time": format_epoch_ms(now_ms),
        "seconds": round(report.seconds, 3),
        "skipped": report.skipped,
        "arrived": report.arrived,
        "released": report.released,
        "matched": report.matched,
        "unmatched": report.released - report.matched,
        "pending": report.pending,
        "late": report.late,
        "expired": report.expired,
        "dead_lettered": report.dead_lettered,
        "evicted": report.evicted,
        "build_version": None if plan is None else plan.build_version,
        "watermark": {k: str(marks[k]) if k in marks else None for k in _CHANNELS},
        "watermark_ms": {k: _ts(marks.get(k)) for k in _CHANNELS},
        "processing_time": bool(plan is not None and plan.combined.use_processing_time),
        "watermark_delay_ms": _minus(now_ms, combined),
        "event_lag_ms": _minus(None if plan is None else plan.probe_max_ts_ms, combined),
        "alert": report.bound_alert,
    }


_CHANNELS = ("combined", "probe", "build")


def ingest_record(report: BatchReport, *, pipeline: str, now_ms: int) -> dict[str, Any]:
    """One ingest batch as a flat record (module docstring).

    Fields: ``records``, ``changes``, ``tombstones``, ``dead_lettered`` with
    ``dead_lettered_by_kind``, ``unrouted``, ``seconds``, and per build table (``tables``):
    its version, rows added, snapshot phase and marker, watermark (ms; null at MIN), its lag
    behind the wall clock and behind the newest event the batch wrote, the snapshot alert and
    the schema block.
    """
    tables = []
    for t in report.targets:
        watermark = None if t.watermark_ms == WATERMARK_MIN else t.watermark_ms
        tables.append(
            {
                "table": t.table_uri,
                "version": t.version,
                "rows": t.rows,
                "unchanged": t.unchanged,
                "phase": t.phase,
                "snapshot_complete": t.snapshot_complete,
                "watermark_ms": watermark,
                "watermark_delay_ms": _minus(now_ms, watermark),
                "event_lag_ms": _minus(t.max_event_time_ms, watermark),
                "alert": t.alert,
                "schema_block": t.schema_block,
            }
        )
    return {
        "event": "batch",
        "command": "ingest",
        "pipeline": pipeline,
        "batch_id": report.batch_id,
        "time": format_epoch_ms(now_ms),
        "seconds": round(report.seconds, 3),
        "skipped": report.skipped,
        "records": report.records,
        "changes": report.changes,
        "tombstones": report.tombstones,
        "dead_lettered": report.dead_lettered,
        "dead_lettered_by_kind": dict(report.errors_by_kind),
        "unrouted": report.unrouted,
        "tables": tables,
    }


def _seconds(ms: int | None) -> float:
    return math.nan if ms is None else ms / 1000


class Metrics:
    """The records as Prometheus samples, in a registry of their own.

    ``lakehouse_batches_total``, ``lakehouse_batch_duration_seconds`` (histogram) and
    ``lakehouse_last_batch_id``/``_timestamp_seconds`` for both commands (label ``command``);
    the join's ``lakehouse_join_rows_total`` (label ``outcome``: arrived, released, matched,
    unmatched, late, expired, dead_lettered, evicted), ``_pending_rows``, ``_build_version``,
    ``_watermark_timestamp_seconds`` and ``_watermark_lag_seconds`` (label ``channel``),
    ``_event_lag_seconds``, ``_processing_time`` and ``_pending_bound_alert``; the ingest's
    ``lakehouse_ingest_records_total``, ``_changes_total``, ``_dead_letters_total`` (label
    ``kind``), ``_unrouted_records_total`` and per build table (label ``table``)
    ``lakehouse_build_rows_total``, ``_version``, ``_watermark_timestamp_seconds``,
    ``_watermark_lag_seconds``, ``_event_lag_seconds``, ``_snapshot_complete``,
    ``_snapshot_alert`` and ``_schema_blocked``. Every sample has the label ``pipeline``.
    """

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        by, p, wm = ["command", "pipeline"], ["pipeline"], ["pipeline", "channel"]
        t, q = ["pipeline", "table"], ["query"]

        def counter(name: str, text: str, labels: list[str]) -> Counter:
            return Counter(name, text, labels, registry=r)

        def gauge(name: str, text: str, labels: list[str]) -> Gauge:
            return Gauge(name, text, labels, registry=r)

        self.batches = counter("lakehouse_batches", "Micro-batches run.", by)
        self.duration = Histogram(
            "lakehouse_batch_duration_seconds",
            "Duration of a micro-batch's handler.",
            by,
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.last_id = gauge("lakehouse_last_batch_id", "Id of the last batch.", by)
        self.last_at = gauge(
            "lakehouse_last_batch_timestamp_seconds", "When the last batch ended.", by
        )
        self.join_rows = counter("lakehouse_join_rows", "Probe rows by outcome.", [*p, "outcome"])
        self.pending = gauge("lakehouse_join_pending_rows", "Rows waiting.", p)
        self.build_version = gauge("lakehouse_join_build_version", "Build table version joined.", p)
        self.join_wm = gauge(
            "lakehouse_join_watermark_timestamp_seconds",
            "Watermark (NaN: MIN or processing time).",
            wm,
        )
        self.join_wm_lag = gauge(
            "lakehouse_join_watermark_lag_seconds",
            "Wall clock minus the watermark, at scrape time.",
            wm,
        )
        self.join_event_lag = gauge(
            "lakehouse_join_event_lag_seconds",
            "Newest probe event time minus the combined watermark.",
            p,
        )
        self.proctime = gauge(
            "lakehouse_join_processing_time",
            "1 when the combined watermark follows the wall clock.",
            p,
        )
        self.bound_alert = gauge(
            "lakehouse_join_pending_bound_alert", "1 while the pending bound alerts.", p
        )
        self.records = counter("lakehouse_ingest_records", "CDC records read.", p)
        self.changes = counter("lakehouse_ingest_changes", "Changes written.", p)
        self.dead = counter("lakehouse_ingest_dead_letters", "Records dead-lettered.", [*p, "kind"])
        self.unrouted = counter("lakehouse_ingest_unrouted_records", "Records of no table.", p)
        self.build_rows = counter("lakehouse_build_rows", "Versions written.", t)
        self.build_table_version = gauge("lakehouse_build_version", "Build table version.", t)
        self.build_wm = gauge(
            "lakehouse_build_watermark_timestamp_seconds", "Build watermark (NaN: MIN).", t
        )
        self.build_wm_lag = gauge(
            "lakehouse_build_watermark_lag_seconds",
            "Wall clock minus the build watermark, at scrape time.",
            t,
        )
        self.build_event_lag = gauge(
            "lakehouse_build_event_lag_seconds",
            "Newest event written minus the build watermark.",
            t,
        )
        self.complete = gauge(
            "lakehouse_build_snapshot_complete", "1 once the snapshot marker is set.", t
        )
        self.snapshot_alert = gauge(
            "lakehouse_build_snapshot_alert", "1 while a snapshot alert is open.", t
        )
        self.blocked = gauge("lakehouse_build_schema_blocked", "1 while the schema is blocked.", t)
        self.spark_rows = counter(
            "lakehouse_query_input_rows", "Rows Spark read (its query progress).", q
        )
        self.spark_input_rate = gauge(
            "lakehouse_query_input_rows_per_second", "Spark's input rate.", q
        )
        self.spark_processed_rate = gauge(
            "lakehouse_query_processed_rows_per_second", "Spark's processing rate.", q
        )
        self.spark_phase = gauge(
            "lakehouse_query_trigger_phase_seconds",
            "Spark's time per phase of the last trigger (durationMs).",
            [*q, "phase"],
        )

    def observe(self, record: Mapping[str, Any]) -> None:
        """Take one batch's record (:func:`join_record` or :func:`ingest_record`)."""
        command, pipeline = record["command"], record["pipeline"]
        self.batches.labels(command, pipeline).inc()
        if record["skipped"]:
            return
        self.duration.labels(command, pipeline).observe(record["seconds"])
        self.last_id.labels(command, pipeline).set(record["batch_id"])
        self.last_at.labels(command, pipeline).set_to_current_time()
        if command == "join":
            self._join(pipeline, record)
        else:
            self._ingest(pipeline, record)

    def _join(self, pipeline: str, record: Mapping[str, Any]) -> None:
        for outcome in _OUTCOMES:
            self.join_rows.labels(pipeline, outcome).inc(record[outcome])
        self.pending.labels(pipeline).set(record["pending"])
        if record["build_version"] is not None:
            self.build_version.labels(pipeline).set(record["build_version"])
        for channel, ms in record["watermark_ms"].items():
            self.join_wm.labels(pipeline, channel).set(_seconds(ms))
            self.join_wm_lag.labels(pipeline, channel).set_function(_lag(ms))
        self.join_event_lag.labels(pipeline).set(_seconds(record["event_lag_ms"]))
        self.proctime.labels(pipeline).set(int(record["processing_time"]))
        self.bound_alert.labels(pipeline).set(int(record["alert"] is not None))

    def _ingest(self, pipeline: str, record: Mapping[str, Any]) -> None:
        self.records.labels(pipeline).inc(record["records"])
        self.changes.labels(pipeline).inc(record["changes"])
        self.unrouted.labels(pipeline).inc(record["unrouted"])
        for kind, n in record["dead_lettered_by_kind"].items():
            self.dead.labels(pipeline, kind).inc(n)
        for t in record["tables"]:
            table = t["table"]
            self.build_rows.labels(pipeline, table).inc(t["rows"])
            if t["version"] is not None:
                self.build_table_version.labels(pipeline, table).set(t["version"])
            self.build_wm.labels(pipeline, table).set(_seconds(t["watermark_ms"]))
            self.build_wm_lag.labels(pipeline, table).set_function(_lag(t["watermark_ms"]))
            self.build_event_lag.labels(pipeline, table).set(_seconds(t["event_lag_ms"]))
            self.complete.labels(pipeline, table).set(int(t["snapshot_complete"]))
            self.snapshot_alert.labels(pipeline, table).set(int(t["alert"] is not None))
            self.blocked.labels(pipeline, table).set(int(t["schema_block"] is not None))

    def text(self) -> str:
        """The samples in Prometheus' text format (what the endpoint serves)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def serve(self, host: str, port: int) -> Any:
        """Serve the samples at ``http://host:port/metrics`` from a daemon thread; returns the
        server (``shutdown()`` stops it)."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server


def spark_progress_listener(metrics: Metrics) -> Any:
    """A ``StreamingQueryListener`` that adds Spark's own progress of every query of the
    session to ``metrics`` (``lakehouse_query_*``, label ``query``: the query's name, which is
    the pipeline id). Register it with ``spark.streams.addListener``."""
    from pyspark.sql.streaming import StreamingQueryListener

    class SparkProgressListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            query = progress.name or str(progress.id)
            metrics.spark_rows.labels(query).inc(progress.numInputRows)
            metrics.spark_input_rate.labels(query).set(_finite(progress.inputRowsPerSecond))
            metrics.spark_processed_rate.labels(query).set(_finite(progress.processedRowsPerSecond))
            for phase, ms in (progress.durationMs or {}).items():
                metrics.spark_phase.labels(query, phase).set(ms / 1000)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return SparkProgressListener()


def _finite(value: float | None) -> float:
    return math.nan if value is None else float(value)


_OUTCOMES = (
    "arrived",
    "released",
    "matched",
    "unmatched",
    "late",
    "expired",
    "dead_lettered",
    "evicted",
)


def _lag(ms: int | None) -> Any:
    """The wall clock's lead over ``ms`` when called (NaN without a timestamp)."""
    if ms is None:
        return lambda: math.nan
    return lambda: time.time() - ms / 1000
