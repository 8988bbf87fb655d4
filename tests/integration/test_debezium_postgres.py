"""Real CDC end to end: PostgreSQL (logical decoding, ``pgoutput``), Debezium's PostgreSQL
connector in a Kafka Connect worker, the Kafka broker, and lakehouse's own parser and ingest.

Each test has its own database, topic prefix, slot and worker (``debezium_stack``, see
tests/postgres_stack.py). ``LAKEHOUSE_CAPTURE_FIXTURES=DIR`` makes the smoke test write the
real messages it saw as fixture files into DIR (how tests/fixtures/debezium/postgres_3.5.0_*
were made).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from postgres_stack import DEBEZIUM_USER
from pyspark.sql.streaming import StreamingQuery

from lakehouse import delta
from lakehouse.cdc import ChangeEvent, Tombstone, decode_message
from lakehouse.config import Settings, load_settings
from lakehouse.dimension.layout import (
    META_SNAPSHOT_ENDED,
    PROP_PRIMARY_KEY,
    PROP_SCHEMA_BLOCK,
    PROP_SNAPSHOT_ALERT,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_FIRST_COMPLETED_VERSION,
    PROP_SNAPSHOT_LAST_COMPLETE,
    PROP_SNAPSHOT_SIGNAL,
    PROP_SNAPSHOT_SIGNAL_DETAIL,
    PROP_SNAPSHOT_STATE,
)
from lakehouse.dimension.signals import parse_heartbeat, parse_notification
from lakehouse.runner import start_ingest
from lakehouse.testing.connect import debezium_version

pytestmark = [pytest.mark.slow, pytest.mark.broker, pytest.mark.debezium]

TABLE = "public.rates"
ROWS = 1000
#: ``(key, value, Kafka timestamp ms, offset)``
Record = tuple[bytes | None, bytes | None, int, int]


def _currency(i: int, rows: int = ROWS) -> str:
    """The key of row ``i`` of a rates table of ``rows`` rows (``C0001``, ...)."""
    return f"C{i:0{max(4, len(str(rows)))}d}"


def _create_rates(stack, rows: int = ROWS, table: str = TABLE) -> dict[str, Decimal]:
    stack.execute(f"CREATE TABLE {table} (currency text PRIMARY KEY, rate numeric(10,4))")
    width = len(_currency(rows, rows)) - 1
    stack.execute(
        f"INSERT INTO {table} SELECT 'C' || lpad(i::text, {width}, '0'), round(i / 7.0, 4) "
        "FROM generate_series(1, %s) i",
        (rows,),
    )
    return dict(stack.query(f"SELECT currency, rate FROM {table}"))


class _Reader:
    """Reads topics (one partition each) from the beginning, keeping every record."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "debezium-test-reader",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        self.consumer.assign([TopicPartition(t, 0, 0) for t in topics])
        self.records: dict[str, list[Record]] = {t: [] for t in topics}

    def read_until(
        self, done: Callable[[dict[str, list[Record]]], bool], what: str, timeout_s: float = 90
    ) -> float:
        """Poll until ``done(records)``; returns the seconds it took."""
        started = time.monotonic()
        while not done(self.records):
            if time.monotonic() - started > timeout_s:
                counts = {t: len(r) for t, r in self.records.items()}
                raise AssertionError(f"{what}: not within {timeout_s} s; records so far {counts}")
            message = self.consumer.poll(0.2)
            if message is None or message.error():
                continue
            self.records[message.topic()].append(
                (message.key(), message.value(), message.timestamp()[1], message.offset())
            )
        return time.monotonic() - started

    def close(self) -> None:
        self.consumer.close()


def _capture(files: dict[str, bytes]) -> None:
    """Write the real messages as fixture files when LAKEHOUSE_CAPTURE_FIXTURES is set."""
    target = os.environ.get("LAKEHOUSE_CAPTURE_FIXTURES")
    if not target:
        return
    for name, raw in files.items():
        path = Path(target) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(json.loads(raw), indent=2) + "\n")
    print(f"captured {len(files)} fixture files into {target}")


def test_debezium_snapshot_and_changes_reach_kafka_and_parse(debezium_stack):
    started = time.monotonic()
    expected = _create_rates(debezium_stack)
    data = debezium_stack.data_topic(TABLE)
    notes, beats = debezium_stack.notification_topic, debezium_stack.heartbeat_topic
    debezium_stack.start_connector([TABLE])
    running = time.monotonic() - started
    reader = _Reader(debezium_stack.bootstrap, [data, notes, beats])
    try:

        def snapshot_done(records):
            types = [json.loads(v)["payload"]["type"] for _, v, _, _ in records[notes] if v]
            return len(records[data]) >= ROWS and "COMPLETED" in types and records[beats]

        snapshot_s = reader.read_until(snapshot_done, "the snapshot, notifications, heartbeat")
        debezium_stack.execute("UPDATE public.rates SET rate = 9.9999 WHERE currency = 'C0001'")
        debezium_stack.execute("DELETE FROM public.rates WHERE currency = 'C0002'")
        # the update, the delete and the delete's tombstone
        log_s = reader.read_until(lambda r: len(r[data]) >= ROWS + 3, "the update and delete")
    finally:
        reader.close()
    print(
        f"\nDebezium {debezium_version()}: worker and connector running {running:.1f} s after "
        f"the test started; {ROWS} snapshot records, notifications and a heartbeat read in "
        f"{snapshot_s:.1f} s; the update and delete in {log_s:.1f} s"
    )

    records = reader.records[data]
    assert len(records) == ROWS + 3  # nothing more, nothing twice
    snapshot, log = records[:ROWS], records[ROWS:]

    # the product's parser accepts every snapshot record, with the values PostgreSQL holds
    events = [decode_message(value, key=key) for key, value, _, _ in snapshot]
    assert all(isinstance(e, ChangeEvent) and e.op == "r" for e in events)
    assert {e.row["currency"]: e.row["rate"] for e in events} == expected
    assert {e.columns for e in events} == {(("currency", "string"), ("rate", "decimal(10,4)"))}
    assert all(e.key == {"currency": e.row["currency"]} for e in events)
    assert all(e.key_columns == ("currency",) for e in events)
    assert {e.source_table for e in events} == {TABLE}
    # one table: its first row says 'first', its last 'last'; one position for the snapshot
    assert Counter(e.snapshot for e in events) == {"first": 1, "true": ROWS - 2, "last": 1}
    assert (events[0].snapshot, events[-1].snapshot) == ("first", "last")
    assert len({e.seq for e in events}) == 1

    update, delete, tombstone = (decode_message(v, key=k) for k, v, _, _ in log)
    assert isinstance(update, ChangeEvent) and isinstance(delete, ChangeEvent)
    assert (update.op, update.snapshot, update.row) == (
        "u",
        "false",
        {"currency": "C0001", "rate": Decimal("9.9999")},
    )
    # REPLICA IDENTITY DEFAULT: the delete's before image holds the key only
    assert (delete.op, delete.row, delete.key) == (
        "d",
        {"currency": "C0002", "rate": None},
        {"currency": "C0002"},
    )
    assert tombstone == Tombstone(key={"currency": "C0002"}, key_columns=("currency",))
    assert events[0].seq < update.seq < delete.seq

    # the notifications of the initial snapshot, in Kafka time: TABLE_SCAN_COMPLETED after
    # every row of the table but its final one, which Debezium holds back until the whole
    # snapshot ends (to mark it 'last'), so it may come a millisecond later; COMPLETED and
    # the first heartbeat after every row
    last_row_ts = max(ts for _, _, ts, _ in snapshot)
    parsed = [
        parse_notification(v, topic=notes, partition=0, offset=o, kafka_ts_ms=ts)
        for _, v, ts, o in reader.records[notes]
    ]
    assert [(n.aggregate_type, n.type) for n in parsed] == [
        ("Initial Snapshot", "STARTED"),
        ("Initial Snapshot", "IN_PROGRESS"),
        ("Initial Snapshot", "TABLE_SCAN_COMPLETED"),
        ("Initial Snapshot", "COMPLETED"),
    ]
    scan, completed = parsed[2], parsed[3]
    assert (scan.collection, scan.status) == (TABLE, "SUCCEEDED")
    assert scan.concerns(TABLE) and completed.concerns(TABLE)
    assert scan.kafka_ts_ms >= max(ts for _, _, ts, _ in snapshot[:-1])
    assert completed.kafka_ts_ms >= last_row_ts
    heartbeats = [
        parse_heartbeat(v, topic=beats, partition=0, offset=o, kafka_ts_ms=ts)
        for _, v, ts, o in reader.records[beats]
    ]
    assert heartbeats and heartbeats[0].kafka_ts_ms >= last_row_ts

    version = debezium_version().removesuffix(".Final")
    _capture(
        {
            f"postgres_{version}_snapshot_read_first_with_schema.json": snapshot[0][1],
            f"postgres_{version}_snapshot_read_last_with_schema.json": snapshot[-1][1],
            f"postgres_{version}_update_with_schema.json": log[0][1],
            f"postgres_{version}_delete_with_schema.json": log[1][1],
            f"postgres_{version}_delete_key_with_schema.json": log[1][0],
            f"signals/postgres_{version}_notification_table_scan_completed_with_schema.json": (
                reader.records[notes][2][1]
            ),
            f"signals/postgres_{version}_notification_completed_with_schema.json": (
                reader.records[notes][3][1]
            ),
            f"signals/postgres_{version}_heartbeat_with_schema.json": reader.records[beats][0][1],
        }
    )


def _ingest_settings(
    stack, tmp_path: Path, pipeline_id: str, tables: list[dict], **kafka: object
) -> Settings:
    """A long-running Kafka ingest (processing-time trigger, 1 s) of ``tables`` (the ingest's
    ``[[ingest.tables]]``, each with ``source_table``) from their Debezium data topics."""
    return Settings.model_validate(
        {
            "kafka": {"bootstrap_servers": stack.bootstrap, **kafka},
            "ingest": {
                "pipeline_id": pipeline_id,
                "source": "kafka",
                "topics": [stack.data_topic(t["source_table"]) for t in tables],
                "checkpoint": str(tmp_path / "checkpoints" / "ingest"),
                "dead_letter_table": str(tmp_path / "tables" / "cdc_dead_letter"),
                "trigger": "processing-time",
                "interval": "1 second",
                "tables": tables,
            },
        }
    )


def _rates_target(stack, uri: str, **settings: object) -> dict[str, object]:
    """The ingest's ``[[ingest.tables]]`` entry for ``public.rates`` into ``uri``, with the
    test's notification and heartbeat topics (``settings`` add or override)."""
    return {
        "table": uri,
        "source_table": TABLE,
        "notification_topic": stack.notification_topic,
        "heartbeat_topic": stack.heartbeat_topic,
        **settings,
    }


class _Reports:
    """The ingest's batch reports (``on_batch``), read from the test's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: list = []

    def __call__(self, report) -> None:
        with self._lock:
            self._reports.append(report)

    @property
    def all(self) -> list:
        with self._lock:
            return list(self._reports)

    def _targets(self, table: str | None):
        return [t for r in self.all for t in r.targets if table in (None, t.table_uri)]

    def marker_set(self, table: str | None = None) -> bool:
        """The marker was set (of ``table``, or of any table)."""
        return any(t.marker_set_now for t in self._targets(table))

    def versions(self, table: str | None = None) -> int:
        """Versions committed so far (to ``table``, or to every table)."""
        return sum(t.rows for t in self._targets(table))

    def describe(self) -> str:
        """One line per batch that ran: records, versions, phase, marker and pending signals."""
        lines = []
        for r in self.all:
            if r.skipped:
                continue
            t = r.targets[0] if r.targets else None
            lines.append(
                f"  batch {r.batch_id}: {r.records} data + {r.signal_records} signal records, "
                f"{t.rows if t else 0} versions, {t.phase if t else '-'}"
                f"{' (marker set)' if t and t.marker_set_now else ''}"
                f"{f', pending {list(t.pending)}' if t and t.pending else ''}, {r.seconds:.1f} s"
            )
        return "\n".join(lines)


@contextlib.contextmanager
def _ingesting(spark, stack, settings: Settings) -> Iterator[tuple[StreamingQuery, _Reports]]:
    """Create the ingest's data topics (one partition each, before the connector's first
    run, as the README says), start the ingest with a report collector, and stop it at the
    end; a query that failed fails the test."""
    for table in settings.ingest.tables:
        stack.create_data_topic(table.source_table)
    reports = _Reports()
    query = start_ingest(spark, settings, on_batch=reports)
    try:
        yield query, reports
    finally:
        query.stop()
    assert query.exception() is None


def _wait(
    condition: Callable[[], bool],
    what: str,
    timeout_s: float,
    query,
    reports: _Reports | None = None,
) -> float:
    """Wait for ``condition``; a timeout names ``what`` and lists the batches of ``reports``."""
    started = time.monotonic()
    while not condition():
        if query.exception() is not None:
            raise query.exception()
        if time.monotonic() - started > timeout_s:
            batches = f"; the batches:\n{reports.describe()}" if reports is not None else ""
            raise AssertionError(f"{what}: not within {timeout_s} s{batches}")
        time.sleep(0.5)
    return time.monotonic() - started


@pytest.mark.spark
def test_ingest_sets_the_marker_from_the_real_notification_then_takes_the_log(
    spark, tmp_path, debezium_stack
):
    # A long-running ingest (processing-time trigger), started before the connector: the
    # snapshot, its notifications and heartbeats arrive while it runs, batch by batch, as in
    # production; then the log.
    started = time.monotonic()
    _create_rates(debezium_stack)
    uri = str(tmp_path / "tables" / "rates")
    settings = _ingest_settings(
        debezium_stack,
        tmp_path,
        "debezium-rates",
        [
            # the notification only: 'last' and the heartbeat race it into a batch
            _rates_target(debezium_stack, uri, snapshot_signals=["notification"])
        ],
    )
    # the data topic exists before the ingest starts; the connector starts after it, so the
    # ingest sees the snapshot arrive as it does in production
    with _ingesting(spark, debezium_stack, settings) as (query, reports):
        debezium_stack.start_connector([TABLE])
        running = time.monotonic() - started
        marker_s = _wait(reports.marker_set, "the marker", 120, query, reports)
        props = delta.get_properties(uri)
        completed_version = int(props[PROP_SNAPSHOT_COMPLETED_VERSION])
        snapshot_rows = delta.read(spark, uri, version=completed_version).collect()

        debezium_stack.execute("UPDATE public.rates SET rate = 9.9999 WHERE currency = 'C0001'")
        debezium_stack.execute("DELETE FROM public.rates WHERE currency = 'C0002'")
        log_s = _wait(lambda: reports.versions() >= ROWS + 2, "the update and delete", 90, query)
    batches = [r for r in reports.all if not r.skipped]
    print(
        f"\nconnector running {running:.1f} s after the test started; marker set "
        f"{marker_s:.1f} s later, after {len(batches)} batch(es); the update and delete "
        f"in the table {log_s:.1f} s after the SQL\n{reports.describe()}"
    )

    # the snapshot: exactly the 1000 rows, as snapshot versions, before the marker
    assert len(snapshot_rows) == ROWS
    assert {(r._op, r._snapshot) for r in snapshot_rows} == {("r", True)}
    assert len({r.currency for r in snapshot_rows}) == ROWS
    assert props[PROP_SNAPSHOT_COMPLETE] == "true"
    assert props[PROP_SNAPSHOT_SIGNAL] == "notification"
    detail = props[PROP_SNAPSHOT_SIGNAL_DETAIL]
    assert "Initial Snapshot" in detail and "COMPLETED" in detail, detail
    assert props[PROP_PRIMARY_KEY] == "currency"  # from the Debezium key

    # the log: the update and the delete, after the marker, as log-phase versions
    rows = delta.read(spark, uri).collect()
    log = sorted(
        ((r._op, r.currency, r.rate, r._snapshot) for r in rows if r._op != "r"),
        key=lambda row: row[0],
    )
    assert log == [("d", "C0002", None, False), ("u", "C0001", Decimal("9.9999"), False)]
    assert len(rows) == ROWS + 2
    assert sum(r.tombstones for r in reports.all) == 1  # the delete's tombstone, counted
    assert sum(r.dead_lettered for r in reports.all) == 0  # every real record was understood
    assert not delta.table_exists(settings.ingest.dead_letter_table)


@pytest.mark.spark
def test_processing_time_join_waits_for_the_real_snapshot_and_matches_every_order(
    spark, tmp_path, debezium_stack
):
    # The product's promise on the real stack: orders that are waiting while Debezium's
    # snapshot of 100,000 rows loads (notifications and heartbeats on) are joined only after
    # the marker, which the notification sets once the last snapshot row is committed, against
    # the complete dimension, so every one of them matches (a half-loaded dimension would
    # leave some unmatched).
    rows = 100_000
    started = time.monotonic()
    expected = _create_rates(debezium_stack, rows=rows)
    build = str(tmp_path / "tables" / "rates")
    orders_dir = tmp_path / "orders"
    orders_dir.mkdir()
    # one order per currency, on disk before anything starts
    orders = [(i, _currency(i, rows)) for i in range(1, rows + 1)]
    (orders_dir / "orders-0001.jsonl").write_text(
        "".join(json.dumps({"order_id": i, "currency": c}) + "\n" for i, c in orders)
    )
    ingest = _ingest_settings(
        debezium_stack,
        tmp_path,
        "debezium-rates-proctime",
        [
            # the notification only: 'last' and the heartbeat would race it
            _rates_target(debezium_stack, build, snapshot_signals=["notification"])
        ],
    )
    join = _join_settings(tmp_path, orders_dir, build)
    debezium_stack.create_data_topic(TABLE)
    lock = threading.Lock()
    released: list[int] = []

    def on_join(report):
        with lock:
            released.append(report.released)

    def all_released() -> bool:
        with lock:
            return sum(released) >= rows

    from lakehouse.runner import start_join

    queries = [start_ingest(spark, ingest), start_join(spark, join, on_batch=on_join)]
    try:
        # the join has its orders before the dimension has a single row
        _wait(
            lambda: delta.table_exists(join.join.pending_table), "pending orders", 120, queries[1]
        )
        debezium_stack.start_connector([TABLE])
        # a deadline against a hung pipeline, not a bound on its speed: the snapshot of 100,000
        # rows and the release take well over 180 s while the suite's other worker runs a
        # Spark job of its own
        took = _wait(all_released, "every order released", 420, queries[1])
    finally:
        for q in queries:
            q.stop()
    for q in queries:
        assert q.exception() is None
    props = delta.get_properties(build)
    first_complete = int(props[PROP_SNAPSHOT_FIRST_COMPLETED_VERSION])
    completed = int(props[PROP_SNAPSHOT_COMPLETED_VERSION])
    at_marker = delta.read(spark, build, version=completed).selectExpr(
        "count(*) AS n", "count(DISTINCT currency) AS keys", "bool_and(_snapshot) AS snapshot"
    )
    out = delta.read(spark, join.join.output_table).collect()
    print(
        f"\n{rows} rows: all orders released {took:.1f} s after the connector started, "
        f"{time.monotonic() - started:.0f} s after the test did"
    )

    assert props[PROP_SNAPSHOT_COMPLETE] == "true"
    assert props[PROP_SNAPSHOT_SIGNAL] == "notification"
    # the marker's version holds every snapshot row, once
    assert at_marker.first().asDict() == {"n": rows, "keys": rows, "snapshot": True}
    assert sorted(r.order_id for r in out) == [i for i, _ in orders]  # each once
    # joined only at or after the version the snapshot completed at, against all of it
    assert min(r._build_version for r in out) >= first_complete
    assert all(r._matched for r in out)
    assert {r.currency: r.rate for r in out} == expected
    assert {r._released_by for r in out} == {"processing_time"}


def _join_settings(tmp_path: Path, orders_dir: Path, build: str, **join: object) -> Settings:
    """A ``left`` join of the orders in ``orders_dir`` (JSON lines ``{"order_id",
    "currency"}``) with ``build``: processing time, trigger 1 s, unless ``join`` says
    otherwise."""
    return Settings.model_validate(
        {
            "join": {
                "pipeline_id": "orders-proctime",
                "source": "files",
                "path": str(orders_dir),
                "checkpoint": str(tmp_path / "checkpoints" / "join"),
                "trigger": "processing-time",
                "interval": "1 second",
                "mode": "proctime",
                "watermark": "none",
                "join_type": "left",
                "probe_schema": "order_id bigint, currency string",
                "probe_key": ["currency"],
                "probe_id": "order_id",
                "build_table": build,
                "output_table": str(tmp_path / "tables" / "orders"),
                "pending_table": str(tmp_path / "tables" / "orders_pending"),
                "dead_letter_table": str(tmp_path / "tables" / "orders_dead_letter"),
                **join,
            },
        }
    )


@contextlib.contextmanager
def _orders_every(
    orders_dir: Path, seconds: float, currencies: list[str]
) -> Iterator[list[tuple[int, str]]]:
    """Write a file of five orders into ``orders_dir`` every ``seconds`` (each file complete
    when it appears, as the files source needs) until the block ends; yields the orders
    written so far, ``(order_id, currency)``, which is complete after the block."""
    sent: list[tuple[int, str]] = []
    stop = threading.Event()

    def write() -> None:
        n = 0
        while not stop.wait(seconds):
            n += 1
            batch = [
                (len(sent) + i + 1, currencies[(7 * (len(sent) + i)) % len(currencies)])
                for i in range(5)
            ]
            tmp = orders_dir.parent / f".orders-{n:04d}.jsonl"
            tmp.write_text(
                "".join(json.dumps({"order_id": i, "currency": c}) + "\n" for i, c in batch)
            )
            tmp.rename(orders_dir / f"orders-{n:04d}.jsonl")
            sent.extend(batch)

    writer = threading.Thread(target=write, name="orders-writer", daemon=True)
    writer.start()
    try:
        yield sent
    finally:
        stop.set()
        writer.join()


def _by_commit_order(rows) -> list:
    """Versions in the order the build table orders them: ``(_event_time, _seq)``."""
    return sorted(rows, key=lambda r: (r._event_time, r._seq))


@pytest.mark.spark
def test_two_tables_one_empty_then_the_log_phase_in_commit_order(spark, tmp_path, debezium_stack):
    # One connector, two tables: rates (50 rows, REPLICA IDENTITY DEFAULT) and fees (empty,
    # REPLICA IDENTITY FULL). Both markers are set by Debezium's own notifications, each by
    # its table's scan. Then the log phase, TRUNCATE included
    # (skipped.operations=none: Debezium skips truncates by default), with one key changed
    # three times in one transaction: the versions follow the WAL.
    rates_expected = _create_rates(debezium_stack, rows=50)
    fees_table = "public.fees"
    debezium_stack.execute(
        "CREATE TABLE public.fees (id integer PRIMARY KEY, fee numeric(6,2), note text);"
        "ALTER TABLE public.fees REPLICA IDENTITY FULL"
    )
    rates, fees = (str(tmp_path / "tables" / name) for name in ("rates", "fees"))
    signals = {
        "notification_topic": debezium_stack.notification_topic,
        "heartbeat_topic": debezium_stack.heartbeat_topic,
        "snapshot_signals": ["notification"],
    }
    settings = _ingest_settings(
        debezium_stack,
        tmp_path,
        "debezium-two-tables",
        [
            {"table": rates, "source_table": TABLE, **signals},
            # an empty table gets its key from the configuration (no row carries it)
            {"table": fees, "source_table": fees_table, "key": ["id"], **signals},
        ],
    )
    with _ingesting(spark, debezium_stack, settings) as (query, reports):
        debezium_stack.start_connector([TABLE, fees_table], extra={"skipped.operations": "none"})
        _wait(
            lambda: reports.marker_set(rates) and reports.marker_set(fees),
            "both markers",
            120,
            query,
        )
        empty_props = delta.get_properties(fees)
        empty_rows = delta.read(spark, fees).count()
        debezium_stack.execute(
            "BEGIN;"
            "UPDATE public.rates SET rate = 1 WHERE currency = 'C0001';"
            "UPDATE public.rates SET rate = 2 WHERE currency = 'C0001';"
            "UPDATE public.rates SET rate = 3 WHERE currency = 'C0001';"
            "INSERT INTO public.fees VALUES (1, 0.50, 'first');"
            "COMMIT"
        )
        debezium_stack.execute("UPDATE public.fees SET fee = 0.75 WHERE id = 1")
        debezium_stack.execute("DELETE FROM public.rates WHERE currency = 'C0002'")
        debezium_stack.execute("DELETE FROM public.fees WHERE id = 1")
        debezium_stack.execute("TRUNCATE public.rates")
        debezium_stack.execute("INSERT INTO public.rates VALUES ('C9999', 1.2345)")
        # rates: 50 snapshot rows, 3 updates, the delete, the truncate, the insert
        _wait(
            lambda: reports.versions(rates) >= 56 and reports.versions(fees) >= 3,
            "the log phase",
            90,
            query,
        )

    # the empty table: created, complete from its own table scan (Debezium 3.5 says
    # SUCCEEDED for it), with no rows
    assert empty_rows == 0
    assert empty_props[PROP_SNAPSHOT_COMPLETE] == "true"
    detail = empty_props[PROP_SNAPSHOT_SIGNAL_DETAIL]
    assert detail.startswith("TABLE_SCAN_COMPLETED public.fees ["), detail
    assert not empty_props.get(PROP_SNAPSHOT_ALERT)
    for uri in (rates, fees):
        props = delta.get_properties(uri)
        assert props[PROP_SNAPSHOT_SIGNAL] == "notification"

    rate_rows = delta.read(spark, rates).collect()
    snapshot = [r for r in rate_rows if r._snapshot]
    assert {(r.currency, r.rate) for r in snapshot} == set(rates_expected.items())
    log = _by_commit_order(r for r in rate_rows if not r._snapshot)
    assert [(r._op, r.currency, r.rate) for r in log] == [
        ("u", "C0001", Decimal("1.0000")),
        ("u", "C0001", Decimal("2.0000")),
        ("u", "C0001", Decimal("3.0000")),
        ("d", "C0002", None),  # REPLICA IDENTITY DEFAULT: the key only
        ("t", None, None),  # ends every version open at its time
        ("c", "C9999", Decimal("1.2345")),
    ]
    # one transaction, one commit time: the WAL position orders its three updates
    assert len({r._event_time for r in log[:3]}) == 1
    assert log[0]._seq < log[1]._seq < log[2]._seq < log[3]._seq < log[4]._seq < log[5]._seq

    fee_rows = _by_commit_order(delta.read(spark, fees).collect())
    assert [(r._op, r.id, r.fee, r.note) for r in fee_rows] == [
        ("c", 1, Decimal("0.50"), "first"),
        ("u", 1, Decimal("0.75"), "first"),
        ("d", 1, Decimal("0.75"), "first"),  # REPLICA IDENTITY FULL: the whole row
    ]
    assert sum(r.dead_lettered for r in reports.all) == 0
    assert not delta.table_exists(settings.ingest.dead_letter_table)


@pytest.mark.spark
def test_a_restart_from_offsets_keeps_the_marker_a_restart_that_resnapshots_resets_it(
    spark, tmp_path, debezium_stack
):
    # Notifications off, heartbeats on: the heartbeat Debezium sends after the snapshot sets
    # the marker. A connector restarted from its offsets streams on (no snapshot row, the
    # marker untouched); restarted with snapshot.mode=always it re-reads the table: a
    # re-snapshot, which clears the marker, then the next heartbeat sets it again.
    rows = 200
    expected = _create_rates(debezium_stack, rows=rows)
    rates = str(tmp_path / "tables" / "rates")
    settings = _ingest_settings(
        debezium_stack,
        tmp_path,
        "debezium-restarts",
        [
            {
                "table": rates,
                "source_table": TABLE,
                "heartbeat_topic": debezium_stack.heartbeat_topic,
                "snapshot_signals": ["heartbeat"],
            }
        ],
    )
    with _ingesting(spark, debezium_stack, settings) as (query, reports):
        debezium_stack.start_connector([TABLE], notifications=False)
        _wait(reports.marker_set, "the marker", 120, query, reports)
        first = delta.get_properties(rates)

        # stopped, a change is made; restarted from its offsets, the connector sends it
        debezium_stack.worker.stop()
        debezium_stack.execute("UPDATE public.rates SET rate = 9.9999 WHERE currency = 'C0001'")
        debezium_stack.restart_connector()
        _wait(lambda: reports.versions() >= rows + 1, "the update after the restart", 90, query)
        time.sleep(3)  # heartbeats of the restarted connector arrive and change nothing
        after_restart = delta.get_properties(rates)
        resnapshots_before = sum(t.resnapshot_started for r in reports.all for t in r.targets)

        # restarted with snapshot.mode=always: every row is read again
        debezium_stack.restart_connector(**{"snapshot.mode": "always"})
        _wait(
            lambda: (
                reports.versions() >= 2 * rows + 1
                and delta.get_properties(rates).get(PROP_SNAPSHOT_STATE) == "complete"
            ),
            "the re-snapshot and its marker",
            120,
            query,
        )

    assert first[PROP_SNAPSHOT_SIGNAL] == "heartbeat"
    assert resnapshots_before == 0
    for key in (
        PROP_SNAPSHOT_COMPLETE,
        PROP_SNAPSHOT_COMPLETED_VERSION,
        PROP_SNAPSHOT_SIGNAL_DETAIL,
        PROP_SNAPSHOT_STATE,
    ):
        assert after_restart.get(key) == first.get(key), key

    props = delta.get_properties(rates)
    assert sum(t.resnapshot_started for r in reports.all for t in r.targets) == 1
    assert props[PROP_SNAPSHOT_SIGNAL] == "heartbeat"
    assert int(props[PROP_SNAPSHOT_COMPLETED_VERSION]) > int(first[PROP_SNAPSHOT_COMPLETED_VERSION])
    assert (
        props[PROP_SNAPSHOT_FIRST_COMPLETED_VERSION]
        == (first[PROP_SNAPSHOT_FIRST_COMPLETED_VERSION])
    )
    all_rows = delta.read(spark, rates).collect()
    snapshot_rows = [r for r in all_rows if r._op == "r"]
    assert len(snapshot_rows) == 2 * rows  # the initial snapshot and the re-snapshot, once each
    assert [(r._op, r.currency) for r in all_rows if r._op != "r"] == [("u", "C0001")]
    # every key was re-read: no synthetic delete; the re-read rows hold the update
    assert not [r for r in all_rows if r._kafka_topic == "__lakehouse.resnapshot__"]
    reread = {
        r.currency: r.rate for r in sorted(snapshot_rows, key=lambda r: r._kafka_offset)[rows:]
    }
    assert reread == expected | {"C0001": Decimal("9.9999")}


@pytest.mark.spark
def test_without_notifications_or_heartbeats_an_idle_empty_table_waits_and_says_for_what(
    spark, tmp_path, debezium_stack
):
    # The case Debezium's users report as "the snapshot never completes": no notifications,
    # no heartbeats. Debezium 3.5 marks each table's final snapshot record
    # 'last_in_data_collection' (the snapshot's final one 'last'), so a table with rows ends
    # its own snapshot; an empty table sends nothing at all. While the source is idle its
    # marker stays unset (an empty dimension cannot be told from one not loaded yet) and
    # snapshot-status says what would end it. The table's first change does.
    from typer.testing import CliRunner

    from lakehouse.cli import app
    from lakehouse.dimension import snapshot_status

    rows = 100
    _create_rates(debezium_stack, rows=rows)
    debezium_stack.execute("CREATE TABLE public.fees (id integer PRIMARY KEY, fee numeric(6,2))")
    rates, fees = (str(tmp_path / "tables" / name) for name in ("rates", "fees"))
    settings = _ingest_settings(
        debezium_stack,
        tmp_path,
        "debezium-idle",
        [
            {"table": rates, "source_table": TABLE},
            {"table": fees, "source_table": "public.fees", "key": ["id"]},
        ],
    )
    with _ingesting(spark, debezium_stack, settings) as (query, reports):
        debezium_stack.start_connector(
            [TABLE, "public.fees"], notifications=False, heartbeat_interval_ms=0
        )
        _wait(
            lambda: reports.marker_set(rates),
            "the marker of the table with rows",
            120,
            query,
            reports,
        )
        time.sleep(5)  # the source is idle: no record comes, so no batch runs
        idle = delta.get_properties(fees) if delta.table_exists(fees) else {}
        status = CliRunner().invoke(app, ["snapshot-status", fees])
        waiting = dict(snapshot_status(fees).rows())["waiting for"]

        debezium_stack.execute("INSERT INTO public.fees VALUES (1, 0.50)")
        _wait(
            lambda: reports.marker_set(fees), "the marker from the first change", 90, query, reports
        )
    print(f"\nsnapshot-status of the empty table while the source is idle:\n{status.output}")

    assert delta.get_properties(rates)[PROP_SNAPSHOT_SIGNAL] == "last"
    assert idle.get(PROP_SNAPSHOT_COMPLETE) == "false", idle
    assert status.exit_code == 0 and "waiting for" in status.output, status.output
    assert waiting == (
        "public.fees's final snapshot record (source.snapshot 'last_in_data_collection' or "
        "'last'; an empty table has none); or public.fees's first change after its snapshot "
        "— or lakehouse snapshot-complete"
    )

    props = delta.get_properties(fees)
    assert props[PROP_SNAPSHOT_SIGNAL] == "log_record"
    assert props[PROP_SNAPSHOT_COMPLETE] == "true"
    assert [(r._op, r.id, r.fee) for r in delta.read(spark, fees).collect()] == [
        ("c", 1, Decimal("0.50"))
    ]


@pytest.mark.spark
def test_ddl_between_changes_adds_a_column_then_an_incompatible_type_blocks_the_table(
    spark, tmp_path, debezium_stack
):
    # DDL arrives between data: Debezium's PostgreSQL connector learns a new relation from
    # pgoutput and sends the next change with the new row image. A new column is added to
    # the build table; a type change the table cannot hold blocks it
    # (docs/operations/schema-drift.md): the changes are dead-lettered, nothing is applied on
    # top of a missing change, and the marker stays.
    _create_rates(debezium_stack, rows=50)
    rates = str(tmp_path / "tables" / "rates")
    settings = _ingest_settings(
        debezium_stack,
        tmp_path,
        "debezium-ddl",
        [
            {
                "table": rates,
                "source_table": TABLE,
                "notification_topic": debezium_stack.notification_topic,
            }
        ],
    )
    with _ingesting(spark, debezium_stack, settings) as (query, reports):
        debezium_stack.start_connector([TABLE])
        _wait(reports.marker_set, "the marker", 120, query, reports)
        debezium_stack.execute(
            "ALTER TABLE public.rates ADD COLUMN source text;"
            "INSERT INTO public.rates VALUES ('C9001', 1.5, 'ecb');"
            "UPDATE public.rates SET source = 'fed' WHERE currency = 'C0001'"
        )
        _wait(lambda: reports.versions() >= 52, "the changes with the new column", 90, query)
        debezium_stack.execute(
            "ALTER TABLE public.rates ALTER COLUMN rate TYPE text USING rate::text;"
            "UPDATE public.rates SET rate = 'n/a' WHERE currency = 'C0003';"
            "UPDATE public.rates SET rate = '2' WHERE currency = 'C0004'"
        )
        _wait(
            lambda: sum(r.dead_lettered for r in reports.all) >= 2,
            "the changes after the type change, dead-lettered",
            90,
            query,
        )

    rows = delta.read(spark, rates).collect()
    assert len(rows) == 52  # the snapshot and the two changes with the new column, no more
    assert {r.source for r in rows if r._op == "r"} == {None}  # older versions read NULL
    assert sorted((r._op, r.currency, r.source) for r in rows if r._op != "r") == [
        ("c", "C9001", "ecb"),
        ("u", "C0001", "fed"),
    ]
    props = delta.get_properties(rates)
    block = json.loads(props[PROP_SCHEMA_BLOCK])
    assert block["column"] == "rate", block
    dead = delta.read(spark, settings.ingest.dead_letter_table).collect()
    # both changes carry the string rate: each is itself the mismatch
    assert [r._error_kind for r in dead] == ["schema_mismatch"] * 2
    assert props[PROP_SNAPSHOT_COMPLETE] == "true"  # the marker is not the block's business


@pytest.mark.spark
def test_an_ingest_killed_mid_snapshot_restarts_to_every_row_once_and_one_marker(
    spark, tmp_path, debezium_stack
):
    # The real snapshot is in Kafka (1000 rows, then COMPLETED); the ingest reads it 300
    # records per batch as `lakehouse ingest` in its own process, which SIGKILLs itself
    # after the data commit of batch 1, mid-snapshot. The restart from the same checkpoint
    # ends with every row once and the marker set once, after the last row.
    expected = _create_rates(debezium_stack)
    data, notes = debezium_stack.data_topic(TABLE), debezium_stack.notification_topic
    debezium_stack.start_connector([TABLE])
    reader = _Reader(debezium_stack.bootstrap, [data, notes])
    try:
        reader.read_until(
            lambda r: (
                len(r[data]) >= ROWS
                and any(b'"COMPLETED"' in (v or b"") for _, v, _, _ in r[notes])
            ),
            "the snapshot and its COMPLETED notification in Kafka",
        )
    finally:
        reader.close()
    debezium_stack.worker.stop()  # the input stays as it is

    rates = tmp_path / "tables" / "rates"
    cfg = tmp_path / "ingest.toml"
    cfg.write_text(f"""
[spark]
master = "local[2]"
conf = {{ "spark.sql.shuffle.partitions" = "2", "spark.ui.enabled" = "false" }}
[kafka]
bootstrap_servers = "{debezium_stack.bootstrap}"
[ingest]
pipeline_id = "debezium-killed"
source = "kafka"
topics = ["{data}"]
checkpoint = "{tmp_path}/checkpoints/ingest"
dead_letter_table = "{tmp_path}/tables/cdc_dead_letter"
trigger = "available-now"
max_records_per_trigger = 300
[[ingest.tables]]
table = "{rates}"
source_table = "{TABLE}"
notification_topic = "{notes}"
snapshot_signals = ["notification"]
""")
    killed = subprocess.run(
        [sys.executable, "-m", "lakehouse.cli", "ingest", "-c", str(cfg)],
        env={**os.environ, "LAKEHOUSE_FAILPOINTS": "ingest.after_data@1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-3000:])
    at_kill = delta.read(spark, str(rates)).count()
    marker_at_kill = delta.get_properties(str(rates))[PROP_SNAPSHOT_COMPLETE]

    query = start_ingest(spark, load_settings(cfg))
    query.awaitTermination()
    assert query.exception() is None
    print(f"\nkilled with {at_kill} of {ROWS} snapshot rows committed; the restart took the rest")

    assert 0 < at_kill < ROWS and marker_at_kill == "false"  # killed mid-snapshot
    rows = delta.read(spark, str(rates)).collect()
    assert len(rows) == ROWS and {r.currency: r.rate for r in rows} == expected  # each once
    props = delta.get_properties(str(rates))
    assert props[PROP_SNAPSHOT_COMPLETE] == "true"
    assert delta.row_count(str(rates), version=int(props[PROP_SNAPSHOT_COMPLETED_VERSION])) == (
        ROWS
    )
    # one data commit ended the snapshot (the marker commit follows it), and it is the first
    ended = [c.metadata.get(META_SNAPSHOT_ENDED) for c in delta.history(str(rates))]
    assert [e for e in ended if e] == ["notification"]
    first, completed = (
        props[key]
        for key in (PROP_SNAPSHOT_FIRST_COMPLETED_VERSION, PROP_SNAPSHOT_COMPLETED_VERSION)
    )
    assert first == completed


@pytest.mark.spark
def test_incremental_and_blocking_snapshots_through_the_signal_table(
    spark, tmp_path, debezium_stack
):
    # Debezium's ad-hoc snapshots, asked for through its signal table (signal.data.collection)
    # while the ingest runs: an incremental snapshot re-reads every row as ordinary versions
    # ('incremental': the marker stays); a blocking snapshot re-reads them as a snapshot,
    # which is a re-snapshot: the marker is cleared and set again when it completes, and a
    # processing-time join running meanwhile reads the last complete version, never a half
    # re-read one. The ingest takes 100 records a batch, so each snapshot spans batches.
    from lakehouse.runner import start_join

    rows = 200
    expected = _create_rates(debezium_stack, rows=rows)
    signals = "public.debezium_signal"
    debezium_stack.execute(
        f"CREATE TABLE {signals} (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, "
        "data varchar(2048));"
        # an incremental snapshot writes its window marks into the signal table, as the
        # connector's user (without: "SQL error while executing incremental snapshot")
        f"GRANT INSERT, DELETE ON {signals} TO {DEBEZIUM_USER}"
    )
    rates = str(tmp_path / "tables" / "rates")
    settings = _ingest_settings(
        debezium_stack,
        tmp_path,
        "debezium-adhoc",
        [_rates_target(debezium_stack, rates)],
    )

    settings = settings.model_copy(
        update={"ingest": settings.ingest.model_copy(update={"max_records_per_trigger": 100})}
    )
    orders_dir = tmp_path / "orders"
    orders_dir.mkdir()
    join = _join_settings(tmp_path, orders_dir, rates)
    # (pinned version, the table's state and last complete version as the batch committed)
    pinned: list[tuple[int | None, str | None, str | None]] = []

    def on_join(report) -> None:
        if report.plan is not None and report.committed:
            props = delta.get_properties(rates)
            pinned.append(
                (
                    report.plan.build_version,
                    props.get(PROP_SNAPSHOT_STATE),
                    props.get(PROP_SNAPSHOT_LAST_COMPLETE),
                )
            )

    def snapshot(kind: str) -> None:
        data = json.dumps({"data-collections": [TABLE], "type": kind})
        debezium_stack.execute(
            f"INSERT INTO {signals} VALUES (%s, 'execute-snapshot', %s)", (f"{kind}-1", data)
        )

    def state() -> str | None:
        return delta.get_properties(rates).get(PROP_SNAPSHOT_STATE)

    def resnapshots(reports) -> int:
        return sum(t.resnapshot_started for r in reports.all for t in r.targets)

    with _ingesting(spark, debezium_stack, settings) as (query, reports):
        debezium_stack.start_connector([TABLE, signals], extra={"signal.data.collection": signals})
        _wait(reports.marker_set, "the marker", 120, query, reports)
        first = delta.get_properties(rates)

        snapshot("incremental")
        _wait(lambda: reports.versions() >= 2 * rows, "the incremental snapshot", 120, query)
        after_incremental = delta.get_properties(rates)
        incremental_resnapshots = resnapshots(reports)

        joining = start_join(spark, join, on_batch=on_join)
        try:
            with _orders_every(orders_dir, 2.0, [_currency(i) for i in range(1, rows + 1)]) as sent:
                _wait(lambda: bool(pinned), "the join's first batch", 120, joining)
                snapshot("blocking")
                _wait(
                    lambda: (
                        reports.versions() >= 3 * rows
                        and state() == "complete"
                        and resnapshots(reports)
                    ),
                    "the blocking snapshot and its marker",
                    240,
                    query,
                )
            _wait(
                lambda: (
                    delta.table_exists(join.join.output_table)
                    and delta.row_count(join.join.output_table) >= len(sent)
                ),
                "every order released",
                90,
                joining,
            )
        finally:
            joining.stop()
        assert joining.exception() is None
    every = delta.read(spark, rates).collect()
    out = delta.read(spark, join.join.output_table).collect()
    print(
        f"\n{len(sent)} orders during the blocking snapshot; the join's pinned versions and the "
        f"table's state as each batch committed: {[(v, st) for v, st, _ in pinned]}"
    )

    # every order once, with its rate; every version a join batch read had the marker set:
    # during the blocking snapshot, the version before it began (never a half re-read one)
    assert sorted(r.order_id for r in out) == [i for i, _ in sent]
    assert all(r._matched and r.rate == expected[r.currency] for r in out)
    read = {v for v, _, _ in pinned} | {r._build_version for r in out}
    for version in read:
        props_then = delta.get_properties(rates, version=version)
        assert props_then[PROP_SNAPSHOT_COMPLETE] == "true", (version, props_then)
    during = [(v, last) for v, state_then, last in pinned if state_then == "resnapshot"]
    assert during, "no join batch committed while the blocking snapshot was read"
    assert all(v is not None and v <= int(last) for v, last in during), during

    assert incremental_resnapshots == 0
    for key in (PROP_SNAPSHOT_COMPLETED_VERSION, PROP_SNAPSHOT_STATE):
        assert after_incremental[key] == first[key], key  # the incremental snapshot: no change
    assert resnapshots(reports) == 1
    props = delta.get_properties(rates)
    assert props[PROP_SNAPSHOT_COMPLETE] == "true"
    assert int(props[PROP_SNAPSHOT_COMPLETED_VERSION]) > int(
        after_incremental[PROP_SNAPSHOT_COMPLETED_VERSION]
    )
    by_offset = sorted(every, key=lambda r: r._kafka_offset)
    assert len(by_offset) == 3 * rows and {r._op for r in by_offset} == {"r"}
    initial, incremental, blocking = (by_offset[i * rows : (i + 1) * rows] for i in range(3))
    for part in (initial, incremental, blocking):
        assert {r.currency: r.rate for r in part} == expected  # each key once per snapshot
    assert {r._snapshot for r in initial} == {True}
    assert {r._snapshot for r in blocking} == {True}
    assert {r._snapshot for r in incremental} == {False}  # ordinary versions
    assert not [r for r in every if r._kafka_topic == "__lakehouse.resnapshot__"]


#: The database's own record of every change to ``public.rates``: a row per changed row, in
#: statement order (``id``), written in the change's transaction, so ``xmin`` is its
#: transaction and ``pg_xact_commit_timestamp(xmin)`` its commit time
#: (``track_commit_timestamp=on``: the instant Debezium sends as ``source.ts_ms``).
_HISTORY = """
CREATE TABLE public.rates_history (
    id bigserial PRIMARY KEY, currency text NOT NULL, rate numeric(10,4), op char(1) NOT NULL
);
CREATE FUNCTION public.record_rate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO public.rates_history (currency, rate, op) VALUES (OLD.currency, NULL, 'd');
    ELSE
        INSERT INTO public.rates_history (currency, rate, op)
        VALUES (NEW.currency, NEW.rate, lower(left(TG_OP, 1)));
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER rates_history AFTER INSERT OR UPDATE OR DELETE ON public.rates
    FOR EACH ROW EXECUTE FUNCTION public.record_rate();
"""


def _workload(rng, currencies: list[str], transactions: int) -> list[list[str]]:
    """Transactions of one to three statements: updates (some of one key twice), deletes,
    re-inserts of what was deleted, a delete and re-insert of one key in one transaction."""
    live, gone = list(currencies), []
    plan: list[list[str]] = []
    for i in range(transactions):
        statements: list[str] = []
        if i % 11 == 5 and len(live) > 3:
            victim = live.pop(rng.randrange(len(live)))
            gone.append(victim)
            statements.append(f"DELETE FROM public.rates WHERE currency = '{victim}'")
        elif i % 11 == 9 and gone:
            back = gone.pop(0)
            live.append(back)
            statements.append(f"INSERT INTO public.rates VALUES ('{back}', {i}.5)")
        elif i % 17 == 8:
            key = rng.choice(live)
            statements += [
                f"DELETE FROM public.rates WHERE currency = '{key}'",
                f"INSERT INTO public.rates VALUES ('{key}', {i}.25)",
            ]
        for _ in range(rng.randint(1, 2)):
            key = rng.choice(live)
            statements.append(
                f"UPDATE public.rates SET rate = {rng.randint(1, 99_999) / 10_000} "
                f"WHERE currency = '{key}'"
            )
        plan.append(statements)
    return plan


@pytest.mark.spark
def test_the_rowtime_join_equals_the_databases_own_history(spark, tmp_path, debezium_stack):
    # Row-time truth from PostgreSQL itself: a trigger records every change with its
    # transaction, PostgreSQL knows each transaction's commit time. For probe rows at and
    # around every commit, the as-of answer computed from that record must be the row-time
    # join's, row for row: the rate, matched or not, and the version's start (the commit
    # time, to the millisecond).
    import random

    from lakehouse.runner import start_join

    rng = random.Random(14)
    stack = debezium_stack
    currencies = [_currency(i) for i in range(1, 21)]
    stack.execute("CREATE TABLE public.rates (currency text PRIMARY KEY, rate numeric(10,4))")
    stack.execute(_HISTORY)
    stack.execute(
        "".join(
            f"INSERT INTO public.rates VALUES ('{c}', 1.{i:04d});" for i, c in enumerate(currencies)
        )
    )
    build = str(tmp_path / "tables" / "rates")
    settings = _ingest_settings(
        stack,
        tmp_path,
        "debezium-history",
        [_rates_target(stack, build)],
    )
    plan = _workload(rng, currencies, transactions=60)
    with _ingesting(spark, stack, settings) as (query, reports):
        stack.start_connector([TABLE])
        _wait(reports.marker_set, "the marker", 120, query, reports)
        (logged_before,) = stack.query("SELECT count(*) FROM public.rates_history")[0]
        with stack.postgres.connect(stack.dbname) as conn:
            for statements in plan:
                with conn.transaction():
                    for statement in statements:
                        conn.execute(statement)
                # most commits milliseconds apart, some in the same millisecond
                time.sleep(rng.choice((0, 0.003, 0.02, 0.08)))
        (logged,) = stack.query("SELECT count(*) FROM public.rates_history")[0]
        changes = logged - logged_before
        _wait(lambda: reports.versions() >= len(currencies) + changes, "every change", 90, query)

    history = stack.query(
        "SELECT id, currency, rate, op, "
        "floor(extract(epoch FROM pg_xact_commit_timestamp(xmin)) * 1000)::bigint "
        "FROM public.rates_history WHERE id > %s ORDER BY id",
        (logged_before,),
    )
    snapshot = (
        delta.read(spark, build)
        .where("_snapshot")
        .selectExpr("currency", "rate", "unix_millis(_event_time) AS ms")
        .collect()
    )
    snapshot_ms = max(r.ms for r in snapshot)
    initial = {r.currency: r.rate for r in snapshot}
    commits = sorted({ms for *_, ms in history})
    assert commits[0] > snapshot_ms  # the workload ran after the snapshot was read

    def truth(currency: str, t_ms: int) -> tuple[Decimal | None, int | None]:
        """The rate of ``currency`` as of ``t_ms`` by the database's record, and when that
        version began (None for the snapshot's); (None, None) when it did not exist."""
        rate, start = initial.get(currency), None
        for _, key, value, op, ms in history:  # in statement order, so commit order
            if key == currency and ms <= t_ms:
                rate, start = (None, None) if op == "d" else (value, ms)
        return rate, start

    # probes at, just before and just after every commit, for every currency, and between
    times = sorted({t for ms in commits for t in (ms - 1, ms, ms + 1)} | {snapshot_ms + 1})
    probes = [(i, c, t) for i, (t, c) in enumerate(((t, c) for t in times for c in currencies), 1)]
    probes_dir = tmp_path / "orders"
    probes_dir.mkdir()
    (probes_dir / "orders.jsonl").write_text(
        "".join(
            json.dumps({"order_id": i, "currency": c, "order_ms": t}) + "\n" for i, c, t in probes
        )
    )
    join = _join_settings(
        tmp_path,
        probes_dir,
        build,
        pipeline_id="orders-rowtime-truth",
        trigger="available-now",
        until_complete=True,
        build_complete=True,  # the ingest is stopped: it holds every change
        mode="rowtime",
        watermark="bounded",
        probe_schema="order_id bigint, currency string, order_ms bigint",
        probe_time="order_ms",
    )
    query = start_join(spark, join)
    query.awaitTermination()
    assert query.exception() is None
    out = {
        r.order_id: (r.rate, r.build_ms if r._matched and r.build_ms > snapshot_ms else None)
        for r in delta.read(spark, join.join.output_table)
        .selectExpr("order_id", "rate", "_matched", "unix_millis(_build_event_time) AS build_ms")
        .collect()
    }
    expected = {i: truth(c, t) for i, c, t in probes}
    print(
        f"\n{len(plan)} transactions, {changes} changed rows, {len(commits)} distinct commit "
        f"milliseconds; {len(probes)} probe rows, "
        f"{sum(rate is None for rate, _ in expected.values())} of them when their key was deleted"
    )
    assert len(out) == len(probes)
    wrong = {i: (out[i], expected[i]) for i in expected if out[i] != expected[i]}
    assert not wrong, f"{len(wrong)} rows differ (join, database): {list(wrong.items())[:5]}"
