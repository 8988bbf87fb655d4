"""The one SparkSession factory of lakehouse.

Every job, the CLI and the tests get their session here, so the settings that correctness
depends on are set in one place:

* the session time zone is UTC (event times are epoch milliseconds; rendering them in a
  local zone would make SQL results machine-dependent);
* parquet timestamps are written as ``TIMESTAMP_MICROS`` (Delta's timestamp type; Spark's
  default ``INT96`` is not valid in a Delta table);
* Arrow is enabled (decoding and the join kernels exchange Arrow batches with Python).

Master and extra configuration come from arguments or the environment:
``LAKEHOUSE_SPARK_MASTER`` (default ``local[*]``) and ``LAKEHOUSE_SPARK_CONF`` (``key=value``
pairs separated by ``;``). On Databricks or any existing cluster, :func:`get_spark` returns the
active session unchanged apart from the settings above.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from lakehouse.errors import ConfigError, EnvironmentSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MIN_JAVA_MAJOR = 17

#: lakehouse's log4j2 configuration: warnings, minus the noise of every local run.
_LOG4J = (Path(__file__).parent / "log4j2.properties").as_uri()

#: Settings lakehouse relies on for correctness; they win over user configuration.
REQUIRED_CONF: Mapping[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}

#: Defaults that suit a 2-core laptop or CI box; configuration may override them.
DEFAULT_CONF: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
    ),
    "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
    "spark.python.worker.reuse": "true",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.sql.parquet.summary.metadata.level": "NONE",
    "spark.driver.memory": "4g",
    "spark.sql.adaptive.enabled": "true",
    # Stopping a streaming query while a Python data source call is in flight makes Spark's
    # interrupt handling run a deeply recursive regex; the default 1 MiB thread stack overflows
    # (a StackOverflowError dump of ~1000 lines). A larger stack lets it finish.
    "spark.driver.extraJavaOptions": f"-Xss64m -Dlog4j.configurationFile={_LOG4J}",
}


def java_major_version(java: str | None = None) -> int:
    """Return the major version of the Java that Spark will start.

    Raises:
        EnvironmentSetupError: Java is missing, or its version cannot be read.
    """
    java_home = os.environ.get("JAVA_HOME")
    java = java or (os.path.join(java_home, "bin", "java") if java_home else shutil.which("java"))
    if not java or not os.path.exists(java):
        raise EnvironmentSetupError(
            "Java was not found: PySpark needs Java 17 or newer. Install it (Debian/Ubuntu: "
            "'apt-get install openjdk-17-jre-headless') or set JAVA_HOME."
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    text = out.stderr or out.stdout
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not match:
        raise EnvironmentSetupError(f"could not read the Java version from {java!r}: {text!r}")
    major = int(match.group(1))
    # Java 8 and older report themselves as "1.8.0_..."
    return int(match.group(2) or 0) if major == 1 else major


def parse_conf_env(value: str) -> dict[str, str]:
    """Parse ``LAKEHOUSE_SPARK_CONF``: ``key=value`` pairs separated by ``;``.

    >>> parse_conf_env("spark.sql.shuffle.partitions=2; spark.driver.memory=2g")
    {'spark.sql.shuffle.partitions': '2', 'spark.driver.memory': '2g'}
    """
    conf: dict[str, str] = {}
    for part in value.split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, val = part.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"LAKEHOUSE_SPARK_CONF entry {part!r} is not 'key=value'; separate entries "
                "with ';', e.g. 'spark.sql.shuffle.partitions=2;spark.driver.memory=2g'",
                setting="LAKEHOUSE_SPARK_CONF",
            )
        conf[key.strip()] = val.strip()
    return conf


def get_spark(
    *,
    app_name: str = "lakehouse",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    log_level: str | None = None,
) -> SparkSession:
    """Return the SparkSession lakehouse runs on, creating it when none is active.

    Args:
        app_name: Spark application name.
        master: Spark master URL; default ``LAKEHOUSE_SPARK_MASTER`` or ``local[*]``. Ignored
            when a session already exists (e.g. on Databricks).
        conf: extra Spark configuration; merged over :data:`DEFAULT_CONF` and
            ``LAKEHOUSE_SPARK_CONF``. :data:`REQUIRED_CONF` always wins.
        log_level: Spark log level; default ``LAKEHOUSE_SPARK_LOG_LEVEL`` or ``WARN`` (Spark's
            INFO logging is off unless asked for). Set ``spark.ui.enabled=true`` in ``conf``
            to get the UI back.

    Raises:
        EnvironmentSetupError: Java is missing or older than 17.
    """
    from pyspark.sql import SparkSession

    # Python workers must run the interpreter (and virtualenv) the job runs in; otherwise
    # Spark starts whatever `python3` is first on PATH, which may lack pyarrow or lakehouse.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is None:
        major = java_major_version()
        if major < MIN_JAVA_MAJOR:
            raise EnvironmentSetupError(
                f"Java {major} found, but PySpark 4 needs Java {MIN_JAVA_MAJOR} or newer. "
                "Install Java 17+ and put it first on PATH or set JAVA_HOME."
            )
    merged: dict[str, str] = dict(DEFAULT_CONF)
    merged.update(parse_conf_env(os.environ.get("LAKEHOUSE_SPARK_CONF", "")))
    merged.update(conf or {})
    merged.update(REQUIRED_CONF)
    if active is not None:
        for key, value in REQUIRED_CONF.items():
            active.conf.set(key, value)
        return active
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("LAKEHOUSE_SPARK_MASTER", "local[*]")
    )
    for key, value in merged.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level or os.environ.get("LAKEHOUSE_SPARK_LOG_LEVEL", "WARN"))
    return spark
