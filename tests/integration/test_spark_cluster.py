"""On a real Spark standalone cluster: a master and two workers, each a JVM of its own.

The jobs run as users run them on a cluster: the ``lakehouse`` command of the wheel installed
in a fresh virtual environment (tests/wheel_env.py) is the driver, ``spark.master`` is the
cluster, and the executors run in the workers' JVMs with Python workers that import lakehouse
from that wheel, reading Kafka (the test broker) and the tables on the shared disk. The CDC
ingest, the row-time join run to completion, the processing-time join and the quality report
all run there. One worker (its JVM, its executor and their Python workers) is SIGKILLed while
the row-time join's batch runs on it: Spark runs its tasks again on the other worker, and the
output is exactly what the reference join says an uninterrupted run gives.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from helpers import assert_rows_equal
from reference import ProbeRow, Version, rowtime_join
from spark_cluster import spark_cluster

from lakehouse import delta
from lakehouse.demo.data import ORDER_SCHEMA, make_demo_data
from lakehouse.sources.kafka_admin import create_topic, produce

# extended: a standalone master and two workers, a worker killed and replaced (about nine minutes)
pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.spark, pytest.mark.extended]

ORDERS = 1200


def _config(tmp: Path, spark: str, bootstrap: str) -> Path:
    cfg = tmp / "cluster.toml"
    cfg.write_text(f"""{spark}
[kafka]
bootstrap_servers = "{bootstrap}"

[ingest]
pipeline_id = "cluster-ingest"
source = "kafka"
topics = ["cluster.rates"]
trigger = "available-now"
checkpoint = "{tmp}/state/ingest"
dead_letter_table = "{tmp}/tables/rates_dead_letter"
[[ingest.tables]]
table = "{tmp}/tables/rates"
key = ["currency"]

[join]
pipeline_id = "cluster-rowtime"
source = "kafka"
topics = ["cluster.orders"]
trigger = "available-now"
max_records_per_trigger = 400
probe_schema = "{ORDER_SCHEMA}"
probe_key = ["currency"]
probe_time = "order_ts"
probe_id = "order_id"
mode = "rowtime"
join_type = "left"
watermark = "bounded"
out_of_orderness_ms = 5000
build_table = "{tmp}/tables/rates"
output_table = "{tmp}/tables/orders_rowtime"
pending_table = "{tmp}/tables/orders_rowtime_pending"
dead_letter_table = "{tmp}/tables/orders_dead_letter"
checkpoint = "{tmp}/state/rowtime"

[quality]
report_dir = "{tmp}/quality"
""")
    return cfg


def _running_tasks(log: Path) -> int:
    return log.read_text(errors="replace").count("Running task") if log.exists() else 0


def test_ingest_joins_and_report_on_a_cluster_survive_a_worker_killed_mid_batch(
    installed_wheel, kafka_broker, spark, tmp_path
):
    demo = make_demo_data(orders=ORDERS, changes=60)
    create_topic(kafka_broker, "cluster.rates", demo.cdc_partitions)
    create_topic(kafka_broker, "cluster.orders", demo.order_partitions)
    produce(kafka_broker, "cluster.rates", [r for w in demo.waves for r in w.cdc])
    produce(kafka_broker, "cluster.orders", [r for w in demo.waves for r in w.orders])
    pyspark_home = next((installed_wheel.venv / "lib").glob("python3*/site-packages/pyspark"))

    with spark_cluster(tmp_path / "cluster", spark_home=pyspark_home, workers=2) as cluster:
        cfg = _config(tmp_path, cluster.job_toml(), kafka_broker)
        ingest = installed_wheel.run(["lakehouse", "ingest", "-c", str(cfg)], cwd=tmp_path)
        assert ingest.returncode == 0, ingest.stderr[-3000:]
        # the ingest's executors ran on the workers, not in the driver
        assert cluster.executor_logs(0) and cluster.executor_logs(1)

        # the row-time join, to the end of its input, in batches of 400 orders; once an
        # executor of worker 0 runs the join's tasks, worker 0 and everything on it die
        before = set(cluster.executor_logs(0))
        join = subprocess.Popen(
            [
                str(installed_wheel.lakehouse),
                "join",
                "-c",
                str(cfg),
                "--until-complete",
                "--build-complete",
            ],
            cwd=tmp_path,
            env=installed_wheel.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 300
        killed_after = 0
        while not killed_after and join.poll() is None and time.monotonic() < deadline:
            logs = [p for p in cluster.executor_logs(0) if p not in before]
            busy = max((_running_tasks(p) for p in logs), default=0)
            if busy >= 8:  # well into the join's work: reading, joining, writing
                cluster.kill_worker(0)
                killed_after = busy
            time.sleep(0.2)
        out, err = join.communicate(timeout=600)
        assert killed_after, f"worker 0 never ran the join's tasks: {err[-3000:]}"
        assert join.returncode == 0, err[-4000:]
        assert "complete: the probe input is joined, nothing is pending" in err
        # the driver saw the executor go (TaskSchedulerImpl logs it as an error)
        assert "Lost executor" in err, err[-4000:]
        assert cluster.alive_workers(cluster.state()) == 1

        # the processing-time join and the quality report on what is left of the cluster
        proctime = installed_wheel.run(
            [
                "lakehouse",
                "join",
                "-c",
                str(cfg),
                "--mode",
                "proctime",
                "--watermark",
                "none",  # the probe follows the wall clock: every order released at once
                "--pipeline-id",
                "cluster-proctime",
                "--checkpoint",
                f"{tmp_path}/state/proctime",
                "--output-table",
                f"{tmp_path}/tables/orders_proctime",
                "--pending-table",
                f"{tmp_path}/tables/orders_proctime_pending",
                "--dead-letter-table",
                f"{tmp_path}/tables/orders_proctime_dead_letter",
            ],
            cwd=tmp_path,
        )
        assert proctime.returncode == 0, proctime.stderr[-3000:]
        quality = installed_wheel.run(
            ["lakehouse", "quality", "-c", str(cfg), "--engine", "spark"], cwd=tmp_path
        )
        assert quality.returncode == 0, quality.stderr[-3000:] + quality.stdout[-3000:]
    summary = json.loads((tmp_path / "quality" / "summary.json").read_text())
    assert summary["success"], summary["failed_checks"]

    # exactly the uninterrupted answer: every order as of its own time
    build = delta.read(spark, f"{tmp_path}/tables/rates").collect()
    versions = [
        Version(r.currency, int(r._event_time.timestamp() * 1000), r._seq, r._op, str(r.rate))
        for r in build
    ]
    orders = [json.loads(v) for w in demo.waves for _, v, _ in w.orders]
    probes = [ProbeRow(o["order_id"], o["currency"], _ms(o["order_ts"])) for o in orders]
    expected, waiting = rowtime_join(probes, versions, watermark=2**63 - 1, left=True)
    assert waiting == []
    out = delta.read(spark, f"{tmp_path}/tables/orders_rowtime").collect()
    assert_rows_equal(
        [(r.order_id, None if r.rate is None else str(r.rate)) for r in out], expected
    )
    assert delta.row_count(f"{tmp_path}/tables/orders_rowtime_pending") == 0
    assert delta.row_count(f"{tmp_path}/tables/orders_proctime") == ORDERS


def _ms(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
