"""The Tansu test broker (Kafka wire protocol, memory storage) as pytest fixtures.

``kafka_broker`` (session) starts one broker on a free loopback port and yields its
bootstrap address; ``kafka_topic`` (function) gives a fresh topic name. Everything the
broker holds is lost when the session ends.

The broker's known defect (see /work/shared/notes/test-broker.md): its high watermark is
the base offset of the last record batch plus one. Tests that produce records use
``produce(..., one_record_per_batch=True)`` so the reported high watermark is exact.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from lakehouse.testing.broker import free_port as free_port
from lakehouse.testing.broker import tansu_broker as tansu_broker


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
