"""Writer leases on real lease files (no Spark): refusal naming the holder, staleness,
dead holders, explicit take-over and the per-batch fence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from lakehouse.errors import WriterLeaseError
from lakehouse.lease import LeaseRecord, acquire, lease_path, read_lease


def _take(tables, **kw):
    args = {
        "command": "ingest",
        "pipeline_id": "rates",
        "query_name": "rates",
        "checkpoint": "/ck/rates",
        "timeout_ms": 60_000,
    }
    return acquire([str(t) for t in tables], **{**args, **kw})


def _foreign(table: Path, *, heartbeat_age_ms: int, timeout_ms: int = 60_000) -> LeaseRecord:
    """A lease of a job on another machine, written as that job would."""
    import time

    now = int(time.time() * 1000)
    record = LeaseRecord(
        token="f" * 32,
        command="join",
        pipeline_id="orders",
        query_name="orders",
        host="worker-7",
        machine="worker-7/boot",
        pid=4242,
        checkpoint="s3://state/orders",
        started_at_ms=now - heartbeat_age_ms - 1000,
        heartbeat_ms=now - heartbeat_age_ms,
        timeout_ms=timeout_ms,
    )
    path = Path(lease_path(str(table)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record.to_json())
    return record


def test_a_live_lease_refuses_a_second_writer_naming_it(tmp_path):
    first = _take([tmp_path / "a", tmp_path / "b"])
    with pytest.raises(WriterLeaseError) as refused:
        _take([tmp_path / "b"], command="join", pipeline_id="other")
    message = str(refused.value)
    assert f"table '{tmp_path / 'b'}' is being written by another job: ingest 'rates'" in message
    assert f"pid {os.getpid()}" in message and "checkpoint /ck/rates" in message
    assert "--take-over" in message
    assert refused.value.table_uri == str(tmp_path / "b")
    first.release()
    assert read_lease(str(tmp_path / "a")) is None
    second = _take([tmp_path / "b"], pipeline_id="other")
    assert read_lease(str(tmp_path / "b")).pipeline_id == "other"
    second.release()


def test_a_refused_start_keeps_no_part_of_the_set(tmp_path):
    _foreign(tmp_path / "b", heartbeat_age_ms=0)
    with pytest.raises(WriterLeaseError, match=r"join 'orders'.*host worker-7"):
        _take([tmp_path / "a", tmp_path / "b"])
    assert read_lease(str(tmp_path / "a")) is None  # "a" (leased first) was given back
    assert read_lease(str(tmp_path / "b")).pipeline_id == "orders"


def test_a_lease_without_heartbeat_for_its_timeout_is_stale(tmp_path):
    _foreign(tmp_path / "t", heartbeat_age_ms=5_000, timeout_ms=2_000)
    lease = _take([tmp_path / "t"])
    assert "stale: its last heartbeat is 5 s old" in lease.taken_from[0]
    assert read_lease(str(tmp_path / "t")).token == lease.token
    lease.release()


def test_a_lease_of_a_killed_process_on_this_machine_is_stale_at_once(tmp_path):
    # a real process takes the lease, then is SIGKILLed: no release, fresh heartbeat
    script = (
        "import os, signal, sys\n"
        "from lakehouse.lease import acquire\n"
        "acquire([sys.argv[1]], command='ingest', pipeline_id='dead', query_name='dead',\n"
        "        checkpoint='ck')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "t")], check=False)
    assert proc.returncode == -9
    left = read_lease(str(tmp_path / "t"))
    assert left is not None and left.pipeline_id == "dead"
    lease = _take([tmp_path / "t"])
    assert f"its process {left.pid} no longer runs on this machine" in lease.taken_from[0]
    lease.release()


def test_take_over_fences_the_previous_holder(tmp_path):
    old = _take([tmp_path / "t"], pipeline_id="old")
    new = _take([tmp_path / "t"], pipeline_id="new", take_over=True)
    assert "ingest 'old'" in new.taken_from[0] and "live, taken over" in new.taken_from[0]
    # the old job's next batch stops before writing, naming the new holder
    with pytest.raises(WriterLeaseError, match=r"'old' no longer holds .* held by ingest 'new'"):
        old.check()
    # its heartbeat does not overwrite the new holder's lease; its release does not remove it
    old.heartbeat()
    old.release()
    assert read_lease(str(tmp_path / "t")).token == new.token
    new.check()
    new.release()


def test_heartbeat_refreshes_and_release_removes(tmp_path):
    lease = _take([tmp_path / "t"])
    before = read_lease(str(tmp_path / "t"))
    stale = replace(before, heartbeat_ms=before.heartbeat_ms - 30_000)
    Path(lease_path(str(tmp_path / "t"))).write_text(json.dumps(asdict(stale)))
    lease.heartbeat()
    assert read_lease(str(tmp_path / "t")).heartbeat_ms >= before.heartbeat_ms
    lease.release()
    assert not Path(lease_path(str(tmp_path / "t"))).exists()
    with pytest.raises(WriterLeaseError):
        lease.check()  # a released lease no longer fences anything in


def test_a_query_of_this_process_that_stopped_leaves_a_stale_lease(tmp_path):
    lease = _take([tmp_path / "t"])
    active = [True]
    lease.watch(lambda: active[0], poll_s=3600)  # the watcher will not release in time
    with pytest.raises(WriterLeaseError):
        _take([tmp_path / "t"])
    active[0] = False  # the query stopped (e.g. an availableNow run ended)
    again = _take([tmp_path / "t"])
    assert "its query in this process has stopped" in again.taken_from[0]
    again.release()
