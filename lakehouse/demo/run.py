"""``lakehouse demo``: the product end to end on an embedded default.

1. Starts an Apache Kafka broker (one KRaft node from ``.jvm/kafka``, see
   :mod:`lakehouse.testing.broker`; or, with ``--source files``, uses JSON-lines directories
   instead) and creates the topics. With ``--source postgres`` the rates come from a real
   database instead of generated records: PostgreSQL, and Debezium's PostgreSQL connector in
   a Kafka Connect worker (:mod:`lakehouse.demo.database`).
2. Starts three streaming queries in one Spark session, the way a user runs them as one job:
   the CDC ingest into the ``rates`` build table, a row-time join and a processing-time join of
   the orders with the rates.
3. Produces the demo data (:mod:`lakehouse.demo.data`) in waves: the orders start before the
   rates snapshot is complete, so the processing-time join has to wait for the marker. With
   ``--source postgres`` a wave is transactions committed to PostgreSQL (Debezium sends
   them) and orders stamped with the wall clock; the first orders go out once Debezium has
   read its snapshot, and the ingest starts after them.
4. When everything produced has been ingested and the joins have nothing left to release,
   stops the queries, runs the quality report on both joins, and prints a summary.

Everything goes under one output directory, which is cleared first, so the demo can run again.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from lakehouse.demo.data import (
    ORDER_SCHEMA,
    DatabaseDemo,
    DemoData,
    Record,
    make_database_demo,
    make_demo_data,
    order_record,
)
from lakehouse.dimension.layout import (
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_AT,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_SIGNAL,
)

if TYPE_CHECKING:
    from lakehouse.demo.database import DemoDatabase

Source = Literal["kafka", "files", "postgres"]

CDC_TOPIC = "dbserver1.public.rates"
ORDERS_TOPIC = "orders"
TRIGGER = "2 seconds"
IDLE_TIMEOUT_MS = 8_000
SETTLE_TIMEOUT_S = 240
#: How long a wave waits for the pipelines to take it in before the demo goes on.
WAVE_TIMEOUT_S = 120


@dataclass
class _Stats:
    """Counters updated by the pipelines' batch callbacks (Spark's callback thread)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    ingest_records: int = 0
    ingest_batches: int = 0
    versions: int = 0
    dead_lettered: int = 0
    tombstones: int = 0
    marker: str = "loading"
    build_watermark: str = "MIN"
    joins: dict[str, dict[str, Any]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def join_stats(self, name: str) -> dict[str, Any]:
        return self.joins.setdefault(
            name,
            {
                "batches": 0,
                "arrived": 0,
                "released": 0,
                "matched": 0,
                "pending": 0,
                "watermark": "MIN",
                "dead": 0,
                "build_idle": False,
                "first_release_batch": None,
            },
        )

    def took_in(self, orders: int, cdc: int | None) -> bool:
        """Both joins have taken in ``orders`` orders (joined, pending or dead-lettered) and
        the ingest ``cdc`` records (None: not asked). Call with :attr:`lock` held."""
        joins = (self.join_stats("rowtime"), self.join_stats("proctime"))
        return all(s["arrived"] + s["dead"] >= orders for s in joins) and (
            cdc is None or self.ingest_records >= cdc
        )


class _Producer:
    """Sends waves to Kafka topics or to JSON-lines directories (envelope format, which keeps
    partitions and offsets, so both modes feed the pipelines the same records)."""

    def __init__(self, source: Literal["kafka", "files"], out: Path, bootstrap: str | None) -> None:
        self.source, self.out, self.bootstrap = source, out, bootstrap
        self.offsets: dict[tuple[str, int], int] = {}
        self.wave = 0

    def setup(self, partitions: dict[str, int]) -> None:
        """Create the topics (``{topic: partitions}``), or their directories."""
        for topic, count in partitions.items():
            if self.source == "kafka":
                from lakehouse.sources.kafka_admin import create_topic

                assert self.bootstrap is not None
                create_topic(self.bootstrap, topic, count)
            else:
                (self.out / "input" / topic).mkdir(parents=True)

    def send(self, topic: str, records: list[Record]) -> None:
        # partition by partition, highest first: records of different partitions arrive out
        # of order (the order within a partition is kept, as Kafka guarantees)
        ordered = sorted(records, key=lambda r: -r[2])
        if self.source == "kafka":
            from lakehouse.sources.kafka_admin import produce

            assert self.bootstrap is not None
            produce(self.bootstrap, topic, ordered)
            return
        lines = []
        for key, value, partition in ordered:
            offset = self.offsets.get((topic, partition), 0)
            self.offsets[(topic, partition)] = offset + 1
            lines.append(
                json.dumps(
                    {
                        "key": None if key is None else key.decode(),
                        "value": None if value is None else value.decode(errors="replace"),
                        "partition": partition,
                        "offset": offset,
                        "timestamp": int(time.time() * 1000),
                    }
                )
            )
        target = self.out / "input" / topic / f"wave-{self.wave:04d}.jsonl"
        tmp = target.with_name("." + target.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        tmp.rename(target)  # files appear complete, as the files source requires


class _Feed:
    """What feeds the pipelines, wave by wave, from its input (``data``)."""

    #: The wave after whose pause the ingest starts (-1: before the first).
    ingest_starts_after = -1
    data: DemoData | DatabaseDemo

    @property
    def cdc_count(self) -> int:
        """The CDC records the ingest should see in all (changes and tombstones)."""
        return self.data.cdc_count

    @property
    def order_count(self) -> int:
        """The orders in all waves."""
        return self.data.order_count

    @property
    def waves(self) -> int:
        """How many waves there are."""
        return len(self.data.waves)

    def setup(self) -> None:
        """Create the topics (or directories), before the pipelines start."""
        raise NotImplementedError

    def send(self, wave: int) -> str:
        """Send wave ``wave``; returns what was sent, for the log."""
        raise NotImplementedError

    def orders_until(self, wave: int) -> int:
        """The orders the waves up to ``wave`` sent."""
        return sum(len(self.data.waves[w].orders) for w in range(wave + 1))

    def cdc_until(self, wave: int) -> int | None:
        """The CDC records the waves up to ``wave`` sent (None: Debezium decides how many)."""
        return None

    def close(self) -> None:
        """Stop sending (before the pipelines stop)."""


class _GeneratedFeed(_Feed):
    """Generated Debezium records and orders, to Kafka or to files."""

    def __init__(self, producer: _Producer, data: DemoData) -> None:
        self.producer, self.data = producer, data

    def setup(self) -> None:
        self.producer.setup(
            {CDC_TOPIC: self.data.cdc_partitions, ORDERS_TOPIC: self.data.order_partitions}
        )

    def cdc_until(self, wave: int) -> int | None:
        return sum(len(self.data.waves[w].cdc) for w in range(wave + 1))

    def send(self, wave: int) -> str:
        records = self.data.waves[wave]
        self.producer.wave = wave
        self.producer.send(CDC_TOPIC, records.cdc)
        self.producer.send(ORDERS_TOPIC, records.orders)
        return f"wave {wave}: sent {len(records.cdc)} CDC records, {len(records.orders)} orders"


class _DatabaseFeed(_Feed):
    """Transactions committed to PostgreSQL (Debezium sends them to Kafka) and orders stamped
    with the wall clock. Wave 0 starts the connector, waits until Debezium has read its
    snapshot, and sends the first orders; the ingest starts after that wave's pause, so the
    joins hold those orders until its marker is set (a snapshot of 24 rows is loaded too
    fast to be seen half-loaded otherwise)."""

    ingest_starts_after = 0

    def __init__(self, producer: _Producer, database: DemoDatabase, data: DatabaseDemo) -> None:
        self.producer, self.database, self.data = producer, database, data

    def close(self) -> None:
        # no more heartbeats: the ingest goes idle, and stops between batches
        if self.database.worker is not None:
            self.database.worker.stop()

    def setup(self) -> None:
        from lakehouse.demo import database as db

        # the ingest reads the connector's topics from its start, before the connector runs
        self.producer.setup(
            {
                CDC_TOPIC: 1,
                db.NOTIFICATION_TOPIC: 1,
                db.HEARTBEAT_TOPIC: 1,
                ORDERS_TOPIC: self.data.order_partitions,
            }
        )

    def send(self, wave: int) -> str:
        records = self.data.waves[wave]
        done = ""
        if wave == 0:
            worker = self.database.start_connector()
            took = self.database.wait_snapshot_read()
            done = (
                f"Debezium (Kafka Connect pid {worker.pid}) read the snapshot of "
                f"{len(self.data.rates)} rows in {took:.1f} s; "
            )
        else:
            self.database.apply(records.transactions)
            changes = sum(len(t) for t in records.transactions)
            done = f"committed {len(records.transactions)} transactions ({changes} changes); "
        now_ms = int(time.time() * 1000)
        self.producer.send(
            ORDERS_TOPIC,
            [
                order_record(o, now_ms - lag, self.data.order_partitions)
                for o, lag in records.orders
            ],
        )
        return f"wave {wave}: {done}sent {len(records.orders)} orders"


def _config(out: Path, source: Source, bootstrap: str | None) -> dict[str, Any]:
    tables = out / "tables"
    spark_source = "files" if source == "files" else "kafka"
    stream: dict[str, Any] = {
        "source": spark_source,
        "trigger": "processing-time",
        "interval": TRIGGER,
    }
    if source == "files":
        stream["file_format"] = "envelope"

    def where(topic: str) -> dict[str, Any]:
        if spark_source == "kafka":
            return {"topics": [topic]}
        return {"path": str(out / "input" / topic), "topics": [topic]}

    rates: dict[str, Any] = {"table": str(tables / "rates"), "key": ["currency"]}
    if source == "postgres":
        from lakehouse.demo import database as db

        rates |= {
            "notification_topic": db.NOTIFICATION_TOPIC,
            "heartbeat_topic": db.HEARTBEAT_TOPIC,
        }

    join_common = {
        **stream,
        **where(ORDERS_TOPIC),
        "probe_schema": ORDER_SCHEMA,
        "probe_key": ["currency"],
        "probe_time": "order_ts",
        "probe_id": "order_id",
        "build_table": str(tables / "rates"),
        "join_type": "left",
        "dead_letter_table": str(tables / "orders_dead_letter"),
    }
    return {
        "spark": {"conf": {"spark.sql.shuffle.partitions": "2"}},
        "kafka": {"bootstrap_servers": bootstrap},
        "ingest": {
            **stream,
            **where(CDC_TOPIC),
            "pipeline_id": "demo-ingest-rates",
            "checkpoint": str(out / "checkpoints" / "ingest"),
            "dead_letter_table": str(tables / "rates_dead_letter"),
            "tables": [rates],
        },
        "rowtime": {
            **join_common,
            "pipeline_id": "demo-join-rowtime",
            "mode": "rowtime",
            "watermark": "bounded",
            "out_of_orderness_ms": 5_000,
            "build_idle_timeout_ms": IDLE_TIMEOUT_MS,
            "output_table": str(tables / "orders_rowtime"),
            "pending_table": str(tables / "orders_rowtime_pending"),
            "checkpoint": str(out / "checkpoints" / "join-rowtime"),
        },
        "proctime": {
            **join_common,
            "pipeline_id": "demo-join-proctime",
            "mode": "proctime",
            "watermark": "none",
            "output_table": str(tables / "orders_proctime"),
            "pending_table": str(tables / "orders_proctime_pending"),
            "checkpoint": str(out / "checkpoints" / "join-proctime"),
        },
        # where `lakehouse quality -c` writes the row-time join's report (the demo writes
        # both joins' reports under quality/), and `lakehouse sql` finds unmatched_rows
        "quality": {"report_dir": str(out / "quality" / "rowtime")},
    }


def run_demo(
    *,
    source: Source = "kafka",
    output: Path = Path("demo-output"),
    orders: int = 1200,
    console: Console | None = None,
) -> int:
    """Run the demo; returns the exit code (0 when the quality checks pass).

    Raises:
        EnvironmentSetupError: the embedded broker, PostgreSQL or the Kafka Connect worker
            cannot start (kafka and postgres modes).
    """
    console = console or Console(highlight=False)
    started = time.monotonic()
    shutil.rmtree(output, ignore_errors=True)
    output.mkdir(parents=True)
    output = output.resolve()
    console.print(f"[bold]lakehouse demo[/] — source: {source}; output: {output}")
    if source == "files":
        data = make_demo_data(orders=orders)
        _describe(data, console)
        return _run(
            source,
            output,
            None,
            _GeneratedFeed(_Producer(source, output, None), data),
            console,
            started,
        )

    from lakehouse.testing.broker import kafka_broker

    if source == "postgres":
        from lakehouse.demo.database import check_requirements

        check_requirements()
    with kafka_broker(output / "broker") as broker:
        console.print(
            f"  Apache Kafka broker (KRaft, pid {broker.pid}) on {broker.bootstrap}; "
            f"its log: {broker.log_path}",
            soft_wrap=True,
        )
        producer = _Producer("kafka", output, broker.bootstrap)
        if source == "kafka":
            data = make_demo_data(orders=orders)
            _describe(data, console)
            feed: _Feed = _GeneratedFeed(producer, data)
            return _run(source, output, broker.bootstrap, feed, console, started)
        return _run_postgres(output, broker.bootstrap, producer, orders, console, started)


def _describe(data: DemoData, console: Console) -> None:
    console.print(
        f"  {data.cdc_count} CDC records for public.rates over {data.cdc_partitions} "
        f"partitions, {data.order_count} orders over {data.order_partitions}, "
        f"in {len(data.waves)} waves"
    )


def _run_postgres(
    out: Path, bootstrap: str, producer: _Producer, orders: int, console: Console, started: float
) -> int:
    from lakehouse.demo import database as db

    data = make_database_demo(orders=orders)
    with db.DemoDatabase(out / "postgres", bootstrap=bootstrap, rates=data.rates) as database:
        pg = database.postgres
        console.print(
            f"  {pg.version.replace('postgres (PostgreSQL)', 'PostgreSQL')} (pid {pg.pid}) on "
            f"{pg.host}:{pg.port}: "
            f"database {db.DATABASE}, table {db.TABLE} with {len(data.rates)} rows; its log: "
            f"{pg.log_path}",
            soft_wrap=True,
        )
        config = database.write_connector_config(out / "debezium-connector.json")
        changes = sum(len(t) for w in data.waves for t in w.transactions)
        transactions = sum(len(w.transactions) for w in data.waves)
        console.print(
            f"  Debezium's PostgreSQL connector (Kafka Connect, configuration: {config}) "
            f"snapshots it into {CDC_TOPIC}; then {changes} changes in {transactions} "
            f"transactions, and {data.order_count} orders over {data.order_partitions} "
            f"partitions, in {len(data.waves)} waves",
            soft_wrap=True,
        )
        return _run(
            "postgres", out, bootstrap, _DatabaseFeed(producer, database, data), console, started
        )


def _run(
    source: Source,
    out: Path,
    bootstrap: str | None,
    feed: _Feed,
    console: Console,
    started: float,
) -> int:
    from lakehouse.config import Settings
    from lakehouse.runner import start_ingest, start_join
    from lakehouse.spark import get_spark

    cfg = _config(out, source, bootstrap)
    ingest_settings = Settings.model_validate({k: cfg[k] for k in ("spark", "kafka", "ingest")})
    row_settings = Settings.model_validate(
        {"spark": cfg["spark"], "kafka": cfg["kafka"], "join": cfg["rowtime"]}
    )
    proc_settings = Settings.model_validate(
        {"spark": cfg["spark"], "kafka": cfg["kafka"], "join": cfg["proctime"]}
    )
    (out / "lakehouse.toml").write_text(_toml(cfg))

    feed.setup()
    console.print("  starting Spark ...")
    spark = get_spark(app_name="lakehouse-demo", conf=cfg["spark"]["conf"])
    stats = _Stats()

    def start_ingesting() -> None:
        queries.insert(0, start_ingest(spark, ingest_settings, on_batch=_on_ingest(stats)))

    queries = [
        start_join(spark, row_settings, on_batch=_on_join(stats, "rowtime")),
        start_join(spark, proc_settings, on_batch=_on_join(stats, "proctime")),
    ]
    try:
        if feed.ingest_starts_after < 0:
            start_ingesting()
        with _Display(console, stats) as display:
            for i in range(feed.waves):
                sent = feed.send(i)
                with stats.lock:
                    stats.log.append(sent)
                _wait_for_wave(display, stats, feed, i, ingesting=i > feed.ingest_starts_after)
                if i == feed.ingest_starts_after:
                    with stats.lock:
                        stats.log.append("the ingest starts")
                    start_ingesting()
            _settle(display, stats, feed, queries)
        console.print()
    finally:
        feed.close()
        _stop_between_batches(queries)
    for q in queries:
        if q.exception() is not None:
            raise q.exception()
    _end_input(spark, cfg, stats, console)
    return _finish(spark, cfg, stats, feed, out, console, started)


def _stop_between_batches(queries: list[Any], timeout_s: float = 15.0) -> None:
    """Stop each query when no batch of it is running (up to ``timeout_s``): a batch stopped
    midway is retried by the next run, correctly, but fills the screen with Spark's
    interruption traces."""
    deadline = time.monotonic() + timeout_s
    for q in queries:
        while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.2)
        q.stop()


def _end_input(spark: Any, cfg: dict[str, Any], stats: _Stats, console: Console) -> None:
    """The producers are done: end the row-time join's input, as ``lakehouse join
    --until-complete`` does, so the orders after its last watermark are released too (the
    rates table is idle by now: the end releases every waiting order, each joined as of its
    own time)."""
    from lakehouse.config import Settings
    from lakehouse.runner import start_join

    console.print("ending the row-time join's input (lakehouse join --until-complete) ...")
    ending = Settings.model_validate(
        {
            "spark": cfg["spark"],
            "kafka": cfg["kafka"],
            "join": {**cfg["rowtime"], "trigger": "available-now", "until_complete": True},
        }
    )
    query = start_join(spark, ending, on_batch=_on_join(stats, "rowtime"))
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()


def _on_ingest(stats: _Stats) -> Callable[[Any], None]:
    def on_batch(report: Any) -> None:
        from lakehouse.progress import watermark_text

        with stats.lock:
            stats.ingest_batches += int(not report.skipped)
            stats.ingest_records += report.records
            stats.dead_lettered += report.dead_lettered
            stats.tombstones += report.tombstones
            for t in report.targets:
                stats.versions += t.rows
                stats.build_watermark = watermark_text(t.watermark_ms)
                if t.marker_set_now:
                    stats.marker = f"set in batch {report.batch_id}"
                    stats.log.append(
                        f"ingest batch {report.batch_id}: snapshot complete, marker set"
                    )

    return on_batch


def _on_join(stats: _Stats, name: str) -> Callable[[Any], None]:
    def on_batch(report: Any) -> None:
        with stats.lock:
            s = stats.join_stats(name)
            s["batches"] += int(report.committed)
            s["arrived"] += report.arrived
            s["released"] += report.released
            s["matched"] += report.matched
            s["dead"] += report.dead_lettered
            s["pending"] = report.pending
            if report.plan is not None:
                s["watermark"] = str(report.plan.combined)
                s["probe_max"] = report.plan.probe_max_ts_ms
                s["wm_ms"] = (
                    None
                    if report.plan.combined.use_processing_time
                    else report.plan.combined.timestamp
                )
                s["build_idle"] = report.plan.build_status.name == "IDLE"
            if report.released and s["first_release_batch"] is None:
                s["first_release_batch"] = report.batch_id
                stats.log.append(
                    f"{name} join batch {report.batch_id}: first release ({report.released} rows)"
                )

    return on_batch


def _render(stats: _Stats, phase: str) -> Group:
    """The live view: counts in a table narrow enough for 80 columns, then one line per
    pipeline for its watermark and marker (long values wrap instead of being cut), then the
    latest events."""
    with stats.lock:
        table = Table(
            "",
            "batches",
            "in",
            "out",
            "matched",
            "pending",
            "dead",
            title=f"demo — {phase}",
            title_justify="left",
            caption="batches: the ones that wrote (as the quality report counts them); "
            "out: build versions (ingest) or released rows (joins)",
            caption_justify="left",
        )
        table.add_row(
            "ingest",
            str(stats.ingest_batches),
            str(stats.ingest_records),
            str(stats.versions),
            "",
            "",
            str(stats.dead_lettered),
        )
        lines = [
            f"ingest: build watermark {stats.build_watermark}, snapshot {stats.marker}",
        ]
        for name in ("rowtime", "proctime"):
            s = stats.join_stats(name)
            table.add_row(
                name,
                str(s["batches"]),
                str(s["arrived"]),
                str(s["released"]),
                str(s["matched"]),
                str(s["pending"]),
                str(s["dead"]),
            )
            lines.append(
                f"{name}: watermark {s['watermark']}" + (" (build idle)" if s["build_idle"] else "")
            )
        log = "\n".join(stats.log[-6:])
    return Group(table, Text("\n".join(lines)), Text(log, style="dim"))


class _Display:
    """Where the demo shows its progress: a live view on a terminal; on anything else (a
    file, a CI log, a pipe), plain lines: each event once, and the counts when they change,
    at most every few seconds, never a redrawn screen."""

    PLAIN_EVERY_S = 5.0

    def __init__(self, console: Console, stats: _Stats) -> None:
        self.console = console
        self.stats = stats
        self.live: Live | None = None
        self._logged = 0
        self._last_line = ""
        self._last_at = 0.0

    def __enter__(self) -> _Display:
        if self.console.is_terminal:
            self.live = Live(
                _render(self.stats, "starting"),
                console=self.console,
                refresh_per_second=2,
                transient=False,
            )
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)
        else:
            self.update("done", force=True)

    def update(self, phase: str, *, force: bool = False) -> None:
        if self.live is not None:
            self.live.update(_render(self.stats, phase))
            return
        with self.stats.lock:
            events = self.stats.log[self._logged :]
            self._logged = len(self.stats.log)
            row, proc = self.stats.join_stats("rowtime"), self.stats.join_stats("proctime")
            counts = (
                f"ingest {self.stats.ingest_records} records -> "
                f"{self.stats.versions} versions; rowtime {row['released']} released, "
                f"{row['pending']} pending; proctime {proc['released']} released, "
                f"{proc['pending']} pending"
            )
        for event in events:
            self.console.print(event, soft_wrap=True, highlight=False)
        now = time.monotonic()
        # the counts when they changed (a log is read later: no line per unchanged tick)
        if force or (counts != self._last_line and now - self._last_at >= self.PLAIN_EVERY_S):
            self.console.print(f"{phase}: {counts}", soft_wrap=True, highlight=False)
            self._last_line, self._last_at = counts, now


def _wait_for_wave(
    display: _Display, stats: _Stats, feed: _Feed, wave: int, *, ingesting: bool
) -> None:
    """Go on once the pipelines have taken in what the waves so far sent: both joins every
    order, and a running ingest every CDC record (when the feed knows how many), so that the
    story follows the pipelines' progress, however fast the machine. A wave's orders reach
    the joins before the next wave's CDC records exist, so the first ones wait on a half
    snapshot. After :data:`WAVE_TIMEOUT_S` it goes on and says so."""
    orders, cdc = feed.orders_until(wave), feed.cdc_until(wave)
    phase = f"wave {wave + 1}/{feed.waves}"
    deadline = time.monotonic() + WAVE_TIMEOUT_S
    while time.monotonic() < deadline:
        display.update(phase)
        with stats.lock:
            if stats.took_in(orders, cdc if ingesting else None):
                return
        time.sleep(0.5)
    with stats.lock:
        stats.log.append(f"{phase}: went on after {WAVE_TIMEOUT_S} s, the pipelines behind")


def _settle(display: _Display, stats: _Stats, feed: _Feed, queries: list[Any]) -> None:
    """Wait until everything produced was ingested and joined, and the joins are quiet."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    quiet_since: float | None = None
    last: tuple[Any, ...] | None = None
    while time.monotonic() < deadline:
        for q in queries:
            if q.exception() is not None:
                return
        with stats.lock:
            row, proc = stats.join_stats("rowtime"), stats.join_stats("proctime")
            done = (
                stats.took_in(feed.order_count, feed.cdc_count)
                and proc["pending"] == 0
                and row["build_idle"]
            )
            state = (row["released"], row["pending"], proc["released"])
        if done and state == last:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 6:
                return
        else:
            quiet_since = None
        last = state
        display.update("settling: waiting for the joins to release")
        time.sleep(0.5)
    with stats.lock:
        stats.log.append(f"stopped after {SETTLE_TIMEOUT_S} s of settling")


def _finish(
    spark: Any,
    cfg: dict[str, Any],
    stats: _Stats,
    feed: _Feed,
    out: Path,
    console: Console,
    started: float,
) -> int:
    from lakehouse import delta
    from lakehouse.config import JoinConfig
    from lakehouse.quality import run_quality_report
    from lakehouse.runner import join_options

    reports = {}
    for name in ("rowtime", "proctime"):
        console.print(f"quality report for the {name} join ...")
        reports[name] = run_quality_report(
            spark,
            join_options(JoinConfig.model_validate(cfg[name])),
            report_dir=out / "quality" / name,
        )
    rates = cfg["ingest"]["tables"][0]["table"]
    props = delta.get_properties(rates)
    summary = Table("", "value", title="demo summary", title_justify="left", show_lines=False)
    summary.add_row(
        "CDC records sent / ingested",
        f"{feed.cdc_count} / {stats.ingest_records} ({stats.tombstones} tombstones)",
    )
    summary.add_row("build versions (rates)", str(delta.row_count(rates)))
    summary.add_row("dead-lettered CDC records", str(stats.dead_lettered))
    summary.add_row(
        "snapshot marker",
        f"{props.get(PROP_SNAPSHOT_COMPLETE)} at "
        f"{props.get(PROP_SNAPSHOT_COMPLETED_AT, '-')} (version "
        f"{props.get(PROP_SNAPSHOT_COMPLETED_VERSION, '-')}, signal "
        f"{props.get(PROP_SNAPSHOT_SIGNAL, '-')})",
    )
    for name in ("rowtime", "proctime"):
        s = stats.join_stats(name)
        j = cfg[name]
        out_rows = (
            delta.row_count(j["output_table"]) if delta.table_exists(j["output_table"]) else 0
        )
        summary.add_row(f"{name}: probe rows in", str(s["arrived"]))
        summary.add_row(
            f"{name}: released / matched / pending",
            f"{s['released']} / {s['matched']} / {s['pending']} ({out_rows} output rows)",
        )
        summary.add_row(f"{name}: batches written", str(s["batches"]))
        summary.add_row(f"{name}: first release in batch", str(s["first_release_batch"]))
        summary.add_row(f"{name}: watermark (lag behind the newest order)", _lag(s))
        u = reports[name].unmatched
        summary.add_row(
            f"{name}: quality",
            ("[green]passed[/]" if reports[name].success else "[red]FAILED[/]")
            + f", {u.unmatched} unmatched, {u.pending} pending",
        )
    summary.add_row("took", f"{time.monotonic() - started:.0f} s")
    console.print(summary)
    # paths on lines of their own, never cut to the table's width (a CI log keeps them whole)
    where = [
        ("tables", out / "tables"),
        ("configuration", out / "lakehouse.toml"),
        *(
            [("Debezium connector", out / "debezium-connector.json")]
            if (out / "debezium-connector.json").exists()
            else []
        ),
        *((f"{name} report", reports[name].data_docs_path) for name in reports),
        *((f"{name} plot", reports[name].plot_path) for name in reports),
    ]
    for label, path in where:
        console.print(f"{label + ':':<22}{path}", soft_wrap=True, highlight=False)
    console.print(
        f'try: lakehouse sql -c {out / "lakehouse.toml"} "SELECT order_id, currency, '
        "amount, rate, _build_event_time FROM orders_rowtime ORDER BY order_id "
        'LIMIT 5"',
        soft_wrap=True,
        highlight=False,
    )
    return 0 if all(r.success for r in reports.values()) else 1


def _lag(s: dict[str, Any]) -> str:
    """The combined watermark, and how far it trails the newest order's event time."""
    if s.get("wm_ms") is None or s.get("probe_max") is None:
        return f"{s['watermark']} (releases every row)"
    return f"{s['watermark']} ({(s['probe_max'] - s['wm_ms']) / 1000:.1f} s)"


def _toml(cfg: dict[str, Any]) -> str:
    """The demo's settings as a lakehouse.toml: the row-time join as [join], the
    processing-time join's output under [maintenance] lineage_outputs (so `lakehouse sql`
    knows it, and `lakehouse vacuum` keeps the build versions it references)."""

    def value(v: Any) -> str:
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        return str(v)

    lines: list[str] = []
    sections = {
        "spark": cfg["spark"],
        "kafka": cfg["kafka"],
        "ingest": cfg["ingest"],
        "join": cfg["rowtime"],
        "maintenance": {"lineage_outputs": [cfg["proctime"]["output_table"]]},
        "quality": cfg["quality"],
    }
    for name, section in sections.items():
        lines.append(f"[{name}]")
        for k, v in section.items():
            if v is None or k == "tables":
                continue
            lines.append(f"{k} = {value(v)}")
        for t in section.get("tables", []):
            lines.append(f"[[{name}.tables]]")
            lines += [f"{k} = {value(v)}" for k, v in t.items()]
        lines.append("")
    return "\n".join(lines)
