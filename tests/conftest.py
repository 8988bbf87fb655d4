"""Shared fixtures: one SparkSession for the whole test session (Spark is slow to start).

``make test`` runs the suite in two pytest-xdist workers; each worker is a test session of its
own (its own SparkSession, and its own broker or PostgreSQL when a test of it needs one).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"

# The JVMs of the tests (every Spark driver and executor, in this process or in a `lakehouse`
# command the tests run; the broker, Connect and Spark's daemons set the same in
# lakehouse.testing) compile with C1 only and collect with the serial GC. A test's JVM lives for
# seconds on kilobytes of data, where C2's compiler threads cost more CPU than they save; the
# suite is CPU-bound on two cores. Measured on one crash-restart test, side by side: 135 CPU-s
# with the defaults, 87 with these. Spark's ``defaultJavaOptions`` go before the
# ``extraJavaOptions`` lakehouse sets, which stay as users get them.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
if "LAKEHOUSE_SPARK_CONF" not in os.environ:
    os.environ["LAKEHOUSE_SPARK_CONF"] = (
        f"spark.driver.defaultJavaOptions={TEST_JVM_OPTIONS};"
        f"spark.executor.defaultJavaOptions={TEST_JVM_OPTIONS}"
    )

# An xdist worker's __main__ has neither __file__ nor __spec__. pyspark.sql.connect (which
# Great Expectations imports) takes that for a doctest run of its own and calls sys.exit(0)
# when Spark Connect's optional dependencies are missing. Give it a file name.
_main = sys.modules["__main__"]
if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = "<pytest-xdist worker>"


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
