"""Measurement 1: the row-time as-of join, the project against its peers, on the same parquet.

Each engine answers the same question on the same two files (:mod:`bench.workload`): a LEFT
as-of join of every probe row with the latest build row of its key whose start is ``<=`` the
probe's time, then the number of matched rows and the sum of the joined ``v``. The timed
operation covers reading both files (the columns needed), the join and the aggregate, so
the engines that sort first (pandas, Polars) pay for their sort, and every engine pays for
its own parquet reader.

Engines (``ENGINES``):

``kernel``
    The project's pure kernel, :func:`lakehouse.join.kernel.asof_match`, in this process on
    the Arrow columns pyarrow reads, with ``threads=2`` (the two cores DuckDB gets).
    Comparable to the in-process peers.
``kernel-1t``
    The same with one thread (as each Spark task runs it).
``spark-project``
    The product's path: :func:`lakehouse.join.asof.join_as_of` on DataFrames Spark reads
    from the files, ``local[2]``. Comparable to the Spark peers. The target applies here.
    The build is a plain parquet scan, so this is the narrow path (an Arrow UDF probing an
    index each Python worker builds once from the build file and keeps between runs).
``spark-project-cold``
    The narrow path with ``spark.python.worker.reuse=false``: every task starts a new Python
    worker, which reads the build and builds its index again. The cost of the first batch
    after the build table moves to a new version (the worst case; with reuse only the new
    files are read).
``spark-project-shuffle``
    The same call forced onto the shuffle path (``path="shuffle"``: both sides hashed into
    buckets, ``cogroup().applyInArrow``), the fallback for builds the narrow path does not
    take.
``duckdb``
    ``ASOF LEFT JOIN`` over ``read_parquet``, ``SET threads = 2``.
``polars``
    ``join_asof(by="k", strategy="backward")`` after sorting both sides by time
    (``POLARS_MAX_THREADS=2``).
``pandas``
    ``merge_asof(by="k", direction="backward")`` after sorting both sides by time.
``spark-window``
    Plain Spark SQL: the union of both sides, ``last(v, ignorenulls)`` over the key ordered
    by time (build rows first at equal time), ``local[2]``.
``spark-floor``
    Not a join: the rows the product path moves (probe: id, key, time; build: key, value,
    seq, delete flag, start), hashed into the same buckets and handed through
    ``cogroup().applyInArrow`` to a function that only counts them. The floor of any design
    that joins in Python workers behind a Spark shuffle, on this machine.
``spark-asof``
    Spark 4.3's native ``LEFT ASOF JOIN ... MATCH_CONDITION (p.t >= b.t)``
    (``spark.sql.join.asofJoin.enabled=true``, a new feature, off by default).

Correctness: before timing, the engines marked ``SAMPLED`` also join a seeded sample of probe
ids row by row; the runner compares those rows, and every engine's (matched, sum), with
DuckDB's, and a wrong engine is reported as such, not ranked.

Run as ``python -m bench.asof_engines '<json spec>'`` by :func:`bench.measure.run_isolated`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from bench.measure import emit, repeat, runs_dict

ENGINES = (
    "kernel",
    "kernel-1t",
    "duckdb",
    "polars",
    "pandas",
    "spark-project",
    "spark-project-cold",
    "spark-project-shuffle",
    "spark-window",
    "spark-asof",
    "spark-floor",
)
#: Engines that also return per-row results for the sample check.
SAMPLED = frozenset(
    {
        "kernel",
        "kernel-1t",
        "duckdb",
        "spark-project",
        "spark-project-cold",
        "spark-project-shuffle",
        "polars",
    }
)
SPARK_ENGINES = frozenset(e for e in ENGINES if e.startswith("spark"))

Result = tuple[int, int]  # (matched rows, sum of joined v)
Sample = dict[int, int | None]  # probe id -> joined v


def _kernel_engine(build: str, probe: str, *, threads: int) -> tuple[Any, Any]:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from lakehouse.join.kernel import asof_match

    def join(ids: list[int] | None) -> tuple[pa.Table, pa.Array]:
        b = pq.read_table(build, columns=["k", "t", "v", "_seq", "_op"])
        p = pq.read_table(probe, columns=["id", "k", "t"])
        if ids is not None:
            p = p.filter(pc.is_in(p["id"], pa.array(ids, pa.int64())))
        idx = asof_match(
            probe_keys=[p["k"]],
            probe_time=p["t"],
            build_keys=[b["k"]],
            build_time=b["t"],
            build_seq=b["_seq"],
            build_is_delete=pc.equal(b["_op"], "d"),
            threads=threads,
        )
        v = b["v"].take(pa.array(idx, mask=idx < 0, type=pa.int64()))
        return p, v

    def run() -> Result:
        _, v = join(None)
        return int(len(v) - v.null_count), int(pc.sum(v).as_py() or 0)

    def sample(ids: list[int]) -> Sample:
        p, v = join(ids)
        return dict(zip(p["id"].to_pylist(), v.to_pylist(), strict=True))

    return run, sample


def _duckdb_engine(build: str, probe: str) -> tuple[Any, Any]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")

    def run() -> Result:
        row = con.execute(
            f"SELECT count(b.v), sum(b.v) FROM read_parquet('{probe}') p "
            f"ASOF LEFT JOIN read_parquet('{build}') b ON p.k = b.k AND p.t >= b.t"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1] or 0)

    def sample(ids: list[int]) -> Sample:
        id_list = ",".join(str(i) for i in ids)
        rows = con.execute(
            f"SELECT p.id, b.v FROM (SELECT * FROM read_parquet('{probe}') "
            f"WHERE id IN ({id_list})) p "
            f"ASOF LEFT JOIN read_parquet('{build}') b ON p.k = b.k AND p.t >= b.t"
        ).fetchall()
        return {int(i): (None if v is None else int(v)) for i, v in rows}

    return run, sample


def _polars_engine(build: str, probe: str) -> tuple[Any, Any]:
    import polars as pl

    def join(ids: list[int] | None) -> Any:
        b = pl.read_parquet(build, columns=["k", "t", "v"]).sort("t")
        p = pl.read_parquet(probe, columns=["id", "k", "t"])
        if ids is not None:
            p = p.filter(pl.col("id").is_in(ids))
        return p.sort("t").join_asof(b, on="t", by="k", strategy="backward")

    def run() -> Result:
        row = join(None).select(pl.col("v").count().alias("n"), pl.col("v").sum().alias("s")).row(0)
        return int(row[0]), int(row[1] or 0)

    def sample(ids: list[int]) -> Sample:
        j = join(ids)
        return dict(zip(j["id"].to_list(), j["v"].to_list(), strict=True))

    return run, sample


def _pandas_engine(build: str, probe: str) -> tuple[Any, Any]:
    import pandas as pd

    def run() -> Result:
        b = pd.read_parquet(build, columns=["k", "t", "v"]).sort_values("t")
        p = pd.read_parquet(probe, columns=["id", "k", "t"]).sort_values("t")
        j = pd.merge_asof(p, b, on="t", by="k", direction="backward")
        return int(j["v"].count()), int(j["v"].sum())

    return run, None


def _spark_engine(name: str, build: str, probe: str, spark_conf: dict[str, str]) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from lakehouse.spark import get_spark

    conf = dict(spark_conf)
    if name == "spark-asof":
        conf["spark.sql.join.asofJoin.enabled"] = "true"
    if name == "spark-project-cold":
        conf["spark.python.worker.reuse"] = "false"
    spark = get_spark(app_name=f"bench-{name}", master="local[2]", conf=conf)
    buckets = int(spark.conf.get("spark.sql.shuffle.partitions") or 4)

    def project(ids: list[int] | None) -> Any:
        kw: dict[str, Any] = {}
        from lakehouse.join.asof import PROBE_TIME_US, join_as_of

        kw["path"] = "shuffle" if name == "spark-project-shuffle" else "narrow"
        p = spark.read.parquet(probe)
        if ids is not None:
            p = p.filter(F.col("id").isin(ids))
        return join_as_of(
            p.withColumn(PROBE_TIME_US, F.col("t") * 1000),
            spark.read.parquet(build),
            probe_key=["k"],
            build_key=["k"],
            value_columns=["v"],
            output_names=["id", "k", "t", "v", "_event_time", "_matched"],
            latest=False,
            num_buckets=buckets,
            **kw,
        )

    def window() -> Any:
        b = spark.read.parquet(build).select("k", "t", "v", F.lit(0).alias("_side"))
        p = spark.read.parquet(probe).select(
            "k", "t", F.lit(None).cast("bigint").alias("v"), F.lit(1).alias("_side")
        )
        w = (
            Window.partitionBy("k")
            .orderBy("t", "_side")
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        both = b.unionByName(p).withColumn("m", F.last("v", ignorenulls=True).over(w))
        return both.filter("_side = 1").select(F.col("m").alias("v"))

    def native() -> Any:
        spark.read.parquet(build).createOrReplaceTempView("bench_b")
        spark.read.parquet(probe).createOrReplaceTempView("bench_p")
        return spark.sql(
            "SELECT b.v FROM bench_p p LEFT ASOF JOIN bench_b b "
            "MATCH_CONDITION (p.t >= b.t) ON p.k = b.k"
        )

    def floor() -> Any:
        import pyarrow as pa

        def count(probe: pa.Table, build: pa.Table) -> pa.Table:
            return pa.table({"v": pa.array([probe.num_rows], pa.int64())})

        bucket = F.pmod(F.xxhash64("k"), F.lit(buckets)).alias("_bucket")
        p = spark.read.parquet(probe).select("id", "k", (F.col("t") * 1000).alias("t"), bucket)
        b = spark.read.parquet(build).select(
            "k",
            "v",
            "_seq",
            (F.col("_op") == "d").alias("_d"),
            F.unix_micros("_event_time").alias("_t"),
            bucket,
        )
        grouped = p.groupBy("_bucket").cogroup(b.groupBy("_bucket"))
        return grouped.applyInArrow(count, "v bigint")

    def run() -> Result:
        if name.startswith("spark-project"):
            df = project(None)
        elif name == "spark-window":
            df = window()
        elif name == "spark-floor":
            row = floor().agg(F.sum("v")).first()
            assert row is not None
            return int(row[0]), -1  # rows moved, not a join result
        else:
            df = native()
        row = df.agg(F.count("v"), F.sum("v")).first()
        assert row is not None
        return int(row[0]), int(row[1] or 0)

    def sample(ids: list[int]) -> Sample:
        return {int(r["id"]): r["v"] for r in project(ids).select("id", "v").collect()}

    return run, (sample if name.startswith("spark-project") else None), spark


def main(spec: dict[str, Any]) -> None:
    """Run one engine: the sample check, then a warm-up and the timed runs; emit the result."""
    name = spec["engine"]
    build, probe = spec["build"], spec["probe"]
    spark = None
    run: Callable[[], Result]
    sample: Callable[[list[int]], Sample] | None
    if name in ("kernel", "kernel-1t"):
        run, sample = _kernel_engine(build, probe, threads=2 if name == "kernel" else 1)
    elif name == "duckdb":
        run, sample = _duckdb_engine(build, probe)
    elif name == "polars":
        run, sample = _polars_engine(build, probe)
    elif name == "pandas":
        run, sample = _pandas_engine(build, probe)
    elif name in SPARK_ENGINES:
        run, sample, spark = _spark_engine(name, build, probe, spec.get("spark_conf", {}))
    else:
        raise SystemExit(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    rows = None
    if sample is not None and spec.get("sample_ids"):
        rows = {str(k): v for k, v in sample(spec["sample_ids"]).items()}
    runs = repeat(run, runs=spec["runs"], warmup=spec.get("warmup", 1))
    emit({"engine": name, "runs": runs_dict(runs), "result": list(runs.result), "sample": rows})
    if spark is not None:
        spark.stop()


if __name__ == "__main__":
    os.environ.setdefault("POLARS_MAX_THREADS", "2")
    main(json.loads(sys.argv[1]))
