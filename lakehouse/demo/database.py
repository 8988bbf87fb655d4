"""The real source of ``lakehouse demo --source postgres``: PostgreSQL, Debezium, Kafka Connect.

:class:`DemoDatabase` runs, on this machine and on loopback only:

* a throwaway PostgreSQL cluster with logical decoding (:mod:`lakehouse.testing.postgres`;
  the server of the machine's ``postgresql`` package), with the database ``shop`` and its
  table ``public.rates``, loaded before the connector starts so that Debezium snapshots it;
* Debezium's PostgreSQL connector in a standalone Kafka Connect worker
  (:mod:`lakehouse.testing.connect`; the jars ``make`` fetches into ``.jvm/connect``),
  configured as docs/get-started/demo.md shows: ``pgoutput``, a publication the
  database owner created, an ``initial`` snapshot, notifications on their own topic and
  heartbeats every second.

Its topics are the ones the generated demo writes: ``dbserver1.public.rates`` (the data),
plus ``dbserver1.notifications`` and ``__debezium-heartbeat.dbserver1`` (the signals the
ingest sets the snapshot marker from). Everything is stopped by process id at the end, and
the cluster's directory is removed.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import Any

from lakehouse.demo.data import Statement
from lakehouse.dimension.signals import parse_notification
from lakehouse.errors import EnvironmentSetupError
from lakehouse.testing.connect import ConnectWorker, connect_jars, debezium_postgres_connector
from lakehouse.testing.postgres import PostgresCluster, postgres_bindir, psycopg_driver

DATABASE = "shop"
TABLE = "public.rates"
#: Debezium's ``topic.prefix``: the data topic is ``dbserver1.public.rates``.
TOPIC_PREFIX = "dbserver1"
NOTIFICATION_TOPIC = f"{TOPIC_PREFIX}.notifications"
HEARTBEAT_TOPIC = f"__debezium-heartbeat.{TOPIC_PREFIX}"
CONNECTOR = "rates-cdc"
SLOT = PUBLICATION = "lakehouse_demo"
#: The connector's database user: ``REPLICATION``, and ``SELECT`` on the captured table.
USER = "debezium"
SNAPSHOT_TIMEOUT_S = 120.0


def check_requirements() -> None:
    """Fail early, before anything starts, when the machine cannot run the database side.

    Raises:
        EnvironmentSetupError: PostgreSQL's server, its driver (psycopg) or the Kafka Connect
            and Debezium jars are missing (the message says how to install them).
    """
    postgres_bindir()
    psycopg_driver()
    connect_jars()


class DemoDatabase:
    """The database, its table and (after :meth:`start_connector`) the connector; a context
    manager that stops everything it started, in reverse order."""

    def __init__(self, directory: Path, *, bootstrap: str, rates: Mapping[str, Decimal]) -> None:
        self.directory = directory
        self.bootstrap = bootstrap
        self.rates = dict(rates)
        self.postgres = PostgresCluster()
        self.worker: ConnectWorker | None = None
        self._password = secrets.token_urlsafe(16)
        self._connection: Any = None

    def __enter__(self) -> DemoDatabase:
        self.postgres.start()
        try:
            self._create()
        except BaseException:
            self.postgres.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._connection is not None:
            self._connection.close()
        if self.worker is not None:
            self.worker.stop()
        self.postgres.stop()

    def _create(self) -> None:
        pg = self.postgres
        pg.create_database(DATABASE)
        with pg.connect(DATABASE) as conn:
            conn.execute(
                "CREATE TABLE public.rates (currency text PRIMARY KEY, rate numeric(10,4) NOT NULL)"
            )
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO public.rates (currency, rate) VALUES (%s, %s)",
                    sorted(self.rates.items()),
                )
        pg.create_replication_user(USER, self._password)
        pg.grant_capture(DATABASE, USER, [TABLE])
        pg.create_publication(DATABASE, PUBLICATION, [TABLE])

    def connector(self) -> dict[str, str]:
        """The connector's properties (the password included)."""
        return debezium_postgres_connector(
            CONNECTOR,
            host=self.postgres.host,
            port=self.postgres.port,
            user=USER,
            password=self._password,
            dbname=DATABASE,
            topic_prefix=TOPIC_PREFIX,
            tables=[TABLE],
            slot_name=SLOT,
            publication_name=PUBLICATION,
            notification_topic=NOTIFICATION_TOPIC,
        )

    def write_connector_config(self, path: Path) -> Path:
        """Write the connector's configuration as Kafka Connect's REST API takes it
        (``POST /connectors``), the password replaced by a placeholder; returns ``path``."""
        config = self.connector() | {"database.password": "<the debezium user's password>"}
        name = config.pop("name")
        path.write_text(json.dumps({"name": name, "config": config}, indent=2) + "\n")
        return path

    def start_connector(self) -> ConnectWorker:
        """Start the Connect worker with the connector and wait until it runs (its
        snapshot then starts).

        Raises:
            EnvironmentSetupError: the jars are missing, or the worker or the connector fails
                (the message quotes the worker's log).
        """
        self.worker = ConnectWorker(self.directory / "connect", bootstrap=self.bootstrap)
        self.worker.start([self.connector()])
        return self.worker

    def wait_snapshot_read(self, timeout_s: float = SNAPSHOT_TIMEOUT_S) -> float:
        """Wait until Debezium says its initial snapshot is complete (its ``COMPLETED``
        notification is on the notification topic): every row is in Kafka, though the ingest
        may not have loaded it yet. Returns the seconds it took.

        Raises:
            EnvironmentSetupError: no such notification within ``timeout_s``.
        """
        from confluent_kafka import Consumer, TopicPartition

        started = time.monotonic()
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "lakehouse-demo-snapshot-watch",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign([TopicPartition(NOTIFICATION_TOPIC, 0, 0)])
            while time.monotonic() - started < timeout_s:
                message = consumer.poll(0.5)
                if message is None or message.error() or not message.value():
                    continue
                note = parse_notification(
                    message.value(),
                    topic=NOTIFICATION_TOPIC,
                    partition=0,
                    offset=message.offset() or 0,  # a polled record has its offset
                    kafka_ts_ms=message.timestamp()[1],
                )
                if note is not None and note.aggregate_type == "Initial Snapshot":
                    if note.type == "ABORTED":
                        break
                    if note.type == "COMPLETED":
                        return time.monotonic() - started
        finally:
            consumer.close()
        log = self.worker.log_path if self.worker is not None else "(no worker)"
        raise EnvironmentSetupError(
            f"Debezium did not complete its snapshot of {TABLE} within {timeout_s:.0f} s; "
            f"see the Kafka Connect worker's log: {log}"
        )

    def apply(self, transactions: Sequence[Sequence[Statement]]) -> None:
        """Run each transaction (its statements, then ``COMMIT``) on one connection."""
        if self._connection is None:
            self._connection = self.postgres.connect(DATABASE)
        for statements in transactions:
            with self._connection.transaction():
                for sql, params in statements:
                    self._connection.execute(sql, params)
