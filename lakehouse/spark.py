"""The one SparkSession factory of lakehouse.

Every job, the CLI and the tests get their session here, so the settings that correctness
depends on are set in one place:

* the session time zone is UTC (event times are epoch milliseconds; rendering them in a
  local zone would make SQL results machine-dependent);
* parquet timestamps are written as ``TIMESTAMP_MICROS`` (Delta's timestamp type; Spark's
  default ``INT96`` is not valid in a Delta table);
* Arrow is enabled (decoding and the join kernels exchange Arrow batches with Python).

The engine is delta-spark, and Kafka is read with Spark's own Kafka source. Their jars are
not in the pyspark wheel: ``make`` copies them from Maven Central into ``.jvm/spark/`` (the
pinned description is ``jvm/spark/pom.xml``), and :func:`get_spark` puts them on the classpath
**only when the classes are not there already**. It looks for the classes themselves in the
jars Spark will start with, so a Databricks runtime or a cluster image that ships Delta and
Kafka gets nothing added. Delta's SQL extension and catalog are set on a session lakehouse
creates; an existing session must have them already (every Databricks runtime does).

Master and extra configuration come from arguments or the environment:
``LAKEHOUSE_SPARK_MASTER`` (default ``local[*]``) and ``LAKEHOUSE_SPARK_CONF`` (``key=value``
pairs separated by ``;``); ``LAKEHOUSE_JVM_DIR`` names another folder of jars than the
checkout's ``.jvm``. On Databricks or any existing cluster, :func:`get_spark` returns the
active session unchanged apart from the settings above.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import glob
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakehouse.errors import ConfigError, EnvironmentSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MIN_JAVA_MAJOR = 17

#: lakehouse's log4j2 configuration: warnings, minus the noise of every local run.
_LOG4J = (Path(__file__).parent / "log4j2.properties").as_uri()

#: A class of each JVM component lakehouse needs, and the jar folder (under the JVM dir) that
#: brings it when Spark does not have it.
DELTA_CLASS = "io.delta.sql.DeltaSparkSessionExtension"
KAFKA_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
_REQUIRED_CLASSES: Mapping[str, str] = {DELTA_CLASS: "delta-spark", KAFKA_CLASS: "spark-sql-kafka"}
#: Hadoop's S3A filesystem: added from ``<jvm dir>/s3`` when missing (:func:`s3a_jars`).
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
#: lakehouse's own JVM code (``jvm/decode/``): the Debezium decode that runs in Spark's
#: executors. ``make`` builds the jar into the package, and the wheel carries it.
DECODE_JAR = Path(__file__).parent / "_jars" / "lakehouse-decode.jar"
DECODE_CLASS = "dev.lakehouse.decode.DebeziumDecoder"
#: The version of the decoder's specification this lakehouse writes (the JVM's ``PROTOCOL``).
DECODE_PROTOCOL = 2

#: Delta's session extension and catalog: path-based SQL (``delta.`/path```), ALTER TABLE.
DELTA_SESSION_CONF: Mapping[str, str] = {
    "spark.sql.extensions": DELTA_CLASS,
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}

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
    # Adaptive execution runs each shuffle stage of a query as a job of its own: a
    # micro-batch's small aggregates and Delta's state rebuilds took three jobs each instead of
    # one (measured: 9 instead of 5 Spark jobs per row-time batch). Its partition coalescing
    # buys little on the few shuffle partitions lakehouse uses; set it back where it helps.
    "spark.sql.adaptive.enabled": "false",
    # PySpark records the Python call site of every DataFrame and Column call for its error
    # messages (its "DataFrame debugging"): several py4j round trips more per call, over the
    # hundreds of calls a batch's plan makes per table; the call sites it would name are
    # lakehouse's, not the user's code.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Spark keeps 100 generated classes by default; each table a batch writes has code of its
    # own (the ordinals of its columns), so a connector of about 100 tables compiled them all
    # again in every batch.
    "spark.sql.codegen.cache.maxEntries": "1000",
    # Delta rebuilds a table's state (files, app transactions) with a Spark job over its log
    # whenever a batch sees a new version; the default 50 partitions make each of those jobs
    # schedule 50 tasks for a log of a few kilobytes.
    "spark.databricks.delta.snapshotPartitions": "2",
    # Spark 4.2's in-memory cache puts an accumulator (PartitionKeyedAccumulator) in every task
    # over cached data; the executor's heartbeat can read one half-deserialized (SPARK-59451),
    # and the NullPointerException ends the heartbeat thread for good: a cluster then kills the
    # executor 120 s later, a local run warns that its executor is gone. Sending the zero
    # accumulators too moves that read to the driver, where the same race costs one heartbeat
    # (log4j2.properties keeps its two traces out of the output).
    "spark.executor.heartbeat.dropZeroAccumulatorUpdates": "false",
    # Stopping a streaming query while a Python data source call is in flight makes Spark's
    # interrupt handling run a deeply recursive regex; the default 1 MiB thread stack overflows
    # (a StackOverflowError dump of ~1000 lines). A larger stack lets it finish.
    "spark.driver.extraJavaOptions": f"-Xss64m -Dlog4j.configurationFile={_LOG4J}",
}


def java_version_text(java: str | None = None) -> str:
    """What ``java -version`` prints for the Java that Spark will start.

    Raises:
        EnvironmentSetupError: Java is missing.
    """
    java_home = os.environ.get("JAVA_HOME")
    java = java or (os.path.join(java_home, "bin", "java") if java_home else shutil.which("java"))
    if not java or not os.path.exists(java):
        raise EnvironmentSetupError(
            "Java was not found: PySpark needs Java 17 or newer. Install it (Debian/Ubuntu: "
            "'apt-get install openjdk-17-jre-headless') or set JAVA_HOME."
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    return out.stderr or out.stdout


def java_major_version(java: str | None = None) -> int:
    """Return the major version of the Java that Spark will start.

    Raises:
        EnvironmentSetupError: Java is missing, or its version cannot be read.
    """
    text = java_version_text(java)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not match:
        raise EnvironmentSetupError(
            f"could not read the Java version in what 'java -version' printed: {text!r}"
        )
    major = int(match.group(1))
    # Java 8 and older report themselves as "1.8.0_..."
    return int(match.group(2) or 0) if major == 1 else major


def jvm_dir() -> Path:
    """The folder ``make`` fills with JVM artifacts: ``LAKEHOUSE_JVM_DIR`` or the checkout's
    ``.jvm`` (next to the ``lakehouse`` package of an editable install)."""
    configured = os.environ.get("LAKEHOUSE_JVM_DIR")
    return Path(configured) if configured else Path(__file__).resolve().parents[1] / ".jvm"


def _pyspark_line() -> str:
    """``major.minor`` of the installed pyspark (``4.2``)."""
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:2])


def spark_jar_folder() -> Path:
    """The folder of delta-spark's and the Kafka source's jars for the running pyspark:
    ``<jvm dir>/spark-<major.minor>`` where ``make`` fetched jars for that Spark line
    (``jvm/spark-4.0/pom.xml``), else ``<jvm dir>/spark`` (``jvm/spark/pom.xml``, the pinned
    one)."""
    line = jvm_dir() / f"spark-{_pyspark_line()}"
    return line if line.is_dir() else jvm_dir() / "spark"


def _check_jar_line(folder: Path, jars: Iterable[str]) -> None:
    """Refuse jars built for another Spark line than the running pyspark's: Spark's Kafka
    source is released with Spark, and a mismatch fails deep inside the first query."""
    running = _pyspark_line()
    for jar in jars:
        found = re.match(r"spark-sql-kafka-0-10_[\d.]+-(\d+\.\d+)\.", os.path.basename(jar))
        if found and found.group(1) != running:
            raise EnvironmentSetupError(
                f"the jars in '{folder}' are for Spark {found.group(1)}, but this pyspark is "
                f"{running}: fetch the jars of Spark {running} (make jvm; jvm/ has a pom per "
                "Spark line) or install the pyspark they were fetched for"
            )


def spark_home_jars() -> list[str]:
    """The jars Spark starts with (``$SPARK_HOME/jars``, else pyspark's own), sorted."""
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    return sorted(glob.glob(os.path.join(home, "jars", "*.jar")))


@functools.lru_cache(maxsize=64)
def _jar_has(jar: str, entry: str, _mtime: float) -> bool:
    try:
        with zipfile.ZipFile(jar) as z:
            z.getinfo(entry)
        return True
    except (KeyError, OSError, zipfile.BadZipFile):
        return False


def classpath_has(class_name: str, jars: Iterable[str]) -> bool:
    """Whether one of ``jars`` (paths; directories and ``*`` globs are expanded) holds the class.

    This is how :func:`get_spark` decides what to add before the JVM starts: by the classes the
    classpath really has, not by guessing the platform from environment variables.
    """
    entry = class_name.replace(".", "/") + ".class"
    for item in jars:
        paths = glob.glob(item) if "*" in item else [item]
        for path in paths:
            inside = glob.glob(os.path.join(path, "*.jar")) if os.path.isdir(path) else [path]
            for jar in inside:
                if (
                    jar.endswith(".jar")
                    and os.path.exists(jar)
                    and _jar_has(jar, entry, os.path.getmtime(jar))
                ):
                    return True
    return False


def _split_paths(value: str | None, sep: str) -> list[str]:
    return [p.strip() for p in (value or "").split(sep) if p.strip()]


def engine_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings a new session needs so that delta-spark and Spark's Kafka source load.

    Adds the jars of :func:`spark_jar_folder` to ``spark.jars`` only when the classpath Spark
    would start with (its own jars, ``spark.jars``, ``spark.driver.extraClassPath``) lacks the
    classes, and Delta's SQL extension and catalog unless ``conf`` names other ones.

    Raises:
        EnvironmentSetupError: a class is missing and ``make`` has not fetched the jars.
    """
    jars = _split_paths(conf.get("spark.jars"), ",")
    classpath = [
        *spark_home_jars(),
        *jars,
        *_split_paths(conf.get("spark.driver.extraClassPath"), os.pathsep),
    ]
    missing = [c for c in _REQUIRED_CLASSES if not classpath_has(c, classpath)]
    out: dict[str, str] = {}
    if missing:
        folder = spark_jar_folder()
        extra = sorted(glob.glob(str(folder / "*.jar")))
        _check_jar_line(folder, extra)
        still = [c for c in missing if not classpath_has(c, extra)]
        if still:
            names = ", ".join(_REQUIRED_CLASSES[c] for c in still)
            in_checkout = (Path(__file__).resolve().parents[1] / "pyproject.toml").exists()
            where = (
                "lakehouse is installed from a wheel, which carries no jars; "
                if not in_checkout and "LAKEHOUSE_JVM_DIR" not in os.environ
                else f"'{folder}' does not have the jars; run 'make jvm' in the checkout "
                "(Maven fetches them from Maven Central), "
            )
            raise EnvironmentSetupError(
                f"Spark's classpath lacks {names} and {where}set LAKEHOUSE_JVM_DIR to a "
                "folder whose spark/ has them (make jvm fills .jvm/ of a checkout from "
                "jvm/spark/pom.xml), or give them in spark.jars; a Databricks runtime has them"
            )
        jars = [*jars, *extra]
    s3a = s3a_jars(classpath)
    decode = [] if classpath_has(DECODE_CLASS, classpath) else own_jars()
    if missing or s3a or decode:
        out["spark.jars"] = ",".join([*jars, *s3a, *decode])
    for key, value in DELTA_SESSION_CONF.items():
        out[key] = conf.get(key) or value
    return out


def own_jars() -> list[str]:
    """lakehouse's own jar (:data:`DECODE_JAR`), where this installation has it: a wheel built
    by ``make wheel``, or a checkout after ``make``."""
    return [str(DECODE_JAR)] if DECODE_JAR.is_file() else []


#: The JVM decoder's class per JVM session (None: not loadable), see :func:`decoder_class`.
_decoder_classes: dict[str, Any] = {}
_decoder_lock = threading.Lock()


def decoder_class(spark: SparkSession) -> Any:
    """A maker of lakehouse's JVM decoder (:data:`DECODE_CLASS`) in ``spark``'s JVM: called
    with the decoder's specification and its output type (JSON texts), it returns the decode
    of the columns ``key`` and ``value`` (a JVM ``Column`` of a Catalyst expression, the
    specification checked); None when the class cannot be loaded.

    A session lakehouse started has the jar on its classpath (:func:`engine_conf`). Another
    one (Databricks, a notebook, the Python API's caller) gets it added once, as ``ADD JAR``
    adds one (the driver's session class loader, and the executors through Spark's file
    server), where this installation has the jar.

    Raises:
        EnvironmentSetupError: the class on the classpath is another version's.
    """
    key = session_identity(spark)
    with _decoder_lock:
        if key not in _decoder_classes:
            _decoder_classes[key] = _load_decoder(spark)
        factory = _decoder_classes[key]
    if factory is None:
        return None
    gateway: Any = spark.sparkContext._gateway
    jvm: Any = spark.sparkContext._jvm

    def make(spec: str, returns: str) -> Any:
        args = gateway.new_array(jvm.java.lang.Object, 2)
        args[0], args[1] = spec, returns
        return factory.invoke(None, args)

    return make


def _load_decoder(spark: SparkSession) -> Any:
    """The decoder's factory method (``java.lang.reflect.Method``), or None."""
    from py4j.protocol import Py4JError

    jvm: Any = spark.sparkContext._jvm
    gateway: Any = spark.sparkContext._gateway
    found = None
    with contextlib.suppress(Py4JError):
        found = jvm.java.lang.Thread.currentThread().getContextClassLoader().loadClass(DECODE_CLASS)
    if found is None and DECODE_JAR.is_file():
        with contextlib.suppress(Py4JError):
            spark.sql(f"ADD JAR '{DECODE_JAR.as_posix()}'")
            loader = spark._jsparkSession.sharedState().jarClassLoader()
            found = loader.loadClass(DECODE_CLASS)
    if found is None:
        return None
    protocol = found.getField("PROTOCOL").getInt(None)
    if protocol != DECODE_PROTOCOL:
        raise EnvironmentSetupError(
            f"the JVM decoder on Spark's classpath ({DECODE_CLASS}) speaks protocol {protocol}, "
            f"this lakehouse {DECODE_PROTOCOL}: it is another version's jar; put this "
            f"installation's {DECODE_JAR} on the classpath (make builds it) instead"
        )
    types = gateway.new_array(jvm.java.lang.Class, 2)
    types[0] = types[1] = jvm.java.lang.Class.forName("java.lang.String")
    return found.getMethod("column", types)


def s3a_jar_folder() -> Path:
    """The folder of Hadoop's S3A connector jars: ``<jvm dir>/s3`` (``jvm/s3/pom.xml``)."""
    return jvm_dir() / "s3"


def s3a_jars(classpath: Iterable[str]) -> list[str]:
    """Hadoop's S3A connector (``s3a://`` locations), when Spark lacks it: the jars of
    ``<jvm dir>/s3`` (``make`` fetches them from ``jvm/s3/pom.xml``), and only when their
    ``hadoop-aws`` is the version of the Hadoop client Spark ships (S3A is built against one
    Hadoop; another one fails deep inside the first write). Empty otherwise: without them an
    ``s3a://`` location fails with Spark's ``No FileSystem for scheme "s3a"``."""
    classpath = list(classpath)
    if classpath_has(S3A_CLASS, classpath):
        return []
    jars = sorted(glob.glob(str(s3a_jar_folder() / "*.jar")))
    wanted = {_jar_version(j, "hadoop-aws-") for j in jars} - {None}
    shipped = {_jar_version(j, "hadoop-client-api-") for j in classpath} - {None}
    return jars if wanted and wanted <= shipped else []


def _jar_version(path: str, prefix: str) -> str | None:
    name = os.path.basename(path)
    return name.removeprefix(prefix).removesuffix(".jar") if name.startswith(prefix) else None


#: Hadoop's local file system without its native library (pip's PySpark has none) runs
#: ``chmod`` as a process for each file it creates and ``readlink`` on both sides of each
#: ``FileContext`` rename (Delta's commits, the streaming checkpoint): some twenty processes per
#: Delta commit of a local table, a third of a many-table ingest batch on two cores. lakehouse's
#: jar has the same file systems with those two operations done by ``java.nio``
#: (``jvm/decode/src/main/java/dev/lakehouse/fs``); a session lakehouse starts on a local master
#: uses them unless its configuration names others (:func:`local_files_conf`).
LOCAL_FILES_CONF: Mapping[str, str] = {
    "spark.hadoop.fs.file.impl": "dev.lakehouse.fs.LocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "dev.lakehouse.fs.LocalFs",
}

_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?")


def local_files_conf(master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """The settings that make a new session on ``master`` use lakehouse's local file systems
    (:data:`LOCAL_FILES_CONF`), with lakehouse's jar on the driver's classpath (Spark's launcher
    opens local files before it loads ``spark.jars``).

    Only a ``local`` or ``local[...]`` master, whose tasks run in the driver's JVM, and only when
    this installation has the jar and ``conf`` sets neither file system: the user's choice wins
    (``spark.hadoop.fs.file.impl=org.apache.hadoop.fs.LocalFileSystem`` is Hadoop's own).

    >>> local_files_conf("spark://host:7077", {})
    {}
    >>> local_files_conf("local[2]", {"spark.hadoop.fs.file.impl": "x.Y"})
    {}
    """
    if not _LOCAL_MASTER.fullmatch(master) or any(k in conf for k in LOCAL_FILES_CONF):
        return {}
    jars = own_jars()
    if not jars:
        return {}
    classpath = [*jars, *_split_paths(conf.get("spark.driver.extraClassPath"), os.pathsep)]
    return {**LOCAL_FILES_CONF, "spark.driver.extraClassPath": os.pathsep.join(classpath)}


def prepare_session(spark: SparkSession) -> None:
    """Make a session that lakehouse did not start (Databricks, a notebook, the Python API's
    caller) fit for its jobs: check that it has the jars it needs, and set
    :data:`REQUIRED_CONF` (UTC session time zone, microsecond Parquet timestamps, Arrow).

    Raises:
        EnvironmentSetupError: delta-spark or Spark's Kafka source is not on its classpath.
    """
    _check_active_session(spark)
    for key, value in REQUIRED_CONF.items():
        if spark.conf.get(key, None) != value:
            spark.conf.set(key, value)


def session_identity(spark: SparkSession) -> str:
    """What tells two Python ``SparkSession`` objects apart: the JVM session behind them.
    PySpark hands each ``foreachBatch`` call a new Python object around the streaming query's
    one JVM session, so a cache keyed by the Python object (or its ``id``) would miss in every
    micro-batch (and keep every batch's entry alive)."""
    from py4j.protocol import Py4JError

    jsession: Any = spark._jsparkSession
    try:
        return str(jsession.sessionUUID())
    except Py4JError:  # a runtime without Spark's session UUID: the JVM object's identity
        return f"jvm-{jsession.hashCode()}"


def _check_active_session(spark: SparkSession) -> None:
    """An existing session (Databricks, a notebook) cannot be given jars: check it has them."""
    loader = spark.sparkContext._jvm.java.lang.Thread.currentThread().getContextClassLoader()  # type: ignore[union-attr]
    for class_name, component in _REQUIRED_CLASSES.items():
        try:
            loader.loadClass(class_name)
        except Exception as e:
            raise EnvironmentSetupError(
                f"the running Spark session has no {component} (class {class_name} is not on "
                "its classpath), and jars cannot be added to a running session; start Spark "
                "with them (a Databricks runtime has both), or let lakehouse start the session"
            ) from e


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
            when a session already exists (e.g. on Databricks). A local master's session
            reads and writes local files with lakehouse's file systems, which fork no
            processes (:data:`LOCAL_FILES_CONF`), unless ``conf`` names others.
        conf: extra Spark configuration; merged over :data:`DEFAULT_CONF` and
            ``LAKEHOUSE_SPARK_CONF``. :data:`REQUIRED_CONF` always wins.
        log_level: Spark log level; default ``LAKEHOUSE_SPARK_LOG_LEVEL`` or ``WARN`` (Spark's
            INFO logging is off unless asked for). Set ``spark.ui.enabled=true`` in ``conf``
            to get the UI back.

    Raises:
        EnvironmentSetupError: Java is missing or older than 17, or the JVM exited as it
            started (the message has its reason).
    """
    try:
        import delta.tables  # noqa: F401  (delta-spark's Python API: lakehouse writes with it)
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise EnvironmentSetupError(
            f"{e.name} is not installed in this Python ({sys.executable}): install lakehouse "
            "with Spark, pip install 'lakehouse-temporal-join[spark]', or run it where Spark "
            "is (a Databricks runtime has pyspark and delta-spark)"
        ) from e

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
        prepare_session(active)
        return active
    master = master or os.environ.get("LAKEHOUSE_SPARK_MASTER", "local[*]")
    merged.update(local_files_conf(master, merged))
    merged.update(engine_conf(merged))
    _start_spark_context(app_name, master, merged)
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level or os.environ.get("LAKEHOUSE_SPARK_LOG_LEVEL", "WARN"))
    return spark


#: Lines the JVM writes to its stderr that say nothing to a user of lakehouse: Spark's launcher
#: always adds ``--add-modules=jdk.incubator.vector`` (JavaModuleOptions), and the JVM warns
#: about an incubator module at every start, before any logging is configured.
JVM_STDERR_NOISE: tuple[bytes, ...] = (b"WARNING: Using incubator modules:",)


def _start_spark_context(app_name: str, master: str, conf: Mapping[str, str]) -> None:
    """Start the JVM and the SparkContext, with the JVM's stderr passed through a filter that
    drops :data:`JVM_STDERR_NOISE` (everything else reaches this process's stderr, fd 2, as
    before). PySpark's ``launch_gateway`` takes the ``Popen`` arguments for this purpose."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    spark_conf = SparkConf().setAppName(app_name).setMaster(master)
    for key, value in conf.items():
        spark_conf.set(key, value)
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # a JVM that someone else started
        SparkContext(conf=spark_conf)
        return
    from pyspark.errors import PySparkRuntimeError

    # the filter reads the JVM's stderr from its first line: a JVM that exits before it is up
    # (a class its settings name is missing) says why there, and nowhere else
    read_end, write_end = os.pipe()
    said: collections.deque[bytes] = collections.deque(maxlen=50)
    forward = threading.Thread(
        target=_forward_jvm_stderr,
        args=(os.fdopen(read_end, "rb"), said),
        name="lakehouse-jvm-stderr",
        daemon=True,
    )
    forward.start()
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": write_end})
    except PySparkRuntimeError as e:
        os.close(write_end)  # the JVM's copy is closed: the filter reads to its end
        forward.join(timeout=5)  # the exited JVM's last lines
        raise EnvironmentSetupError(
            f"Spark's JVM exited before it started: {_jvm_failure(said)}; fix the setting or "
            "installation it names (LAKEHOUSE_SPARK_CONF, spark.jars, JAVA_HOME)"
        ) from e
    except BaseException:
        os.close(write_end)
        raise
    os.close(write_end)  # the JVM holds its own copy
    SparkContext(conf=spark_conf, gateway=gateway)


def _jvm_failure(lines: Iterable[bytes]) -> str:
    """The line of a JVM's stderr that says why it stopped: its last exception or error line
    (not a stack frame), else its last line.

    >>> _jvm_failure([b"WARN x", b"Exception in thread main java.lang.RuntimeException: boom",
    ...               b"Caused by: java.lang.ClassNotFoundException: Class a.B not found",
    ...               b"\\tat org.apache.hadoop.conf.Configuration.getClass(Configuration.java)"])
    'Caused by: java.lang.ClassNotFoundException: Class a.B not found'
    """
    text = [line.decode("utf-8", "replace").strip() for line in lines]
    text = [t for t in text if t]
    causes = [t for t in text if not t.startswith("at ") and ("Exception" in t or "Error" in t)]
    return (causes or text or ["it wrote nothing"])[-1]


def _forward_jvm_stderr(stream: Any, said: collections.deque[bytes]) -> None:
    """Copy the JVM's stderr to fd 2 line by line, leaving out :data:`JVM_STDERR_NOISE`, and
    keep the last lines in ``said``.

    Writes to the file descriptor, not ``sys.stderr``, as the JVM did when it inherited fd 2
    (a test's fd capture still sees the lines)."""
    with stream, os.fdopen(2, "wb", closefd=False) as out:
        for line in iter(stream.readline, b""):
            if not line.startswith(JVM_STDERR_NOISE):
                said.append(line)
                with contextlib.suppress(OSError):
                    out.write(line)
                    out.flush()
