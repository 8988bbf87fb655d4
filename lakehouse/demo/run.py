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
The feeds are in :mod:`lakehouse.demo.feeds`, what the demo shows while it runs in
:mod:`lakehouse.demo.progress`.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rich.console import Console
from rich.table import Table

from lakehouse.demo.data import ORDER_SCHEMA, DemoData, make_database_demo, make_demo_data
from lakehouse.demo.feeds import (
    CDC_TOPIC,
    ORDERS_TOPIC,
    DatabaseFeed,
    Feed,
    GeneratedFeed,
    Producer,
)
from lakehouse.demo.progress import (
    Display,
    Stats,
    lag,
    on_ingest,
    on_join,
    settle,
    wait_for_wave,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse.runner import SupervisedQuery

from lakehouse.dimension.layout import (
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_COMPLETED_AT,
    PROP_SNAPSHOT_COMPLETED_VERSION,
    PROP_SNAPSHOT_SIGNAL,
)

Source = Literal["kafka", "files", "postgres"]

TRIGGER = "2 seconds"
IDLE_TIMEOUT_MS = 8_000


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
            GeneratedFeed(Producer(source, output, None), data),
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
        producer = Producer("kafka", output, broker.bootstrap)
        if source == "kafka":
            data = make_demo_data(orders=orders)
            _describe(data, console)
            feed: Feed = GeneratedFeed(producer, data)
            return _run(source, output, broker.bootstrap, feed, console, started)
        return _run_postgres(output, broker.bootstrap, producer, orders, console, started)


def _describe(data: DemoData, console: Console) -> None:
    console.print(
        f"  {data.cdc_count} CDC records for public.rates over {data.cdc_partitions} "
        f"partitions, {data.order_count} orders over {data.order_partitions}, "
        f"in {len(data.waves)} waves"
    )


def _run_postgres(
    out: Path, bootstrap: str, producer: Producer, orders: int, console: Console, started: float
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
            "postgres", out, bootstrap, DatabaseFeed(producer, database, data), console, started
        )


def _run(
    source: Source,
    out: Path,
    bootstrap: str | None,
    feed: Feed,
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
    stats = Stats()

    def start_ingesting() -> None:
        queries.insert(0, start_ingest(spark, ingest_settings, on_batch=on_ingest(stats)))

    queries = [
        start_join(spark, row_settings, on_batch=on_join(stats, "rowtime")),
        start_join(spark, proc_settings, on_batch=on_join(stats, "proctime")),
    ]
    try:
        if feed.ingest_starts_after < 0:
            start_ingesting()
        with Display(console, stats) as display:
            for i in range(feed.waves):
                sent = feed.send(i)
                with stats.lock:
                    stats.log.append(sent)
                wait_for_wave(display, stats, feed, i, ingesting=i > feed.ingest_starts_after)
                if i == feed.ingest_starts_after:
                    with stats.lock:
                        stats.log.append("the ingest starts")
                    start_ingesting()
            settle(display, stats, feed, queries)
        console.print()
    finally:
        feed.close()
        _stop_between_batches(queries)
    for q in queries:
        error = q.exception()
        if error is not None:
            raise error
    _end_input(spark, cfg, stats, console)
    return _finish(spark, cfg, stats, feed, out, console, started)


def _stop_between_batches(queries: list[SupervisedQuery], timeout_s: float = 15.0) -> None:
    """Stop each query when no batch of it is running (up to ``timeout_s``): a batch stopped
    midway is retried by the next run, correctly, but fills the screen with Spark's
    interruption traces."""
    deadline = time.monotonic() + timeout_s
    for q in queries:
        while q.isActive and q.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.2)
        q.stop()


def _end_input(spark: SparkSession, cfg: dict[str, Any], stats: Stats, console: Console) -> None:
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
    query = start_join(spark, ending, on_batch=on_join(stats, "rowtime"))
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        raise error


def _finish(
    spark: SparkSession,
    cfg: dict[str, Any],
    stats: Stats,
    feed: Feed,
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
        summary.add_row(f"{name}: watermark (lag behind the newest order)", lag(s))
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
