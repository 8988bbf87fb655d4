"""A real Apache Kafka broker for tests, the demo, the soak run and the benchmarks.

One KRaft node (broker and controller in one JVM) from the jars ``make jvm`` copies into
``.jvm/kafka`` (pinned by ``jvm/kafka/pom.xml``), on free loopback ports, with its log
directory, configuration and log file in a directory of the caller's choosing. Its data is
on disk: a broker that is killed (even with SIGKILL) and started again on the same ports and
directory comes back with its topics and records, as a production broker does.

Usage::

    with kafka_broker(tmp_dir) as broker:
        create_topic(broker.bootstrap, "orders", 3)
        ...

    broker = KafkaBroker(tmp_dir)      # or by hand, e.g. to kill and restart it
    broker.start()
    broker.kill()                      # SIGKILL, as a crash
    broker.start()                     # same ports, same log
    broker.stop()

With ``sasl_users`` the broker also listens on a ``SASL_PLAINTEXT`` port (SASL/PLAIN, the
given users and passwords) whose address is :attr:`KafkaBroker.sasl_bootstrap`; the plain
listener stays, for the test's own admin and producer clients.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from lakehouse.errors import EnvironmentSetupError

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
#: Heap of the broker JVM; a test broker holds little, and it shares the machine with Spark.
HEAP = "384m"
#: JVM options of every JVM the tests start (this broker, Connect, Spark's daemons, and the
#: Spark drivers and executors through tests/conftest.py): C1 only and the serial GC. A test's
#: JVM lives seconds on kilobytes, where C2's compiler threads cost more CPU than they return;
#: neither option changes a result. With C1 alone the JVM reserves 48 MB for compiled code
#: instead of 240 MB, and a driver that runs for minutes filled it (the files-mode demo, 41 s
#: in: "CodeCache is full. Compiler has been disabled", interpreted from there on); the code
#: cache keeps the size both tiers get (address space reserved, not memory used).
TEST_JVM_OPTIONS: tuple[str, ...] = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:ReservedCodeCacheSize=240m",
)

_LOG4J2 = """\
# written by lakehouse.testing.broker: the broker logs to broker.log in its directory
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.kafkaorg.name = org.apache.kafka
logger.kafkaorg.level = {level}
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def kafka_jars() -> Path:
    """The folder of the broker's jars (``<jvm dir>/kafka``).

    Raises:
        EnvironmentSetupError: ``make jvm`` has not fetched them.
    """
    from lakehouse.spark import jvm_dir

    folder = jvm_dir() / "kafka"
    if not any(folder.glob("kafka_2.13-*.jar")):
        raise EnvironmentSetupError(
            f"the Kafka broker's jars are not in '{folder}'; run 'make jvm' in the checkout "
            "(Maven fetches them from Maven Central), or set LAKEHOUSE_JVM_DIR to a folder "
            "whose kafka/ has them"
        )
    return folder


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise EnvironmentSetupError(
            "Java was not found: the Kafka broker needs Java 17 or newer. Install it "
            "(Debian/Ubuntu: 'apt-get install openjdk-17-jre-headless') or set JAVA_HOME."
        )
    return java


def _jaas_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


class KafkaBroker:
    """One KRaft Kafka node in ``directory`` (created if needed); see the module docstring.

    Ports are chosen when the object is made and kept across restarts. ``start()`` formats
    the storage on first use only, so a restarted broker keeps its log.
    """

    def __init__(
        self,
        directory: Path,
        *,
        sasl_users: Mapping[str, str] | None = None,
        log_level: str = "INFO",
        heap: str = HEAP,
    ) -> None:
        self.directory = Path(directory).resolve()
        self.port = free_port()
        self.controller_port = free_port()
        self.sasl_port = free_port() if sasl_users else None
        self.sasl_users = dict(sasl_users or {})
        self.log_level = log_level
        self.heap = heap
        self.process: subprocess.Popen[bytes] | None = None
        self._jars = kafka_jars()

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the PLAINTEXT listener."""
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the SASL_PLAINTEXT listener (SASL/PLAIN)."""
        if self.sasl_port is None:
            raise ValueError("this broker was made without sasl_users")
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def log_path(self) -> Path:
        """The broker's log file (log4j2), in its directory."""
        return self.directory / "broker.log"

    @property
    def pid(self) -> int | None:
        """Process id of the running broker, or None."""
        return self.process.pid if self.process is not None else None

    def _write_config(self) -> Path:
        listeners = [
            f"PLAINTEXT://127.0.0.1:{self.port}",
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
        ]
        advertised = [f"PLAINTEXT://127.0.0.1:{self.port}"]
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        lines = [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={self.directory / 'data'}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "transaction.state.log.num.partitions=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # a restarted node waits for its previous session to expire before it serves:
            # keep that short (defaults 9 s and 2 s)
            "broker.session.timeout.ms=2000",
            "broker.heartbeat.interval.ms=500",
            "num.network.threads=2",
            "num.io.threads=2",
            "background.threads=2",
            "log.cleaner.enable=false",
        ]
        if self.sasl_port is not None:
            listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}")
            advertised.append(f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}")
            protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
            users = " ".join(
                f'user_{name}="{_jaas_value(password)}"'
                for name, password in self.sasl_users.items()
            )
            lines += [
                "sasl.enabled.mechanisms=PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config="
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
            ]
        lines += [
            f"listeners={','.join(listeners)}",
            f"advertised.listeners={','.join(advertised)}",
            f"listener.security.protocol.map={','.join(protocols)}",
        ]
        config = self.directory / "server.properties"
        config.write_text("\n".join(lines) + "\n")
        (self.directory / "log4j2.properties").write_text(
            _LOG4J2.format(level=self.log_level, log=self.log_path)
        )
        return config

    def _java_command(self, main: str, *args: str) -> list[str]:
        return [
            _java(),
            f"-Xmx{self.heap}",
            "-Xms64m",
            *TEST_JVM_OPTIONS,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.directory}",
            "-cp",
            f"{self._jars}/*",
            main,
            *args,
        ]

    def _format(self, config: Path) -> None:
        if (self.directory / "data" / "meta.properties").exists():
            return
        cluster_id = "-"
        while cluster_id.startswith("-"):  # as Kafka's Uuid.randomUuid: "-..." reads as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        done = subprocess.run(
            self._java_command(
                "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)
            ),
            capture_output=True,
            text=True,
            check=False,
            timeout=START_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise EnvironmentSetupError(
                f"formatting the Kafka broker's storage in '{self.directory}' failed "
                f"(exit {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
            )

    def start(self) -> str:
        """Start the broker (format its storage on first use) and wait until it answers.

        Returns:
            :attr:`bootstrap`.

        Raises:
            EnvironmentSetupError: Java or the jars are missing, or the broker exits or
                does not answer within ``START_TIMEOUT_S`` (the message quotes its log).
        """
        if self.process is not None and self.process.poll() is None:
            return self.bootstrap
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        self._format(config)
        with open(self.directory / "broker.out", "ab") as out:
            self.process = subprocess.Popen(
                self._java_command("kafka.Kafka", str(config)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        atexit.register(self.stop)  # a broker never outlives a Python process that exits
        self._wait_until_ready()
        return self.bootstrap

    def _tail(self) -> str:
        parts = []
        for path in (self.directory / "broker.out", self.log_path):
            if path.exists():
                parts.append(f"{path}:\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def _wait_until_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        assert self.process is not None
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise EnvironmentSetupError(
                    f"the Kafka broker exited with {self.process.returncode} before answering "
                    f"on {self.bootstrap}; its output:\n{self._tail()}"
                )
            try:
                metadata = admin.list_topics(timeout=1.0)
                if metadata.brokers and self._coordinator_ready():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise EnvironmentSetupError(
                    f"the Kafka broker did not answer on {self.bootstrap} within "
                    f"{START_TIMEOUT_S:.0f} s; its output:\n{self._tail()}"
                )
            time.sleep(0.2)

    def _coordinator_ready(self) -> bool:
        """Whether the transaction coordinator serves producer ids: an idempotent producer's
        first request creates its topic, and until it is loaded librdkafka warns on stderr
        ("Coordinator load in progress"). A transactional init does it here, quietly."""
        import logging

        from confluent_kafka import KafkaException, Producer

        quiet = logging.getLogger("lakehouse.testing.broker.ready")
        quiet.propagate = False
        quiet.addHandler(logging.NullHandler())
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": "lakehouse-broker-ready",
                "logger": quiet,
            }
        )
        try:
            producer.init_transactions(5.0)
        except KafkaException:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL the broker (a crash: no clean shutdown) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=STOP_TIMEOUT_S)

    def pause(self) -> None:
        """SIGSTOP the broker: a hung broker, whose sockets accept connections and requests
        but never answer (unlike a dead one, whose connections are refused)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused broker."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Stop the broker by its process id: terminate, then kill after ``STOP_TIMEOUT_S``."""
        atexit.unregister(self.stop)
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGCONT)  # a paused broker cannot act on the terminate
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def kafka_broker(
    directory: Path, *, sasl_users: Mapping[str, str] | None = None
) -> Iterator[KafkaBroker]:
    """Run a :class:`KafkaBroker` in ``directory`` for the ``with`` block; stop it at exit."""
    broker = KafkaBroker(directory, sasl_users=sasl_users)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
