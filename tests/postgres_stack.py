"""Real CDC for the tests: PostgreSQL, Debezium in a Kafka Connect worker, the Kafka broker.

``postgres`` (session) runs one throwaway cluster with logical decoding
(:mod:`lakehouse.testing.postgres`) and a replication user for Debezium. ``debezium_stack``
(function) gives each test its own database, topic prefix, topics (data, notifications,
heartbeats; created up front, as the ingest needs them to exist), slot and publication; the
test fills its tables, then calls :meth:`DebeziumStack.start_connector`, which starts a
standalone Connect worker (:mod:`lakehouse.testing.connect`) with Debezium's PostgreSQL
connector and waits until it runs. At the end the worker is stopped by its process id, and
the slot and the database are dropped.

A component that cannot start (PostgreSQL, its user, the jars, the worker, the connector)
raises with the reason and its log: the test fails, it is never skipped.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lakehouse.sources.kafka_admin import create_topic
from lakehouse.testing.connect import ConnectWorker, debezium_postgres_connector
from lakehouse.testing.postgres import PostgresCluster, postgres_cluster

#: Debezium's database user (``REPLICATION``, ``SELECT`` on the captured tables).
DEBEZIUM_USER = "debezium"
DEBEZIUM_PASSWORD = "dbz-test-secret"


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster (``wal_level=logical``) shared by the session, with the user
    :data:`DEBEZIUM_USER`."""
    with postgres_cluster() as cluster:
        cluster.create_replication_user(DEBEZIUM_USER, DEBEZIUM_PASSWORD)
        yield cluster


@dataclass
class DebeziumStack:
    """One test's share of the stack: its database, names and (once started) its worker."""

    postgres: PostgresCluster
    bootstrap: str
    name: str
    directory: Path
    worker: ConnectWorker | None = None
    connector: dict[str, str] = field(default_factory=dict)

    @property
    def dbname(self) -> str:
        """The test's database (also the slot's name)."""
        return self.name

    @property
    def topic_prefix(self) -> str:
        """Debezium's ``topic.prefix``: the data topic of ``schema.table`` is
        ``<prefix>.schema.table``."""
        return self.name

    @property
    def slot_name(self) -> str:
        """The replication slot of the test's connector."""
        return self.name

    @property
    def publication_name(self) -> str:
        """The publication of the test's captured tables."""
        return f"{self.name}_pub"

    @property
    def notification_topic(self) -> str:
        """Debezium's ``notification.sink.topic.name``."""
        return f"{self.name}.notifications"

    @property
    def heartbeat_topic(self) -> str:
        """Debezium's heartbeat topic (``__debezium-heartbeat.<topic.prefix>``)."""
        return f"__debezium-heartbeat.{self.topic_prefix}"

    def data_topic(self, table: str) -> str:
        """The data topic of ``schema.table``."""
        return f"{self.topic_prefix}.{table}"

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """Run SQL in the test's database as the superuser."""
        self.postgres.execute(self.dbname, sql, params)

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a query in the test's database as the superuser."""
        return self.postgres.query(self.dbname, sql, params)

    def create_data_topic(self, table: str) -> None:
        """Create the data topic of ``schema.table`` (one partition) unless it exists."""
        create_topic(self.bootstrap, self.data_topic(table), 1, exist_ok=True)

    def start_connector(
        self, tables: Sequence[str], *, notifications: bool = True, **options: Any
    ) -> ConnectWorker:
        """Capture ``tables`` (``schema.table``, existing): create their data topics and the
        publication, grant Debezium's user ``SELECT``, start the worker with the connector
        (notifications on the test's topic unless ``notifications`` is false; ``options`` go
        to :func:`debezium_postgres_connector`) and wait until it runs."""
        for table in tables:
            self.create_data_topic(table)
        self.postgres.grant_capture(self.dbname, DEBEZIUM_USER, tables)
        self.postgres.create_publication(self.dbname, self.publication_name, tables)
        self.connector = debezium_postgres_connector(
            f"{self.name}-connector",
            host=self.postgres.host,
            port=self.postgres.port,
            user=DEBEZIUM_USER,
            password=DEBEZIUM_PASSWORD,
            dbname=self.dbname,
            topic_prefix=self.topic_prefix,
            tables=tables,
            slot_name=self.slot_name,
            publication_name=self.publication_name,
            notification_topic=self.notification_topic if notifications else None,
            **options,
        )
        self.worker = ConnectWorker(self.directory / "connect", bootstrap=self.bootstrap)
        self.worker.start([self.connector])
        return self.worker

    def restart_connector(self, **changes: str) -> ConnectWorker:
        """Stop the worker (SIGTERM: Connect flushes the connector's offsets) and start it
        again on the same offsets file, with the connector's properties updated by
        ``changes`` (e.g. ``**{"snapshot.mode": "always"}``)."""
        assert self.worker is not None, "start_connector first"
        self.worker.stop()
        self.connector = self.connector | changes
        self.worker.start([self.connector])
        return self.worker

    def close(self) -> None:
        """Stop the worker, then drop the slot (it holds WAL) and the database."""
        if self.worker is not None:
            self.worker.stop()
        self.postgres.drop_replication_slot(self.slot_name)
        self.postgres.execute("postgres", f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')


@pytest.fixture
def debezium_stack(
    postgres: PostgresCluster,
    kafka_broker: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[DebeziumStack]:
    """A database, a topic prefix and the signal topics of this test's own; see
    :class:`DebeziumStack`."""
    stem = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower().removeprefix("test_"))
    stem = stem.strip("_")[:24]
    stack = DebeziumStack(
        postgres,
        kafka_broker,
        name=f"{stem}_{uuid.uuid4().hex[:6]}",
        directory=tmp_path / "debezium",
    )
    postgres.create_database(stack.dbname)
    try:
        for topic in (stack.notification_topic, stack.heartbeat_topic):
            create_topic(kafka_broker, topic, 1)
        yield stack
    finally:
        stack.close()
