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
from helpers import INTERPRETED_PROJECTIONS
from jvm_archive import archive_options, spark_archive

from lakehouse.testing.broker import TEST_JVM_OPTIONS

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"

# Every Spark driver and executor of the tests, in this process or in a `lakehouse` command the
# tests run, starts with the options the broker, Connect and Spark's daemons start with
# (lakehouse.testing.broker.TEST_JVM_OPTIONS: C1 only, serial GC): the suite is CPU-bound on two
# cores, and a command's JVM lives seconds, where C2's compiler threads cost more CPU than they
# return. Spark's ``defaultJavaOptions`` go before the ``extraJavaOptions`` lakehouse sets, which
# stay as users get them. A driver also maps the class-data archive `make test` writes first
# (tests/jvm_archive.py), so it does not read and verify its start-up classes from the
# jars again. Executors of a standalone cluster start from another classpath, which the archive does
# not fit.
#
# The same drivers interpret their projections and predicates instead of generating Java for
# each and compiling it (helpers.INTERPRETED_PROJECTIONS, Spark's
# `spark.sql.codegen.factoryMode=NO_CODEGEN`: the switch Spark's own test suites use to run the
# interpreted path; Spark calls it internal and lakehouse never sets it for users). Results are
# the same by Spark's contract, and whole-stage code generation, which compiles the plans
# lakehouse builds, still runs. What it saves is the per-task code generation for Delta's log
# actions, whose schema is too wide for whole-stage code (docs/development/architecture.md).
# test_demo.py's files-mode demo runs with generated code, as users run it.
_ARCHIVE = spark_archive(TEST_JVM_OPTIONS, build=False)
_ARCHIVE_OPTIONS = () if _ARCHIVE is None else archive_options(_ARCHIVE)
_OWN_CONF = "LAKEHOUSE_SPARK_CONF" not in os.environ
if _OWN_CONF:
    _executor = " ".join(TEST_JVM_OPTIONS)
    _driver = " ".join([*TEST_JVM_OPTIONS, *_ARCHIVE_OPTIONS])
    os.environ["LAKEHOUSE_SPARK_CONF"] = (
        f"spark.driver.defaultJavaOptions={_driver};spark.executor.defaultJavaOptions={_executor};"
        + INTERPRETED_PROJECTIONS
    )

# The session's own driver is the exception: it lives as long as the test session (the whole
# pass, in each xdist worker) and runs most of the suite's Spark work, where C2's compiled code
# repays its compiler threads; the short-lived `lakehouse` commands' drivers are the other way
# round, hence the split.
# Its options are TEST_JVM_OPTIONS without the C1 cap. A LAKEHOUSE_SPARK_CONF of your own
# applies to this driver too.
_SESSION_JVM_OPTIONS = [o for o in TEST_JVM_OPTIONS if not o.startswith("-XX:TieredStopAtLevel")]
_SESSION_CONF = (
    {"spark.driver.defaultJavaOptions": " ".join([*_SESSION_JVM_OPTIONS, *_ARCHIVE_OPTIONS])}
    if _OWN_CONF
    else {}
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
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            **_SESSION_CONF,
        },
    )
    yield session
    session.stop()


from kafka_broker import kafka_broker, kafka_topic  # noqa: F401, E402
from postgres_stack import debezium_stack, postgres  # noqa: F401, E402
from s3_endpoint import s3  # noqa: F401, E402
from wheel_env import installed_wheel  # noqa: F401, E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """tests/unit stays Spark-free (``make check`` runs it in a few minutes): a unit test that
    asks for the SparkSession stops the run, naming where it belongs."""
    unit = HERE / "unit"
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) and unit in Path(item.path).parents:
            raise pytest.UsageError(
                f"{item.nodeid} needs Spark, and tests/unit is Spark-free: move it to "
                "tests/integration"
            )
