"""The demo in files mode, end to end (what `make demo ARGS="--source files"` runs)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from lakehouse import delta
from lakehouse.demo import run_demo

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_demo_in_files_mode_passes_its_quality_checks(spark, tmp_path):
    out = io.StringIO()
    code = run_demo(
        source="files", output=tmp_path / "demo", orders=240, console=Console(file=out, width=120)
    )
    text = out.getvalue()
    assert code == 0, text
    assert "demo summary" in text
    tables = tmp_path / "demo" / "tables"
    # every order was joined by the processing-time join, after the snapshot completed
    proc = delta.read(spark, str(tables / "orders_proctime")).collect()
    assert len(proc) == 240 and all(r._matched for r in proc)
    completed = int(
        delta.get_properties(str(tables / "rates"))["lakehouse.snapshot.completedVersion"]
    )
    assert min(r._build_version for r in proc) >= completed
    # the row-time join released all but the orders newer than its watermark
    row = delta.row_count(str(tables / "orders_rowtime"))
    pending = delta.row_count(str(tables / "orders_rowtime_pending"))
    assert row + pending == 240 and pending < 10
    for join in ("rowtime", "proctime"):
        summary = json.loads((tmp_path / "demo" / "quality" / join / "summary.json").read_text())
        assert summary["success"] is True
