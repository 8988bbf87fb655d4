"""The watermark call rides out a partition between leaders and fails on everything else.

A stand-in for librdkafka's consumer plays the broker's answers: a leaderless partition right
after a topic is created (the CI failure: ``NOT_LEADER_FOR_PARTITION`` reported as "could not
reach Kafka") cannot be brought about on the real test broker on demand.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from lakehouse.errors import SourceError
from lakehouse.sources._kafka_client import KafkaMetadata


class _Broker:
    """Answers ``get_watermark_offsets`` with the given errors first, then ``(3, 9)``."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def get_watermark_offsets(self, partition, timeout, cached):
        self.calls += 1
        assert timeout > 0 and cached is False
        if self.errors:
            code = self.errors.pop(0)
            raise KafkaException(KafkaError(code, f"Failed to get watermark offsets: {code}"))
        return 3, 9

    def poll(self, timeout):
        return None

    def close(self) -> None:
        pass


def _metadata(broker: _Broker, timeout_ms: int = 5000) -> KafkaMetadata:
    config = {"bootstrap.servers": "127.0.0.1:9", "group.id": "lakehouse-test"}
    metadata = KafkaMetadata(config, timeout_ms=timeout_ms)
    metadata._consumer.close()
    metadata._consumer = broker  # type: ignore[assignment]
    return metadata


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.OFFSET_NOT_AVAILABLE,
    ],
)
def test_a_partition_between_leaders_is_asked_again(code):
    broker = _Broker(code, code)
    assert _metadata(broker).watermarks("t", 0) == (3, 9)
    assert broker.calls == 3


def test_a_refusal_fails_at_once():
    broker = _Broker(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(SourceError, match="watermarks of topic 't' partition 0"):
        _metadata(broker).watermarks("t", 0)
    assert broker.calls == 1


def test_a_partition_that_never_gets_a_leader_fails_within_the_timeout():
    broker = _Broker(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"partition 0 of topic .t. had no leader .* for 300 ms"):
        _metadata(broker, timeout_ms=300).watermarks("t", 0)
    assert 0.25 < time.monotonic() - started < 5
    assert broker.calls > 1
