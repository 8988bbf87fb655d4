"""Shared fixtures: one SparkSession for the whole test session (Spark is slow to start)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from lakehouse.spark import get_spark

    session = get_spark(
        app_name="lakehouse-tests",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    yield session
    session.stop()


from kafka_broker import kafka_broker, kafka_topic  # noqa: F401, E402
from postgres_stack import debezium_stack, postgres  # noqa: F401, E402
from wheel_env import installed_wheel  # noqa: F401, E402
