"""What feeds the demo's pipelines, wave by wave: generated Debezium records and orders (to
Kafka topics or JSON-lines directories), or transactions committed to PostgreSQL, which
Debezium sends to Kafka (:mod:`lakehouse.demo.database`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from lakehouse.demo.data import DatabaseDemo, DemoData, Record, order_record

if TYPE_CHECKING:
    from lakehouse.demo.database import DemoDatabase

CDC_TOPIC = "dbserver1.public.rates"
ORDERS_TOPIC = "orders"


class Producer:
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


class Feed:
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


class GeneratedFeed(Feed):
    """Generated Debezium records and orders, to Kafka or to files."""

    data: DemoData

    def __init__(self, producer: Producer, data: DemoData) -> None:
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


class DatabaseFeed(Feed):
    """Transactions committed to PostgreSQL (Debezium sends them to Kafka) and orders stamped
    with the wall clock. Wave 0 starts the connector, waits until Debezium has read its
    snapshot, and sends the first orders; the ingest starts after that wave's pause, so the
    joins hold those orders until its marker is set (a snapshot of 24 rows is loaded too
    fast to be seen half-loaded otherwise)."""

    ingest_starts_after = 0
    data: DatabaseDemo

    def __init__(self, producer: Producer, database: DemoDatabase, data: DatabaseDemo) -> None:
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
