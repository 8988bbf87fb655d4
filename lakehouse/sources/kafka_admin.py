"""Small Kafka helpers for tests, the demo, the soak run and the benchmarks: create or delete
a topic, produce records (confluent-kafka).

Not used by the streaming source itself. Every call is bounded by ``timeout_s`` and fails
with a :class:`SourceError` naming the broker address.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from lakehouse.errors import SourceError

#: ``(key, value, partition)``; ``partition=None`` lets the producer's partitioner choose
#: (by key hash, or sticky for null keys).
ProducerRecord = tuple[bytes | None, bytes | None, int | None]


def _admin(bootstrap: str, config: Mapping[str, str] | None) -> AdminClient:
    return AdminClient({**(config or {}), "bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    replication_factor: int = 1,
    exist_ok: bool = False,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> None:
    """Create ``topic`` with ``partitions`` partitions and wait until its metadata shows them.

    Args:
        bootstrap: ``host:port[,host:port...]`` of the brokers.
        topic: topic name.
        partitions: number of partitions (>= 1).
        replication_factor: replicas per partition (1 for a single test broker).
        exist_ok: when True, an existing topic is left as it is (its partition count is not
            checked); otherwise it is an error.
        config: extra librdkafka client settings (security), without the ``kafka.`` prefix.
        timeout_s: bound on the whole call.

    Raises:
        SourceError: the broker is unreachable, rejects the request, the topic exists (and
            not ``exist_ok``), or its partitions do not appear within ``timeout_s``.
    """
    admin = _admin(bootstrap, config)
    deadline = time.monotonic() + timeout_s
    futures = admin.create_topics(
        [NewTopic(topic, partitions, replication_factor)], request_timeout=timeout_s
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as e:
        error = e.args[0] if e.args else None
        if not (exist_ok and isinstance(error, KafkaError)):
            raise SourceError(
                f"could not create topic {topic!r} on Kafka at {bootstrap!r}: {e}"
            ) from e
        if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise SourceError(
                f"could not create topic {topic!r} on Kafka at {bootstrap!r}: {e}"
            ) from e
        return
    except Exception as e:  # concurrent.futures.TimeoutError
        raise SourceError(
            f"creating topic {topic!r} on Kafka at {bootstrap!r} did not finish within "
            f"{timeout_s} s: {e!r}"
        ) from e
    while True:
        metadata = admin.list_topics(timeout=max(deadline - time.monotonic(), 0.1))
        described = metadata.topics.get(topic)
        if (
            described is not None
            and described.error is None
            and len(described.partitions) >= partitions
        ):
            return
        if time.monotonic() >= deadline:
            raise SourceError(
                f"topic {topic!r} on Kafka at {bootstrap!r} was created but its {partitions} "
                f"partitions did not appear in the metadata within {timeout_s} s."
            )
        time.sleep(0.05)


def delete_topic(
    bootstrap: str,
    topic: str,
    *,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> None:
    """Delete ``topic`` and wait until the brokers' metadata no longer shows it, so that a
    topic of the same name can be created right after.

    Raises:
        SourceError: the broker is unreachable, rejects the request, or still shows the topic
            after ``timeout_s``.
    """
    admin = _admin(bootstrap, config)  # keep the client alive until the future resolves
    deadline = time.monotonic() + timeout_s
    futures = admin.delete_topics([topic], request_timeout=timeout_s)
    try:
        futures[topic].result(timeout=timeout_s)
    except Exception as e:
        raise SourceError(f"could not delete topic {topic!r} on Kafka at {bootstrap!r}: {e}") from e
    while topic in admin.list_topics(timeout=max(deadline - time.monotonic(), 0.1)).topics:
        if time.monotonic() >= deadline:
            raise SourceError(
                f"topic {topic!r} on Kafka at {bootstrap!r} was deleted but still appears in "
                f"the metadata after {timeout_s} s."
            )
        time.sleep(0.05)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[ProducerRecord],
    *,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> list[tuple[int, int]]:
    """Produce ``records`` to ``topic`` and wait until every one is acknowledged.

    Records are sent in order with idempotence enabled, so records for one partition
    land in the order given.

    Args:
        bootstrap: ``host:port[,host:port...]`` of the brokers.
        topic: an existing topic.
        records: ``(key, value, partition)`` triples; ``value=None`` is a tombstone.
        config: extra librdkafka producer settings (security), without ``kafka.``.
        timeout_s: bound on delivering all records.

    Returns:
        The ``(partition, offset)`` each record was written to, in the order given.

    Raises:
        SourceError: a record could not be delivered within ``timeout_s``.
    """
    settings: dict[str, str | int | bool] = {
        **(config or {}),
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "message.timeout.ms": int(timeout_s * 1000),
    }
    producer = Producer(settings)
    results: list[tuple[int, int] | None] = []
    failures: list[str] = []

    def on_delivery(index: int) -> Callable[[KafkaError | None, Message], None]:
        def callback(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                failures.append(f"record {index}: {error.str()}")
            else:
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None  # delivered: both known
                results[index] = (partition, offset)

        return callback

    for index, (key, value, partition) in enumerate(records):
        results.append(None)
        while True:
            try:
                if partition is None:  # the producer's partitioner chooses
                    producer.produce(topic, value=value, key=key, on_delivery=on_delivery(index))
                else:
                    producer.produce(
                        topic,
                        value=value,
                        key=key,
                        partition=partition,
                        on_delivery=on_delivery(index),
                    )
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: let deliveries drain
        producer.poll(0)
    remaining = producer.flush(timeout_s)
    if remaining or failures:
        raise SourceError(
            f"producing to topic {topic!r} on Kafka at {bootstrap!r} failed: "
            f"{remaining} record(s) undelivered after {timeout_s} s"
            + (f"; {'; '.join(failures[:3])}" if failures else "")
        )
    return [r for r in results if r is not None]
