"""An Apache Kafka broker for the tests (one KRaft node, see lakehouse.testing.broker).

``kafka_broker`` (session) starts one broker on free loopback ports, its log and data under
the session's temporary directory, and yields its bootstrap address; ``kafka_topic``
(function) gives a fresh topic name. The broker is stopped by its process id at the end.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from lakehouse.testing.broker import KafkaBroker as KafkaBroker
from lakehouse.testing.broker import free_port as free_port
from lakehouse.testing.broker import kafka_broker as run_kafka_broker


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap address (``127.0.0.1:PORT``) of a Kafka broker shared by the session."""
    with run_kafka_broker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker.bootstrap


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (the topic itself is not created)."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40]
    return f"{stem}-{uuid.uuid4().hex[:8]}"
