"""Measurement 3: end to end — ingestion, latency, history growth, pending backlog.

Each scenario runs in its own process (one Spark session, ``local[2]``) and emits one JSON
result (run as ``python -m bench.e2e '<json spec>'`` by :func:`bench.measure.run_isolated`):

``ingest``
    CDC ingestion rate: a Debezium change stream (:class:`lakehouse.testing.debezium.
    DebeziumTable`: a snapshot of ``keys`` rows, then ``updates`` updates of random keys, JSON
    with schemas, about 2 kB per event, or without them with ``"schemas": false``) is written
    to JSON-lines files, or produced to an
    Apache Kafka broker (:mod:`lakehouse.testing.broker`; at most
    :data:`BROKER_PARTITION_MAX` records per partition, the spread of the earlier runs, so
    figures stay comparable) and read through Spark's Kafka source, and ingested by
    :class:`lakehouse.dimension.BuildSink` with an ``availableNow`` trigger. The rate is events
    per second of the query's run, from start to termination (the Spark session already up;
    producing to the broker is not timed).
``latency``
    Batch duration, and latency per record from arrival to commit, of a streaming pipeline on
    the files source at a trigger interval: a processing-time or row-time join
    (:class:`lakehouse.join.TemporalJoin`) or an ingest (:class:`lakehouse.dimension.BuildSink`
    of Debezium updates), or Spark's floor fed the same records (``"peer": "floor"``). A
    writer renames a small file into the input directory every :data:`FEED_EVERY_S` seconds;
    each record carries the wall time of its file's rename (``sent_ms``, or the Debezium
    event's ``source.ts_ms``), and its latency is the commit time of the version holding it
    minus that. Only rows sent ``warmup_s`` after the query's third batch count (the first
    batches start Python workers).
``history``
    Cost per probe row as the history grows: one probe batch joined as of its rows' times
    against ``keys`` keys with 1, 10, 100 versions each, by the pure kernel probing an
    :class:`~lakehouse.join.kernel.AsOfIndex` built once per build version (its build time
    is reported apart), by the Spark path (:func:`lakehouse.join.asof.join_as_of` against
    the Delta build table, which re-reads the build each batch) and by the whole operator
    (one row-time micro-batch).
``commit_reads``
    What a batch's look at a table's recent commits costs, read from storage and kept from an
    earlier batch of the process.
``tables``
    Cost of an ingest batch per configured table: one connector feeding ``tables`` build
    tables, 400 events per batch, spread over all of them or all of one.
``backlog``
    Cost per batch as the pending backlog grows: a row-time join whose build watermark
    covers half of the time range, so half of each batch is released and half waits; the
    pending table grows by half a batch per batch while the released rows stay constant.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.measure import emit, tree_usage
from bench.workload import EPOCH0_MS, HORIZON_MS, Workload

#: Records per partition of the broker topic (200k events: 4 partitions).
BROKER_PARTITION_MAX = 50_000
#: How often the latency scenario's writer drops a probe file.
FEED_EVERY_S = 1.0


def _spark(name: str, conf: dict[str, str]) -> Any:
    from lakehouse.spark import get_spark

    return get_spark(app_name=f"bench-{name}", master="local[2]", conf=conf)


def debezium_events(
    keys: int, updates: int, seed: int, *, schemas: bool = True
) -> list[tuple[bytes | None, bytes]]:
    """(key, value) bytes of a snapshot of ``keys`` rows, then ``updates`` updates; with the
    Connect schema in every message (``schemas.enable=true``) or without."""
    from lakehouse.testing.debezium import DebeziumTable

    rng = np.random.default_rng(seed)
    table = DebeziumTable(
        "public", "rates", key="currency", start_ms=EPOCH0_MS, step_ms=10, with_schema=schemas
    )
    rows = [{"currency": f"C{i:07d}", "rate": f"{1 + i % 97 / 100:.4f}"} for i in range(keys)]
    messages = table.snapshot(rows)
    for k in rng.integers(0, keys, updates).tolist():
        messages.append(table.update({"currency": f"C{k:07d}", "rate": f"{rng.random():.4f}"}))
    out = []
    for m in messages:
        value = m.value_bytes()
        assert value is not None
        out.append((m.key_bytes(), value))
    return out


def ingest(spec: dict[str, Any]) -> dict[str, Any]:
    """CDC events per second from files or from the broker (see the module docstring)."""
    from lakehouse import delta
    from lakehouse.dimension import BuildSink, BuildTarget
    from lakehouse.sources import read_files_stream, read_kafka_stream

    root = Path(spec["root"])
    shutil.rmtree(root, ignore_errors=True)
    schemas = spec.get("schemas", True)
    events = debezium_events(spec["keys"], spec["updates"], seed=7, schemas=schemas)
    n = len(events)
    spark = _spark("ingest", spec.get("spark_conf", {}))
    sink = BuildSink(
        [BuildTarget(str(root / "build"), key_columns=("currency",))],
        dead_letter_table=str(root / "dlq"),
        pipeline_id="bench-ingest",
    )
    from tests.batch_cost import BatchCost

    batches: list[tuple[int, float]] = []
    costs: list[dict[str, Any]] = []
    copy_uri = str(root / "copy")

    def timed_sink(df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        with BatchCost(df.sparkSession) as cost:
            if spec.get("sink", "product") == "copy":
                records = _plain_copy(df, copy_uri, batch_id, schemas=schemas)
            else:
                records = sink.process(df, batch_id).records
        batches.append((records, time.perf_counter() - t0))
        costs.append(
            {
                "jobs": cost.jobs,
                "delta_jobs": cost.delta_jobs,
                "log_reads": cost.log_reads,
                "compiles": cost.compiles,
                "descriptions": cost.descriptions,
            }
        )

    source = spec["source"]
    broker_ctx = None
    if source == "files":
        landing = root / "landing"
        landing.mkdir(parents=True)
        per_file = spec.get("events_per_file", 5_000)
        for i in range(0, n, per_file):
            lines = b"\n".join(v for _, v in events[i : i + per_file]) + b"\n"
            (landing / f"part-{i // per_file:05d}.jsonl").write_bytes(lines)
        stream = read_files_stream(
            spark,
            str(landing),
            topic="dbserver1.public.rates",
            options={"maxFilesPerTrigger": str(spec.get("files_per_trigger", 4))},
        )
    else:
        from lakehouse.sources.kafka_admin import create_topic, produce
        from lakehouse.testing.broker import kafka_broker

        root.mkdir(parents=True)
        broker_ctx = kafka_broker(root / "broker")
        bootstrap = broker_ctx.__enter__().bootstrap
        partitions = max(1, -(-n // BROKER_PARTITION_MAX))
        topic = "dbserver1.public.rates"
        create_topic(bootstrap, topic, partitions)
        # keyed records: one key's changes stay in one partition, in order
        produce(
            bootstrap,
            topic,
            [(k, v, i % partitions) for i, (k, v) in enumerate(events)],
            timeout_s=600,
        )
        stream = read_kafka_stream(
            spark,
            bootstrap_servers=bootstrap,
            topics=topic,
            options={"maxOffsetsPerTrigger": str(spec.get("records_per_trigger", 40_000))},
        )
    try:
        cpu0, _ = tree_usage(os.getpid())
        t0 = time.perf_counter()
        query = (
            stream.writeStream.foreachBatch(timed_sink)
            .option("checkpointLocation", str(root / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        seconds = time.perf_counter() - t0
        cpu = tree_usage(os.getpid())[0] - cpu0
    finally:
        if broker_ctx is not None:
            broker_ctx.__exit__(None, None, None)
    rows = delta.row_count(copy_uri if spec.get("sink") == "copy" else str(root / "build"))
    spark.stop()
    # steady state: the batches after the first (which also starts Python workers)
    later = batches[1:]
    later_events = sum(n for n, _ in later)
    later_s = sum(s for _, s in later)
    return {
        "source": source,
        "sink": spec.get("sink", "product"),
        "cost": costs,
        "events": n,
        "rows_committed": rows,
        "seconds": seconds,
        "cpu_s": cpu,
        "events_per_s": n / seconds,
        "batches": len(batches),
        "batch_events": [n for n, _ in batches],
        "batch_s": [s for _, s in batches],
        "steady_events_per_s": later_events / later_s if later_s else None,
    }


#: The Debezium envelope's payload, as a plain Kafka-to-Delta copy parses it.
_COPY_PAYLOAD = (
    "struct<before: struct<currency: string, rate: string>, "
    "after: struct<currency: string, rate: string>, op: string, ts_ms: bigint, "
    "source: struct<lsn: bigint, snapshot: string>>"
)


def plain_parse(raw: Any, *, schemas: bool = True) -> Any:
    """Raw source records parsed as a plain copy parses them: ``from_json`` of the value with
    the payload's schema (the envelope's ``payload``, or the whole value without Connect
    schemas), the columns the copy keeps (no logical types, no dead letters)."""
    from pyspark.sql import functions as F

    parsed = F.from_json(
        F.col("value").cast("string"),
        f"payload {_COPY_PAYLOAD}" if schemas else _COPY_PAYLOAD,
    )
    if not schemas:
        parsed = F.struct(parsed.alias("payload"))
    return raw.select(parsed.alias("e"), "partition", "offset").select(
        F.coalesce("e.payload.after.currency", "e.payload.before.currency").alias("currency"),
        F.col("e.payload.after.rate").alias("rate"),
        F.col("e.payload.op").alias("_op"),
        F.timestamp_millis("e.payload.ts_ms").alias("_event_time"),
        F.col("e.payload.source.lsn").alias("_lsn"),
        "partition",
        "offset",
    )


def _plain_copy(df: Any, uri: str, batch_id: int, *, schemas: bool = True) -> int:
    """The peer of the ingest: read, parse with ``from_json``, append (one idempotent write),
    counting the rows while writing."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from lakehouse import delta

    seen = Observation(f"copy-{batch_id}")
    delta.append(
        plain_parse(df, schemas=schemas).observe(seen, F.count(F.lit(1)).alias("n")),
        uri,
        txn=("bench-copy", batch_id),
    )
    return int(seen.get["n"])


def _epoch_ms(iso: str) -> int:
    """A streaming progress' ``timestamp`` (ISO 8601, UTC) as epoch milliseconds."""
    from datetime import datetime

    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def _floor_batch(out: str, schema: str, sent_ms: str | None = None) -> Any:
    """Spark's micro-batch floor (the peer of ``latency``): a ``foreachBatch`` that parses the
    same records with ``from_json`` (``schema``) and appends them to Delta exactly once, with
    Delta's documented idiom (``txnAppId``/``txnVersion`` on a ``DataFrameWriter``); the batch
    id goes into the rows and the commit's metadata, as the pipelines' do. ``sent_ms``: an
    expression over the parsed record ``r`` for each record's send time, when ``schema`` has
    no ``sent_ms`` column."""
    from pyspark.sql import functions as F

    def write(df: Any, batch_id: int) -> None:
        parsed = df.select(F.from_json(F.col("value").cast("string"), schema).alias("r"))
        sent = [F.expr(sent_ms).alias("sent_ms")] if sent_ms else []
        rows = parsed.select("r.*", *sent, F.lit(batch_id).alias("_batch_id"))
        _floor_append(rows, out, batch_id)

    return write


def _floor_append(rows: Any, out: str, batch_id: int) -> None:
    """Append ``rows`` to the Delta table ``out`` exactly once, with Delta's documented idiom
    (``txnAppId``/``txnVersion``), the batch id in the commit's metadata as the pipelines'."""
    (
        rows.write.format("delta")
        .mode("append")
        .option("txnAppId", "bench-floor")
        .option("txnVersion", batch_id)
        .option("userMetadata", json.dumps({"lakehouse.batchId": str(batch_id)}))
        .save(out)
    )


#: The Debezium record the floor of an ingest parses: the row image and the send time.
_CDC_FLOOR_SCHEMA = (
    "payload struct<after: struct<currency: string, rate: string>, source: struct<ts_ms: bigint>>"
)


def _text(message: Any) -> str:
    value = message.value_bytes()
    assert value is not None
    return str(value.decode("utf-8"))


def latency(spec: dict[str, Any]) -> dict[str, Any]:
    """Batch duration and arrival-to-commit latency of one streaming pipeline at one trigger
    interval (``interval_s``, 0: as fast as possible) and input rate (``rows_per_s``), fed
    from files: ``pipeline`` ``"proctime"`` (the default) or ``"rowtime"`` (a temporal join
    against ``keys`` keys; row time releases a row once the probe watermark passes it, the
    build side idle) or ``"ingest"`` (Debezium updates of ``keys`` keys into a build table).
    With ``"peer": "floor"``, Spark's floor fed the same records (:func:`_floor_batch`)."""
    from bench.tables import join_options, write_build_table
    from lakehouse import delta
    from lakehouse.dimension import BuildSink, BuildTarget
    from lakehouse.dimension.layout import EVENT_TIME, INGESTED_AT, META_ROWS
    from lakehouse.join import TemporalJoin
    from lakehouse.sources import read_files_stream
    from lakehouse.testing.debezium import DebeziumTable

    root = Path(spec["root"])
    shutil.rmtree(root, ignore_errors=True)
    spark = _spark("latency", spec.get("spark_conf", {}))
    pipeline = spec.get("pipeline", "proctime")
    floor = spec.get("peer") == "floor"
    landing = root / "probe"
    landing.mkdir(parents=True)
    keys = spec["keys"]
    out = str(root / "out")
    cdc = DebeziumTable(
        "public", "rates", key="currency", start_ms=int(time.time() * 1000), step_ms=0
    )
    if pipeline == "ingest":
        codes = [f"C{i:07d}" for i in range(keys)]
        snapshot = cdc.snapshot([{"currency": c, "rate": "1.0"} for c in codes])
        (landing / "part-000000000-snapshot.jsonl").write_text(
            "\n".join(_text(m) for m in snapshot) + "\n"
        )
        handler: Any = (
            _floor_batch(out, _CDC_FLOOR_SCHEMA, "r.payload.source.ts_ms")
            if floor
            else BuildSink(
                [BuildTarget(out, key_columns=("currency",))],
                dead_letter_table=str(root / "dlq"),
                pipeline_id="bench-ingest",
            )
        )
    else:
        w = Workload(0, keys, spec.get("versions", 1))
        build = str(root / "build")
        write_build_table(spark, build, w)
        rowtime = pipeline == "rowtime"
        opts = join_options(
            root,
            build,
            mode=pipeline,
            watermark="bounded" if rowtime else "none",
            probe_time="ts" if rowtime else None,
            probe_schema="id bigint, k bigint, ts bigint, sent_ms bigint",
            build_idle_timeout_ms=1000 if rowtime else None,
        )
        assert opts.output_table == out
        handler = _floor_batch(out, opts.probe_schema) if floor else TemporalJoin(opts)
    stop = threading.Event()
    rate = spec["rows_per_s"]
    sent = [0]

    def lines(i: int, n: int, rng: Any, now_ms: int) -> list[str]:
        picked = rng.integers(0, keys, n).tolist()
        if pipeline == "ingest":
            cdc.now_ms = now_ms
            return [
                _text(cdc.update({"currency": f"C{k:07d}", "rate": f"{i + j}.5"}))
                for j, k in enumerate(picked)
            ]
        return [
            json.dumps({"id": i + j, "k": k, "ts": now_ms, "sent_ms": now_ms})
            for j, k in enumerate(picked)
        ]

    def feed() -> None:
        rng = np.random.default_rng(11)
        i = 0
        per_file = max(1, round(rate * FEED_EVERY_S))
        next_at = time.monotonic()
        while not stop.is_set():
            # the rename right after the write makes the file visible: the records' arrival
            tmp = landing / f".part-{i:09d}.jsonl"
            tmp.write_text("\n".join(lines(i, per_file, rng, int(time.time() * 1000))) + "\n")
            tmp.rename(landing / f"part-{i:09d}.jsonl")
            i += per_file
            sent[0] = i
            next_at += FEED_EVERY_S
            stop.wait(max(0.0, next_at - time.monotonic()))

    stream = read_files_stream(spark, str(landing), topic="probe")
    query = (
        stream.writeStream.foreachBatch(handler)
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(processingTime=f"{spec['interval_s']} seconds")
        .start()
    )
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    # warm-up: the first batches start Python workers and compile; then a steady stretch
    deadline = time.monotonic() + 600
    while len(query.recentProgress) < 3 and time.monotonic() < deadline:
        if not query.isActive:
            stop.set()
            raise RuntimeError(f"the {pipeline} query stopped: {query.exception()}")
        time.sleep(0.5)
    time.sleep(spec.get("warmup_s", 0))
    measured_from_ms = int(time.time() * 1000)
    time.sleep(spec["seconds"])
    stop.set()
    writer.join()
    query.processAllAvailable()
    measured = [p for p in query.recentProgress if _epoch_ms(p["timestamp"]) >= measured_from_ms]
    progress = [
        (p["numInputRows"], p["durationMs"].get("triggerExecution", 0) / 1000) for p in measured
    ]
    # where a batch's time goes, as Spark's progress splits it (median seconds per phase)
    busy = [p for p in measured if p["numInputRows"]]
    phases = {
        phase: float(np.median([p["durationMs"].get(phase, 0) / 1000 for p in busy]))
        for phase in sorted({k for p in busy for k in p["durationMs"]})
    }
    query.stop()
    commits = sorted(
        (c.timestamp_ms, int(c.metadata["lakehouse.batchId"]))
        for c in delta.history(out)
        if "lakehouse.batchId" in c.metadata and c.metadata.get(META_ROWS, "1") != "0"
    )
    if pipeline == "ingest" and not floor:
        # a build row's batch is the first data commit after the batch planned it
        rows = (
            delta.read(spark, out)
            .selectExpr(
                f"unix_millis({INGESTED_AT}) AS planned_ms", f"unix_millis({EVENT_TIME}) AS sent_ms"
            )
            .toPandas()
        )
        at = np.array([t for t, _ in commits], dtype=np.float64)
        planned = rows["planned_ms"].to_numpy(dtype=np.float64)
        commit_ms = at[np.minimum(np.searchsorted(at, planned), len(at) - 1)]
    else:
        by_batch = {b: t for t, b in commits}
        rows = delta.read(spark, out).select("_batch_id", "sent_ms").toPandas()
        commit_ms = rows["_batch_id"].map(by_batch).to_numpy(dtype=np.float64)
    spark.stop()
    sent_ms = rows["sent_ms"].to_numpy(dtype=np.float64)
    lat = ((commit_ms - sent_ms) / 1000.0)[sent_ms >= measured_from_ms]
    durations = [s for n, s in progress if n]
    return {
        "pipeline": pipeline,
        "peer": "floor" if floor else pipeline,
        "interval_s": spec["interval_s"],
        "rows_per_s": rate,
        "batch_median_s": float(np.median(durations)) if durations else None,
        "batch_p95_s": float(np.percentile(durations, 95)) if durations else None,
        "phases_s": phases,
        "sent": sent[0],
        "written": len(rows),
        "measured": len(lat),
        "p50_s": float(np.percentile(lat, 50)) if len(lat) else None,
        "p95_s": float(np.percentile(lat, 95)) if len(lat) else None,
        "max_s": float(lat.max()) if len(lat) else None,
        "batches": progress,
    }


def history(spec: dict[str, Any]) -> dict[str, Any]:
    """Cost per probe row of one row-time batch against 1, 10, 100 versions per key."""
    import pyarrow.compute as pc
    from pyspark.sql import functions as F

    from bench.measure import repeat
    from bench.tables import join_options, probe_batch_file, read_raw, write_build_table
    from bench.workload import build_table
    from lakehouse import delta
    from lakehouse.join import TemporalJoin
    from lakehouse.join.asof import PROBE_TIME_US, join_as_of
    from lakehouse.join.kernel import AsOfIndex

    root = Path(spec["root"])
    shutil.rmtree(root, ignore_errors=True)
    spark = _spark("history", spec.get("spark_conf", {}))
    rows = spec["probe_rows"]
    out = []
    for versions in spec["versions"]:
        w = Workload(rows, spec["keys"], versions)
        build = str(root / f"build-v{versions}")
        write_build_table(spark, build, w)
        raw_path = probe_batch_file(root / f"probe-v{versions}.parquet", w, 0, rows)
        b = build_table(w)
        parsed_probe = read_raw(spark, raw_path).select(
            F.from_json(F.col("value").cast("string"), "id bigint, k bigint, ts bigint").alias("r")
        )
        parsed_probe = parsed_probe.select("r.*").withColumn(PROBE_TIME_US, F.col("ts") * 1000)
        parsed_probe = parsed_probe.persist()
        parsed_probe.count()
        pk = np.asarray(parsed_probe.select("k").toPandas()["k"])
        pt = np.asarray(parsed_probe.select("ts").toPandas()["ts"])

        # the build side is indexed once per build version; each batch only probes it
        t0 = time.perf_counter()
        index = AsOfIndex.build(
            build_keys=[b["k"]],
            build_time=b["t"],
            build_seq=b["_seq"],
            build_is_delete=pc.equal(b["_op"], "d"),
        )
        index_s = time.perf_counter() - t0

        def kernel(index: Any = index, pk: Any = pk, pt: Any = pt) -> int:
            return int((index.match(probe_keys=[pk], probe_time=pt) >= 0).sum())

        def spark_path(build: str = build, probe: Any = parsed_probe) -> int:
            joined = join_as_of(
                probe,
                delta.read(spark, build),
                probe_key=["k"],
                build_key=["k"],
                value_columns=["v"],
                output_names=["id", "k", "ts", "v", "_event_time", "_matched"],
                latest=False,
                num_buckets=int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
            )
            return int(joined.filter("_matched").count())

        op_root = root / f"op-v{versions}"

        def operator(build: str = build, raw_path: str = raw_path, op_root: Path = op_root) -> int:
            # a fresh pipeline each run: one batch of `rows` rows, all but the latest released
            shutil.rmtree(op_root, ignore_errors=True)
            opts = join_options(op_root, build)
            report = TemporalJoin(opts).process(read_raw(spark, raw_path), 0)
            return report.matched

        runs = spec.get("runs", 3)
        k_runs = repeat(kernel, runs=runs)
        s_runs = repeat(spark_path, runs=runs)
        o_runs = repeat(operator, runs=runs)
        parsed_probe.unpersist()
        out.append(
            {
                "versions": versions,
                "build_rows": w.build_rows,
                "probe_rows": rows,
                "kernel_s": k_runs.wall_s,
                "kernel_index_s": index_s,
                "spark_s": s_runs.wall_s,
                "operator_s": o_runs.wall_s,
                "matched": [k_runs.result, s_runs.result, o_runs.result],
            }
        )
    spark.stop()
    return {"keys": spec["keys"], "probe_rows": rows, "points": out}


def backlog(spec: dict[str, Any]) -> dict[str, Any]:
    """Per-batch cost while the pending backlog grows by half a batch per batch."""
    from bench.tables import join_options, probe_batch_file, read_raw, write_build_table
    from lakehouse.join import TemporalJoin

    root = Path(spec["root"])
    shutil.rmtree(root, ignore_errors=True)
    spark = _spark("backlog", spec.get("spark_conf", {}))
    w = Workload(0, spec["keys"], spec["versions"])
    build = str(root / "build")
    half = EPOCH0_MS + HORIZON_MS // 2
    write_build_table(spark, build, w, watermark_ms=half)
    op = TemporalJoin(join_options(root, build))
    rows = spec["batch_rows"]
    points = []
    for b in range(spec["batches"]):
        path = probe_batch_file(
            root / "batches" / f"b{b:04d}.parquet", w, b, rows, first_id=b * rows
        )
        raw = read_raw(spark, path)
        raw.count()
        cpu0, _ = tree_usage(os.getpid())
        t0 = time.perf_counter()
        report = op.process(raw, b)
        points.append(
            {
                "batch": b,
                "seconds": time.perf_counter() - t0,
                "cpu_s": tree_usage(os.getpid())[0] - cpu0,
                "arrived": report.arrived,
                "released": report.released,
                "pending_after": report.pending,
            }
        )
    spark.stop()
    return {"batch_rows": rows, "keys": w.keys, "versions": w.versions, "points": points}


def cost(spec: dict[str, Any]) -> dict[str, Any]:
    """Spark jobs and Delta log reads of small steady-state micro-batches (the figures the
    engine issue starts from): an ingest batch of 3 CDC events, a row-time and a
    processing-time join batch of 6 probe rows, each repeated, on real tables on disk."""
    from datetime import UTC, datetime

    from pyspark.sql.types import StructType

    from lakehouse.dimension import BuildSink, BuildTarget
    from lakehouse.join import JoinOptions, TemporalJoin
    from lakehouse.sources.schema import RAW_SCHEMA_DDL
    from lakehouse.testing.debezium import DebeziumTable
    from tests.batch_cost import BatchCost

    root = Path(spec["root"])
    shutil.rmtree(root, ignore_errors=True)
    spark = _spark("cost", spec.get("spark_conf", {}))
    batches = spec.get("batches", 6)
    schema = StructType.fromDDL(RAW_SCHEMA_DDL)
    offset = [0]

    def raw(values: list[tuple[bytes | None, bytes | None]], topic: str) -> Any:
        now = datetime.now(UTC)
        rows = [(k, v, topic, 0, offset[0] + i, now, 0) for i, (k, v) in enumerate(values)]
        offset[0] += len(values)
        return spark.createDataFrame(rows, schema)

    table = DebeziumTable("public", "rates", key="currency", start_ms=EPOCH0_MS, step_ms=10)
    codes = [f"C{i:02d}" for i in range(20)]
    sink = BuildSink(
        [BuildTarget(str(root / "rates"), key_columns=("currency",))],
        dead_letter_table=str(root / "dlq"),
        pipeline_id="cost-ingest",
    )

    def events(messages: list[Any]) -> list[tuple[bytes | None, bytes | None]]:
        return [(m.key_bytes(), m.value_bytes()) for m in messages]

    out: dict[str, list[dict[str, Any]]] = {"ingest": [], "rowtime": [], "proctime": []}
    snapshot = table.snapshot([{"currency": c, "rate": "1.0"} for c in codes])
    sink.process(raw(events(snapshot), "dbserver1.public.rates"), 0)
    for b in range(1, batches + 1):
        changes = [
            table.update({"currency": codes[(b * 3 + i) % 20], "rate": f"{b}.{i}"})
            for i in range(3)
        ]
        t0 = time.perf_counter()
        with BatchCost(spark) as c:
            sink.process(raw(events(changes), "dbserver1.public.rates"), b)
        out["ingest"].append(_cost_point(b, c, time.perf_counter() - t0))
    for mode in ("rowtime", "proctime"):
        opts = JoinOptions(
            build_table=str(root / "rates"),
            output_table=str(root / f"out-{mode}"),
            pending_table=str(root / f"pending-{mode}"),
            dead_letter_table=str(root / f"dlq-{mode}"),
            pipeline_id=f"cost-{mode}",
            probe_schema="id bigint, currency string, ts bigint",
            probe_key=("currency",),
            probe_time="ts" if mode == "rowtime" else None,
            mode=mode,
            watermark="bounded" if mode == "rowtime" else "none",
            join_type="left",
        )
        op = TemporalJoin(opts)
        t_ms = EPOCH0_MS
        for b in range(batches + 1):
            probes = []
            for i in range(6):
                t_ms += 1
                row = {"id": b * 6 + i, "currency": codes[(b + i) % 20], "ts": t_ms}
                probes.append((None, json.dumps(row).encode()))
            t0 = time.perf_counter()
            with BatchCost(spark) as c:
                op.process(raw(probes, "orders"), b)
            if b:  # batch 0 creates the tables
                out[mode].append(_cost_point(b, c, time.perf_counter() - t0))
    spark.stop()
    return out


def tables(spec: dict[str, Any]) -> dict[str, Any]:
    """What one ingest batch costs per configured table: ``tables`` build tables fed by one
    connector (one ``[[ingest.tables]]`` each), 400 CDC events per batch, spread over every
    table (``touch: "all"``) or all of one table's (``touch: "one"``); after each table's
    snapshot and the batch after it, ``batches`` steady batches are timed and counted.
    ``parallelism``: the sink's ``table_parallelism`` (default 4). ``topics``: ``"one"`` (every
    table's records in one topic, the batch in Spark's default two partitions) or
    ``"per_table"`` (Debezium's topic per table, one input partition each, as Spark's Kafka
    source plans a batch: one per topic-partition it read). ``decode_tasks``: the sink's
    ``decode_tasks`` (default: twice the cores). With ``"peer": "floor"``, Spark's floor of the
    same batches (:func:`_floor_tables`) in place of the sink. Each batch's records are held in
    the JVM (a local checkpoint) before its clock starts: what is timed is the sink's work from
    its input partitions, not a source's fetch."""
    from lakehouse.dimension import BuildSink, BuildTarget
    from lakehouse.testing.debezium import DebeziumTable
    from tests.batch_cost import BatchCost
    from tests.helpers import connector_records

    root = Path(spec["root"])
    shutil.rmtree(root, ignore_errors=True)
    spark = _spark("tables", spec.get("spark_conf", {}))
    names = [f"t{i:03d}" for i in range(spec["tables"])]
    per_batch = spec.get("events", 400)
    topic = None if spec.get("topics", "one") == "per_table" else "dbserver1"
    offsets: dict[str, int] = {}

    def raw(messages: list[Any]) -> Any:
        # held in the JVM before the batch's clock starts, each topic a partition of its own
        # as the Kafka source reads a connector's topics: a frame of a Python RDD converts
        # each of its partitions in a Python worker (about 30 ms a partition here), a cost
        # of this harness that no source of the product has
        return connector_records(spark, messages, offsets, topic=topic).localCheckpoint()

    debezium = {
        n: DebeziumTable("public", n, key="currency", start_ms=EPOCH0_MS, step_ms=10) for n in names
    }
    sink = BuildSink(
        [
            BuildTarget(str(root / n), key_columns=("currency",), source_table=f"public.{n}")
            for n in names
        ],
        dead_letter_table=str(root / "dlq"),
        pipeline_id="bench-tables",
        table_parallelism=spec.get("parallelism", 4),
        decode_tasks=spec.get("decode_tasks"),
    )
    process = sink.process
    if spec.get("peer") == "floor":
        process = _floor_tables(root, names, sink.table_parallelism)
    codes = [f"C{i:02d}" for i in range(20)]
    snapshot = [
        m for t in debezium.values() for m in t.snapshot([{"currency": "C00", "rate": "1"}])
    ]
    process(raw(snapshot), 0)
    touched = names if spec.get("touch", "all") == "all" else names[:1]
    out = []
    for b in range(1, spec.get("batches", 2) + 2):
        changes = [
            debezium[touched[i % len(touched)]].update(
                {"currency": codes[i % 20], "rate": f"{b}.{i}"}
            )
            for i in range(per_batch)
        ]
        batch = raw(changes)
        t0 = time.perf_counter()
        with BatchCost(spark) as c:
            process(batch, b)
        if b > 1:  # batch 1 records the end of each table's snapshot signal
            out.append(_cost_point(b, c, time.perf_counter() - t0))
    spark.stop()
    return {
        "peer": spec.get("peer", "lakehouse"),
        "tables": len(names),
        "touch": spec.get("touch", "all"),
        "parallelism": sink.table_parallelism,
        "topics": "one" if topic else "per_table",
        "batches": out,
    }


def _floor_tables(root: Path, names: list[str], workers: int) -> Any:
    """Spark's floor of a batch over many tables (the peer of ``tables``): the records parsed
    with ``from_json`` once (cached), then each table's rows appended exactly once with Delta's
    documented idiom (``txnAppId``/``txnVersion``), ``workers`` tables at a time as the sink's
    ``table_parallelism``; a table the batch holds no record of is not written."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql import functions as F

    schema = (
        "payload struct<after: struct<currency: string, rate: string>, "
        "source: struct<ts_ms: bigint, table: string>>"
    )

    def write(df: Any, batch_id: int) -> None:
        parsed = df.select(F.from_json(F.col("value").cast("string"), schema).alias("r")).select(
            "r.payload.after.*",
            F.col("r.payload.source.table").alias("_table"),
            F.lit(batch_id).alias("_batch_id"),
        )
        parsed = parsed.persist()
        try:
            present = {r["_table"] for r in parsed.select("_table").distinct().collect()}

            def one(name: str) -> None:
                mine = parsed.filter(F.col("_table") == name).drop("_table")
                _floor_append(mine, str(root / name), batch_id)

            with ThreadPoolExecutor(max(workers, 1)) as pool:
                list(pool.map(one, [n for n in names if n in present]))
        finally:
            parsed.unpersist()

    return write


def _cost_point(batch: int, c: Any, seconds: float) -> dict[str, Any]:
    return {
        "batch": batch,
        "jobs": c.jobs,
        "delta_jobs": c.delta_jobs,
        "log_reads": c.log_reads,
        "compiles": c.compiles,
        "py4j_calls": c.py4j_calls,
        "seconds": seconds,
        "descriptions": c.descriptions,
    }


def commit_reads(spec: dict[str, Any]) -> dict[str, Any]:
    """What a batch's look at a table's recent commits costs: ``limit`` commits of a table of
    ``versions`` versions, read from storage (``cold``: the process has not parsed them) and
    again from a new snapshot (``kept``), median of ``repeats``."""
    import statistics

    from lakehouse import delta
    from lakehouse.delta import log as delta_log

    root = Path(spec["root"])
    shutil.rmtree(root, ignore_errors=True)
    spark = _spark("commits", spec.get("spark_conf", {}))
    uri = str(root / "t")
    for i in range(spec.get("versions", 70)):
        delta.append(spark.range(1), uri, txn=("bench", i), metadata={"lakehouse.batchId": i})

    def look() -> float:
        t0 = time.perf_counter()
        list(delta.snapshot(uri).commits(spec.get("limit", 64)))
        return time.perf_counter() - t0

    cold, kept = [], []
    for _ in range(spec.get("repeats", 5)):
        delta_log._PARSED_COMMITS.clear()
        cold.append(look())
        kept.append(look())
    spark.stop()
    return {"cold_s": statistics.median(cold), "kept_s": statistics.median(kept)}


SCENARIOS = {
    "commit_reads": commit_reads,
    "ingest": ingest,
    "latency": latency,
    "history": history,
    "backlog": backlog,
    "cost": cost,
    "tables": tables,
}


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    emit({"scenario": spec["scenario"], **SCENARIOS[spec["scenario"]](spec)})
