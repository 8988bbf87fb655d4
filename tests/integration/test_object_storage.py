"""Tables and checkpoints on object storage: an S3-compatible endpoint through Hadoop's S3A.

The endpoint is moto's server on loopback (``tests/s3_server.py``), reached by Spark through
the S3A connector (``jvm/s3/pom.xml``; ``get_spark`` adds it when Spark lacks it), with
Delta's log store for ``s3a://`` (Delta picks it by the scheme; the single-driver log store,
one writer per table, which the writer lease enforces). The jobs run as the installed command,
credentials in their environment only; the tables are read back by the test's own Spark,
which is given the endpoint and the credentials in memory.

The ingest of a CDC change log, a row-time join run to the end of its input (equal to the
reference), the writer leases and the checkpoints, compaction (answers at and after its
horizon unchanged), vacuum keeping every build version the output references, and status:
all on ``s3a://``. Nothing the jobs write or print holds the secret key.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from helpers import assert_rows_equal, lakehouse_command
from reference import ProbeRow, Version, rowtime_join
from s3_server import S3Server

from lakehouse import delta
from lakehouse.testing import DebeziumTable

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = 1_700_000_000_000


def _lakehouse(s3: S3Server, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return lakehouse_command(*args, cwd=cwd, env=s3.env())


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def _config(tmp: Path, root: str, s3: S3Server) -> Path:
    conf = "\n".join(f'"{k}" = "{v}"' for k, v in s3.spark_conf().items())
    cfg = tmp / "lakehouse.toml"
    cfg.write_text(f"""
[spark]
master = "local[1]"

[spark.conf]
"spark.sql.shuffle.partitions" = "1"
{conf}

[ingest]
pipeline_id = "rates"
source = "files"
path = "{tmp}/cdc"
checkpoint = "{root}/checkpoints/ingest"
dead_letter_table = "{root}/tables/cdc_dead_letter"
trigger = "available-now"
[[ingest.tables]]
table = "{root}/tables/rates"
key = ["currency"]

[join]
pipeline_id = "orders"
source = "files"
path = "{tmp}/orders"
checkpoint = "{root}/checkpoints/join"
trigger = "available-now"
probe_schema = "order_id bigint, currency string, order_ts bigint"
probe_key = ["currency"]
probe_time = "order_ts"
probe_id = "order_id"
mode = "rowtime"
join_type = "left"
build_table = "{root}/tables/rates"
output_table = "{root}/tables/orders"
pending_table = "{root}/tables/orders_pending"
dead_letter_table = "{root}/tables/orders_dead_letter"

[quality]
report_dir = "{tmp}/quality"
""")
    return cfg


def _write(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))


def test_ingest_join_compaction_and_vacuum_on_s3(spark, s3, tmp_path):
    bucket = f"lake-{uuid.uuid4().hex[:8]}"
    root = s3.create_bucket(bucket)
    cfg = _config(tmp_path, root, s3)
    table = DebeziumTable("public", "rates", key="currency", start_ms=T0)
    cdc = table.snapshot([{"currency": c, "rate": "1.5"} for c in ("EUR", "GBP", "CHF")])
    cdc += [table.update({"currency": "EUR", "rate": "1.6"})]
    cdc += [*table.delete("CHF"), table.update({"currency": "EUR", "rate": "1.7"})]
    _write(tmp_path / "cdc" / "0001.jsonl", [json.dumps(m.value) for m in cdc if m.value])
    times = [T0 - 500, T0 + 500, T0 + 2_500, T0 + 3_500, T0 + 4_500, T0 + 60_000]
    currencies = ["EUR", "EUR", "EUR", "GBP", "CHF", "GBP"]
    orders = [
        {"order_id": i, "currency": c, "order_ts": ts}
        for i, (c, ts) in enumerate(zip(currencies, times, strict=True))
    ]
    _write(tmp_path / "orders" / "0001.jsonl", [json.dumps(o) for o in orders])
    printed = []

    # the ingest and the join, to the end of the input, with every table and checkpoint on S3
    printed.append(_ok(_lakehouse(s3, "ingest", "-c", str(cfg), cwd=tmp_path)))
    joined = _lakehouse(
        s3, "join", "-c", str(cfg), "--until-complete", "--build-complete", cwd=tmp_path
    )
    printed.append(_ok(joined))
    assert "complete: the probe input is joined, nothing is pending" in joined.stderr

    rates = f"{root}/tables/rates"
    build = delta.read(spark, rates).collect()
    versions = [
        Version(r.currency, int(r._event_time.timestamp() * 1000), r._seq, r._op, str(r.rate))
        for r in build
    ]
    probes = [ProbeRow(o["order_id"], o["currency"], o["order_ts"]) for o in orders]
    expected, waiting = rowtime_join(probes, versions, watermark=2**63 - 1, left=True)
    assert waiting == []
    out = delta.read(spark, f"{root}/tables/orders").collect()
    assert_rows_equal(
        [(r.order_id, None if r.rate is None else str(r.rate)) for r in out], expected
    )
    assert delta.get_properties(rates)["lakehouse.snapshot.complete"] == "true"
    # the checkpoints and the writer leases live beside the data, on S3
    keys = {key for key, _ in s3.objects(bucket)}
    assert any(k.startswith("checkpoints/join/offsets/") for k in keys)
    assert any(k.startswith("tables/rates/_lakehouse/") for k in keys), sorted(keys)[:20]

    # a second run of the join finds its state on S3 and has nothing to do
    again = _lakehouse(s3, "join", "-c", str(cfg), "--until-complete", cwd=tmp_path)
    printed.append(_ok(again))
    assert delta.row_count(f"{root}/tables/orders") == len(expected)

    # compaction: versions before the horizon collapse, answers at and after it stay
    horizon = T0 + 3_000
    printed.append(
        _ok(
            _lakehouse(
                s3,
                "compact",
                rates,
                "--horizon",
                str(horizon),
                "--force",
                "-c",
                str(cfg),
                cwd=tmp_path,
            )
        )
    )
    compacted = [
        Version(r.currency, int(r._event_time.timestamp() * 1000), r._seq, r._op, str(r.rate))
        for r in delta.read(spark, rates).collect()
    ]
    assert len(compacted) < len(versions)
    later = [p for p in probes if p.time >= horizon]
    assert rowtime_join(later, compacted, watermark=2**63 - 1, left=True) == rowtime_join(
        later, versions, watermark=2**63 - 1, left=True
    )

    # vacuum keeps every build version the output references readable
    printed.append(
        _ok(
            _lakehouse(
                s3,
                "vacuum",
                rates,
                "--apply",
                "--retention-hours",
                "0",
                "-c",
                str(cfg),
                cwd=tmp_path,
            )
        )
    )
    for version in {r._build_version for r in out}:
        assert delta.read(spark, rates, version=version).count() > 0

    status = _lakehouse(s3, "status", rates, cwd=tmp_path)
    printed.append(_ok(status))
    assert "snapshot" in status.stdout

    # the secret is in no object the jobs wrote (logs, checkpoints, leases) and no output
    for key, body in s3.objects(bucket):
        assert s3.secret_key.encode() not in body, key
    for text in printed:
        assert s3.secret_key not in text and s3.access_key not in text
