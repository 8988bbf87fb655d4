"""Seconds of ``lakehouse quality``: the pandas engine (delta-rs, no JVM) against Spark.

A row-time left join's tables are made the way a user makes them: ``keys`` prices as a
Debezium snapshot, ``orders`` orders (each for a price that exists, so every check passes
and the command exits 0), ingested and joined by the installed command. Then the installed
``lakehouse quality`` validates them as a scheduler runs it, a new process each time
(interpreter, Great Expectations and, for Spark, JVM start included). The engines alternate,
``repeats`` times each, so both see the same machine load; the result is the median per
engine and their ratio.

Usage: ``python -m bench.quality '{"orders": [5, 20000], "repeats": 3}'`` (prints a
``BENCH-RESULT`` line).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.measure import emit, timed_lakehouse

T0_MS = 1_772_438_400_000  # 2026-03-02T08:00:00Z


def _change(key: int, price: float, *, last: bool) -> str:
    source = {
        "version": "2.7.0.Final",
        "connector": "postgresql",
        "name": "shop",
        "ts_ms": T0_MS,
        "snapshot": "last" if last else "true",
        "db": "shop",
        "sequence": '[null, "100"]',
        "schema": "public",
        "table": "prices",
        "txId": 700,
        "lsn": 100,
    }
    after = {"sku": f"S-{key}", "price": price}
    return json.dumps(
        {"before": None, "after": after, "source": source, "op": "r", "ts_ms": T0_MS + 5}
    )


def _tables(root: Path, keys: int, orders: int) -> Path:
    """Ingest the prices and join the orders; returns the configuration."""
    (root / "cdc").mkdir()
    (root / "orders").mkdir()
    lines = [_change(k, 10.0 + k % 7, last=k == keys) for k in range(1, keys + 1)]
    (root / "cdc" / "0001.jsonl").write_text("\n".join(lines) + "\n")
    (root / "orders" / "0001.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "order_id": i,
                    "sku": f"S-{i % keys + 1}",
                    "order_ts": f"2026-03-02T09:{i // 60 % 60:02d}:{i % 60:02d}Z",
                }
            )
            + "\n"
            for i in range(orders)
        )
    )
    cfg = root / "lakehouse.toml"
    cfg.write_text(
        f"""[spark]
master = "local[2]"
[ingest]
pipeline_id = "prices"
source = "files"
path = "{root}/cdc"
checkpoint = "{root}/state/ingest"
dead_letter_table = "{root}/tables/prices_dead_letter"
trigger = "available-now"
[[ingest.tables]]
table = "{root}/tables/prices"
key = ["sku"]
[join]
pipeline_id = "orders-rowtime"
source = "files"
path = "{root}/orders"
checkpoint = "{root}/state/orders"
trigger = "available-now"
probe_schema = "order_id bigint, sku string, order_ts timestamp"
probe_key = ["sku"]
probe_time = "order_ts"
probe_id = "order_id"
join_type = "left"
build_table = "{root}/tables/prices"
output_table = "{root}/tables/orders_rowtime"
pending_table = "{root}/tables/orders_pending"
dead_letter_table = "{root}/tables/orders_dead_letter"
[quality]
report_dir = "{root}/quality"
"""
    )
    timed_lakehouse("ingest", "-c", str(cfg))
    timed_lakehouse("join", "-c", str(cfg), "--until-complete", "--build-complete")
    return cfg


def main(spec: dict[str, Any]) -> dict[str, Any]:
    """Make the tables per size, time both engines alternately; returns what :func:`emit`
    prints."""
    sizes = [int(n) for n in spec.get("orders", [5, 20000])]
    keys, repeats = int(spec.get("keys", 1000)), int(spec.get("repeats", 3))
    result: dict[str, Any] = {"keys": keys, "repeats": repeats}
    for orders in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-quality-") as tmp:
            cfg = _tables(Path(tmp), keys, orders)
            times: dict[str, list[float]] = {"pandas": [], "spark": []}
            for _ in range(repeats):
                for engine in times:
                    seconds, _ = timed_lakehouse("quality", "-c", str(cfg), "--engine", engine)
                    times[engine].append(seconds)
            medians = {e: round(statistics.median(t), 2) for e, t in times.items()}
            result[f"orders_{orders}"] = {
                "seconds_median": medians,
                "spark_over_pandas": round(medians["spark"] / medians["pandas"], 1),
            }
    return result


if __name__ == "__main__":
    emit(main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}))
