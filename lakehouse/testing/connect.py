"""A Kafka Connect worker (standalone) running Debezium's PostgreSQL connector, for tests.

Debezium run the way users run it: ``org.apache.kafka.connect.cli.ConnectStandalone`` with a
worker properties file and a connector properties file, from the jars ``make jvm`` copies
into ``.jvm/connect`` (pinned by ``jvm/connect/pom.xml``: the Connect runtime at the test
broker's Kafka version, Debezium's PostgreSQL connector on its classpath). The worker writes
JSON with schemas (``JsonConverter``, ``schemas.enable=true``) for keys and values, keeps its
source offsets in a file in its directory, and serves its REST API on a free loopback port;
:meth:`ConnectWorker.start` waits until every connector and its tasks are ``RUNNING`` there.
It is stopped by its process id.

Usage::

    config = debezium_postgres_connector(
        "rates-cdc", host=pg.host, port=pg.port, user="debezium", password="secret",
        dbname="shop", topic_prefix="shop", tables=["public.rates"], slot_name="rates_slot",
        publication_name="rates_pub", notification_topic="shop-notifications")
    with connect_worker(tmp_dir, bootstrap=broker, connectors=[config]) as worker:
        ...  # records arrive on shop.public.rates, shop-notifications, __debezium-heartbeat.shop
"""

from __future__ import annotations

import atexit
import contextlib
import json
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lakehouse.errors import EnvironmentSetupError
from lakehouse.testing.broker import TEST_JVM_OPTIONS, _java, free_port

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
#: Heap of the worker JVM: one connector with one task, sharing the machine with Spark.
HEAP = "384m"
#: The connector class of Debezium's PostgreSQL connector.
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"

_LOG4J2 = """\
# written by lakehouse.testing.connect: the worker logs to connect.log in its directory
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
logger.reflections.name = org.reflections
logger.reflections.level = error
"""


def connect_jars() -> Path:
    """The folder of the worker's jars (``<jvm dir>/connect``).

    Raises:
        EnvironmentSetupError: ``make jvm`` has not fetched them.
    """
    from lakehouse.spark import jvm_dir

    folder = jvm_dir() / "connect"
    if not any(folder.glob("connect-runtime-*.jar")) or not any(
        folder.glob("debezium-connector-postgres-*.jar")
    ):
        raise EnvironmentSetupError(
            f"the Kafka Connect worker's and Debezium's jars are not in '{folder}'; run "
            "'make jvm' in the checkout (Maven fetches them from Maven Central, see "
            "jvm/connect/pom.xml), or set LAKEHOUSE_JVM_DIR to a folder whose connect/ has them"
        )
    return folder


def debezium_version() -> str:
    """The Debezium version in ``.jvm/connect`` (e.g. ``3.5.0.Final``), from its jar's name."""
    jar = next(connect_jars().glob("debezium-connector-postgres-*.jar"))
    return jar.stem.removeprefix("debezium-connector-postgres-")


def debezium_postgres_connector(
    name: str,
    *,
    host: str,
    port: int,
    user: str,
    password: str,
    dbname: str,
    topic_prefix: str,
    tables: Sequence[str],
    slot_name: str,
    publication_name: str,
    notification_topic: str | None = None,
    heartbeat_interval_ms: int = 1_000,
    snapshot_mode: str = "initial",
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The properties of a Debezium PostgreSQL connector as the README documents them.

    ``pgoutput`` (built into PostgreSQL 10+), the given slot and an existing publication
    (``publication.autocreate.mode=disabled``: the database's owner creates it, so the
    connector's user needs only ``REPLICATION`` and ``SELECT``), an ``initial`` snapshot,
    heartbeats every ``heartbeat_interval_ms`` (topic ``__debezium-heartbeat.<topic_prefix>``)
    and, with ``notification_topic``, notifications on that topic (the ingest's strongest
    snapshot signal). ``extra`` adds or overrides properties.
    """
    config = {
        "name": name,
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": host,
        "database.port": str(port),
        "database.user": user,
        "database.password": password,
        "database.dbname": dbname,
        "topic.prefix": topic_prefix,
        "table.include.list": ",".join(tables),
        "slot.name": slot_name,
        "publication.name": publication_name,
        "publication.autocreate.mode": "disabled",
        "snapshot.mode": snapshot_mode,
        "heartbeat.interval.ms": str(heartbeat_interval_ms),
        # topics the connector writes to that do not exist yet are created by the worker
        # (the test broker does not create topics on its own)
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
    }
    if notification_topic:
        config |= {
            "notification.enabled.channels": "sink",
            "notification.sink.topic.name": notification_topic,
        }
    return config | dict(extra or {})


def _properties(values: Mapping[str, str]) -> str:
    def escape(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n")

    return "".join(f"{escape(k)}={escape(v)}\n" for k, v in values.items())


class ConnectWorker:
    """A standalone Kafka Connect worker in ``directory`` (created if needed); see the module
    docstring. The REST port is chosen when the object is made."""

    def __init__(
        self,
        directory: Path,
        *,
        bootstrap: str,
        log_level: str = "INFO",
        heap: str = HEAP,
    ) -> None:
        self.directory = Path(directory).resolve()
        self.bootstrap = bootstrap
        self.rest_port = free_port()
        self.log_level = log_level
        self.heap = heap
        self.process: subprocess.Popen[bytes] | None = None
        self.connectors: list[str] = []
        self._jars = connect_jars()

    @property
    def rest_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the worker's REST API."""
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def log_path(self) -> Path:
        """The worker's log file (log4j2), in its directory."""
        return self.directory / "connect.log"

    @property
    def offsets_path(self) -> Path:
        """The file that holds the source connectors' offsets."""
        return self.directory / "connect.offsets"

    @property
    def pid(self) -> int | None:
        """Process id of the running worker, or None."""
        return self.process.pid if self.process is not None else None

    def _write_worker_config(self) -> Path:
        config = {
            "bootstrap.servers": self.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "offset.storage.file.filename": str(self.offsets_path),
            "offset.flush.interval.ms": "1000",
            "listeners": self.rest_url,
            # the connector is on the classpath (jvm/connect/pom.xml); no plugin folders
            "plugin.path": "",
            # every plugin used here ships a ServiceLoader manifest: no classpath scan
            "plugin.discovery": "service_load",
        }
        path = self.directory / "worker.properties"
        path.write_text(_properties(config))
        (self.directory / "log4j2.properties").write_text(
            _LOG4J2.format(level=self.log_level, log=self.log_path)
        )
        return path

    def _java_command(self, *args: str) -> list[str]:
        return [
            _java(),
            f"-Xmx{self.heap}",
            "-Xms64m",
            *TEST_JVM_OPTIONS,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            "-cp",
            f"{self._jars}/*",
            "org.apache.kafka.connect.cli.ConnectStandalone",
            *args,
        ]

    def start(self, connectors: Sequence[Mapping[str, str]]) -> ConnectWorker:
        """Start the worker with ``connectors`` (property maps, each with ``name``) and wait
        until each connector and all its tasks are ``RUNNING``.

        Raises:
            EnvironmentSetupError: Java or the jars are missing, the worker exits, a connector
                or task fails, or they are not running within ``START_TIMEOUT_S`` (the
                message quotes the failure's trace and the worker's log).
        """
        if self.process is not None and self.process.poll() is None:
            return self
        self.directory.mkdir(parents=True, exist_ok=True)
        worker = self._write_worker_config()
        files = []
        for connector in connectors:
            name = connector["name"]
            path = self.directory / f"connector-{name}.properties"
            path.write_text(_properties(connector))
            files.append(str(path))
        self.connectors = [c["name"] for c in connectors]
        with open(self.directory / "connect.out", "ab") as out:
            self.process = subprocess.Popen(
                self._java_command(str(worker), *files),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        atexit.register(self.stop)  # a worker never outlives a Python process that exits
        deadline = time.monotonic() + START_TIMEOUT_S
        for name in self.connectors:
            self.wait_running(name, deadline=deadline)
        return self

    def status(self, name: str) -> dict[str, Any] | None:
        """The REST status of connector ``name`` (``GET /connectors/NAME/status``), or None
        while the worker does not answer or does not know it yet."""
        url = f"{self.rest_url}/connectors/{urllib.parse.quote(name)}/status"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def wait_running(self, name: str, *, deadline: float | None = None) -> dict[str, Any]:
        """Wait until connector ``name`` and all its tasks (at least one) are ``RUNNING``;
        returns the status.

        Raises:
            EnvironmentSetupError: the worker exited, the connector or a task ``FAILED``, or
                the deadline (``time.monotonic()``; default ``START_TIMEOUT_S`` from now)
                passed.
        """
        assert self.process is not None, "the worker is not started"
        deadline = deadline if deadline is not None else time.monotonic() + START_TIMEOUT_S
        status: dict[str, Any] | None = None
        while True:
            if self.process.poll() is not None:
                raise EnvironmentSetupError(
                    f"the Kafka Connect worker exited with {self.process.returncode} before "
                    f"connector '{name}' was running; its output:\n{self._tail()}"
                )
            status = self.status(name)
            if status is not None:
                states = [status.get("connector", {}).get("state")] + [
                    t.get("state") for t in status.get("tasks", [])
                ]
                if "FAILED" in states:
                    self.stop()
                    traces = [
                        part.get("trace", "")
                        for part in [status.get("connector", {}), *status.get("tasks", [])]
                        if part.get("state") == "FAILED"
                    ]
                    raise EnvironmentSetupError(
                        f"Debezium connector '{name}' failed in the Kafka Connect worker: "
                        f"{traces[0][:3000] if traces else status}\nthe worker's log:\n"
                        f"{self._tail()}"
                    )
                if len(states) > 1 and all(s == "RUNNING" for s in states):
                    return status
            if time.monotonic() > deadline:
                self.stop()
                raise EnvironmentSetupError(
                    f"connector '{name}' was not running in the Kafka Connect worker "
                    f"({self.rest_url}) within {START_TIMEOUT_S:.0f} s (last status: "
                    f"{status}); the worker's log:\n{self._tail()}"
                )
            time.sleep(0.25)

    def _tail(self) -> str:
        parts = []
        for path in (self.directory / "connect.out", self.log_path):
            if path.exists():
                parts.append(f"{path}:\n" + path.read_text(errors="replace")[-4000:])
        return "\n".join(parts) or "(no log)"

    def stop(self) -> None:
        """Stop the worker by its process id: SIGTERM (Connect stops its connectors and
        flushes their offsets), SIGKILL after ``STOP_TIMEOUT_S``."""
        atexit.unregister(self.stop)
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def connect_worker(
    directory: Path, *, bootstrap: str, connectors: Sequence[Mapping[str, str]]
) -> Iterator[ConnectWorker]:
    """Run a :class:`ConnectWorker` with ``connectors`` for the ``with`` block; stop it at
    exit."""
    worker = ConnectWorker(directory, bootstrap=bootstrap)
    try:
        worker.start(connectors)
        yield worker
    finally:
        worker.stop()
