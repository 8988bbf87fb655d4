"""Measurement 2: the processing-time join against Spark's stream-static join.

The usual Databricks approach to "join each event with the current dimension row" is a
stream-static join: every micro-batch joins the static Delta table as it is at that moment.
Both sides here process the same raw micro-batches (JSON probe records, :mod:`bench.tables`)
against the same build data, one Spark session each (``local[2]``):

``product`` (``micro-batch``)
    :class:`lakehouse.join.TemporalJoin` in processing-time mode (``watermark = none``,
    left join): parse, release, join each row with its key's latest version, append the
    output and overwrite the (empty) pending table, each with an idempotent Delta
    transaction.
``peer`` (``micro-batch``)
    A ``foreachBatch`` function: parse the same JSON, left-join the static table read at its
    latest version, append the output with an idempotent Delta transaction.
``product`` / ``peer`` (``join``)
    The join alone, without parsing policies or writes: :func:`lakehouse.join.asof.
    join_as_of` with ``latest=True`` against the build table, versus ``DataFrame.join``
    against the static table, each followed by a count and a sum.

The static table: with one version per key it is the build table itself (literally the same
table); with more versions, a stream-static join against the version log would multiply
rows, so the peer reads the table a ``MERGE``-maintained dimension holds (each key's latest
version, written once before the run and not timed: in that architecture the ``MERGE`` runs
on the ingest side).

The first batch of each side is the warm-up (for the project it also builds the latest-version
snapshot, see :mod:`lakehouse.join.asof`; its time is reported as ``cold_s``); throughput is
rows per second of the remaining batches. Correctness: after the run, both output tables
must hold the same matched count and sum of joined values.

Run as ``python -m bench.proctime '<json spec>'`` by :func:`bench.measure.run_isolated`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench.measure import emit, tree_usage


def main(spec: dict[str, Any]) -> None:
    """Run one side over the batches; emit per-batch wall and CPU times and the checksum."""
    from pyspark.sql import functions as F

    from bench.tables import PROBE_SCHEMA, join_options, read_raw
    from lakehouse import delta
    from lakehouse.join import TemporalJoin
    from lakehouse.join.asof import join_as_of
    from lakehouse.spark import get_spark
    from tests.batch_cost import BatchCost

    side, variant = spec["side"], spec["variant"]
    root = Path(spec["root"])
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    spark = get_spark(
        app_name=f"bench-proctime-{side}", master="local[2]", conf=spec.get("spark_conf", {})
    )
    opts = join_options(
        root, spec["build_table"], mode="proctime", watermark="none", probe_time=None
    )
    operator = TemporalJoin(opts)
    out_uri = str(root / "out")
    checks: list[tuple[int, int]] = []

    def parsed(raw: Any) -> Any:
        r = F.from_json(F.col("value").cast("string"), PROBE_SCHEMA)
        return raw.select(r.alias("r")).select("r.*")

    def peer_batch(raw: Any, batch_id: int) -> None:
        static = delta.read(spark, spec["static_uri"]).select("k", "v", "_event_time")
        delta.append(parsed(raw).join(static, "k", "left"), out_uri, txn=("bench-peer", batch_id))

    def join_only(raw: Any) -> None:
        probe = parsed(raw)
        if side == "product":
            snap = delta.snapshot(spec["build_table"], spark=spark)
            joined = join_as_of(
                probe,
                delta.read_files(spark, snap, version=snap.version),
                probe_key=["k"],
                build_key=["k"],
                value_columns=["v"],
                output_names=["id", "k", "ts", "v", "_event_time", "_matched"],
                latest=True,
                num_buckets=int(spark.conf.get("spark.sql.shuffle.partitions") or 4),
            )
        else:
            static = delta.read(spark, spec["static_uri"]).select("k", "v", "_event_time")
            joined = probe.join(static, "k", "left")
        row = joined.agg(F.count("v"), F.sum("v")).first()
        checks.append((int(row[0]), int(row[1] or 0)))

    walls: list[float] = []
    cpus: list[float] = []
    rows: list[int] = []
    costs: list[dict[str, Any]] = []
    me = os.getpid()
    for batch_id, path in enumerate(spec["batches"]):
        raw = read_raw(spark, path)
        n = raw.count()
        cpu0, _ = tree_usage(me)
        t0 = time.perf_counter()
        with BatchCost(spark) as cost:
            if variant == "join":
                join_only(raw)
            elif side == "product":
                operator.process(raw, batch_id)
            else:
                peer_batch(raw, batch_id)
        walls.append(time.perf_counter() - t0)
        costs.append(
            {"jobs": cost.jobs, "delta_jobs": cost.delta_jobs, "log_reads": cost.log_reads}
        )
        cpus.append(tree_usage(me)[0] - cpu0)
        rows.append(n)

    if variant == "join":
        matched = sum(c[0] for c in checks[1:])
        checksum = sum(c[1] for c in checks[1:])
    else:
        # batch 0 is the warm-up; ids of later batches start after its rows
        out = delta.read(spark, out_uri).filter(F.col("id") >= rows[0])
        row = out.agg(F.count("v"), F.sum("v")).first()
        matched, checksum = int(row[0]), int(row[1] or 0)
    emit(
        {
            "side": side,
            "variant": variant,
            "rows": rows,
            "wall_s": walls,
            "cpu_s": cpus,
            "cost": costs,
            "result": [matched, checksum],
        }
    )
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
