"""The row-time join on a Spark standalone cluster against ``local[2]``, on the same data.

A master and two workers (one core, one executor of 1 GB each; :mod:`lakehouse.testing.
spark_cluster`) run on this machine beside the test broker. The demo's data (``orders``
orders, ``changes`` rate changes) is produced to Kafka and ingested once; then the row-time
join runs to the end of its input (``lakehouse join --until-complete --build-complete``, a new
checkpoint and output each time) as a user runs it, alternating ``local[2]`` and the cluster,
``repeats`` times each: wall-clock seconds of the whole command (driver and executor start
included) and of its batches (the ``join batch`` lines). Both runs see the same machine:
two cores, which the cluster's two executors and their Python workers share with the driver.

Usage: ``python -m bench.cluster '{"orders": 20000, "repeats": 2}'`` (prints a
``BENCH-RESULT`` line).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.measure import emit, timed_lakehouse


def _config(tmp: Path, spark: str, bootstrap: str, name: str) -> Path:
    from lakehouse.demo.data import ORDER_SCHEMA

    cfg = tmp / f"{name}.toml"
    cfg.write_text(f"""{spark}
[kafka]
bootstrap_servers = "{bootstrap}"

[ingest]
pipeline_id = "bench-ingest"
source = "kafka"
topics = ["bench.rates"]
trigger = "available-now"
checkpoint = "{tmp}/state/ingest"
dead_letter_table = "{tmp}/tables/rates_dead_letter"
[[ingest.tables]]
table = "{tmp}/tables/rates"
key = ["currency"]

[join]
pipeline_id = "bench-{name}"
source = "kafka"
topics = ["bench.orders"]
trigger = "available-now"
probe_schema = "{ORDER_SCHEMA}"
probe_key = ["currency"]
probe_time = "order_ts"
probe_id = "order_id"
mode = "rowtime"
join_type = "left"
watermark = "bounded"
out_of_orderness_ms = 5000
build_table = "{tmp}/tables/rates"
output_table = "{tmp}/tables/{name}_out"
pending_table = "{tmp}/tables/{name}_pending"
dead_letter_table = "{tmp}/tables/{name}_dead_letter"
checkpoint = "{tmp}/state/{name}"
""")
    return cfg


def _batch_seconds(stderr: str) -> float:
    """The sum of the ``join batch ...: ..., N.Ns`` durations the command printed."""
    return round(
        sum(float(s) for s in re.findall(r"join batch \d+:.*?([\d.]+)s\s*$", stderr, re.M)), 2
    )


def main(spec: dict[str, Any]) -> dict[str, Any]:
    """Produce, ingest, then time the join on ``local[2]`` and on the cluster alternately."""
    import pyspark

    from lakehouse.demo.data import make_demo_data
    from lakehouse.sources.kafka_admin import create_topic, produce
    from lakehouse.testing.broker import kafka_broker
    from tests.spark_cluster import spark_cluster

    orders, changes = int(spec.get("orders", 20_000)), int(spec.get("changes", 300))
    repeats = int(spec.get("repeats", 2))
    result: dict[str, Any] = {"orders": orders, "changes": changes, "repeats": repeats}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as name:
        tmp = Path(name)
        with (
            kafka_broker(tmp / "kafka") as broker,
            spark_cluster(
                tmp / "cluster", spark_home=Path(pyspark.__file__).parent, workers=2
            ) as cluster,
        ):
            demo = make_demo_data(orders=orders, changes=changes)
            create_topic(broker.bootstrap, "bench.rates", demo.cdc_partitions)
            create_topic(broker.bootstrap, "bench.orders", demo.order_partitions)
            produce(broker.bootstrap, "bench.rates", [r for w in demo.waves for r in w.cdc])
            produce(broker.bootstrap, "bench.orders", [r for w in demo.waves for r in w.orders])
            local = (
                '[spark]\nmaster = "local[2]"\n[spark.conf]\n"spark.sql.shuffle.partitions" = "4"\n'
            )
            masters = {"local[2]": local, "cluster": cluster.job_toml()}
            timed_lakehouse("ingest", "-c", str(_config(tmp, local, broker.bootstrap, "ingest")))
            times: dict[str, list[tuple[float, float]]] = {m: [] for m in masters}
            for run in range(repeats):
                for label, master in masters.items():
                    run_name = f"{'cluster' if label == 'cluster' else 'local'}{run}"
                    cfg = _config(tmp, master, broker.bootstrap, run_name)
                    seconds, stderr = timed_lakehouse(
                        "join", "-c", str(cfg), "--until-complete", "--build-complete"
                    )
                    times[label].append((round(seconds, 2), _batch_seconds(stderr)))
    for label, runs in times.items():
        result[label] = {
            "command_seconds": [r[0] for r in runs],
            "batch_seconds": [r[1] for r in runs],
            "command_median": round(statistics.median(r[0] for r in runs), 2),
            "batch_median": round(statistics.median(r[1] for r in runs), 2),
        }
    result["cluster_over_local"] = {
        "command": round(
            result["cluster"]["command_median"] / result["local[2]"]["command_median"], 2
        ),
        "batches": round(result["cluster"]["batch_median"] / result["local[2]"]["batch_median"], 2),
    }
    return result


if __name__ == "__main__":
    emit(main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
