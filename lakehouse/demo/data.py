"""The demo's data: a currency-rates dimension as a Debezium stream, and orders to enrich.

Deterministic for a seed. The CDC stream is what a Debezium PostgreSQL connector sends for
``public.rates``: a snapshot phase, then updates (a random walk of each rate), deletes and
re-inserts of two exotic currencies, and a few malformed records. Every record is keyed by
currency and goes to partition ``crc32(key) % partitions``, as Kafka's default partitioner
would. Orders use the major currencies only (so every order has a rate to join), with event
times that wander a few seconds out of order.

Both streams are cut into *waves*: what a producer sends between two pauses. The first waves
interleave the snapshot with orders, so orders arrive before the snapshot is complete.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass, field
from decimal import Decimal

from lakehouse.testing import DebeziumTable

MAJORS = ("EUR", "GBP", "JPY", "CHF", "USD", "CAD", "AUD", "SEK", "NOK", "DKK", "PLN", "CZK")
EXOTICS = ("HUF", "TRY", "ZAR", "MXN", "BRL", "INR", "KRW", "SGD", "HKD", "NZD", "THB", "ISK")
#: The demo's event time starts here (a Monday morning, UTC).
T0_MS = 1_772_438_400_000  # 2026-03-02T08:00:00Z

ORDER_SCHEMA = (
    "order_id bigint, customer string, currency string, amount decimal(12,2), order_ts timestamp"
)

Record = tuple[bytes | None, bytes | None, int]  # key, value, partition


@dataclass
class Wave:
    """What the producers send at once: CDC records and orders."""

    cdc: list[Record] = field(default_factory=list)
    orders: list[Record] = field(default_factory=list)


@dataclass(frozen=True)
class DemoData:
    """The whole demo input, in waves."""

    waves: tuple[Wave, ...]
    cdc_partitions: int
    order_partitions: int

    @property
    def cdc_count(self) -> int:
        """CDC records in all waves (changes, tombstones and malformed ones)."""
        return sum(len(w.cdc) for w in self.waves)

    @property
    def order_count(self) -> int:
        """Orders in all waves."""
        return sum(len(w.orders) for w in self.waves)


def _partition(key: bytes | None, partitions: int) -> int:
    return zlib.crc32(key or b"") % partitions


def make_demo_data(
    *,
    seed: int = 7,
    orders: int = 1200,
    changes: int = 150,
    cdc_partitions: int = 3,
    order_partitions: int = 2,
) -> DemoData:
    """Build the demo's waves (see the module docstring)."""
    rng = random.Random(seed)
    table = DebeziumTable("public", "rates", key="currency", start_ms=T0_MS, step_ms=10)
    rates = {
        c: Decimal(rng.uniform(0.05, 2.0)).quantize(Decimal("0.0001")) for c in MAJORS + EXOTICS
    }

    def rec(message) -> Record:  # noqa: ANN001 - a lakehouse.testing Message
        key = message.key_bytes()
        return (key, message.value_bytes(), _partition(key, cdc_partitions))

    snapshot = [
        rec(m) for m in table.snapshot([{"currency": c, "rate": str(r)} for c, r in rates.items()])
    ]

    # the log phase: 30 minutes of changes after the snapshot
    span_ms = 30 * 60_000
    log: list[Record] = []
    deleted: set[str] = set()
    for i in range(changes):
        table.now_ms = T0_MS + 60_000 + (span_ms * i) // changes
        if i in (changes // 5, changes // 2):
            victim = EXOTICS[len(deleted)]
            deleted.add(victim)
            log += [rec(m) for m in table.delete(victim)]  # a delete and its tombstone
            continue
        if i in (changes // 3, (3 * changes) // 4) and deleted:
            back = sorted(deleted)[0]
            deleted.discard(back)
            log.append(rec(table.insert({"currency": back, "rate": str(rates[back])})))
            continue
        currency = rng.choice([c for c in MAJORS + EXOTICS if c not in deleted])
        rates[currency] = (rates[currency] * Decimal(1 + rng.uniform(-0.01, 0.01))).quantize(
            Decimal("0.0001")
        )
        log.append(rec(table.update({"currency": currency, "rate": str(rates[currency])})))
    malformed: list[Record] = [
        (None, b'{"payload": {"op": "u", "after": {"currency": "EUR"', 0),  # truncated
        (None, b'{"op": "x", "after": {"currency": "EUR"}, "source": {"ts_ms": 1}}', 1),
        (b'{"currency": "EUR"}', b'{"op": "c", "after": null, "source": {"ts_ms": 1}}', 2),
    ]

    order_records: list[Record] = []
    for i in range(orders):
        # orders start 10 s after the snapshot was read (an order placed before the rates
        # existed has, rightly, no rate to join as of its time)
        ts = T0_MS + 10_000 + (span_ms * i) // orders + rng.randint(-4000, 4000)
        value = {
            "order_id": i + 1,
            "customer": f"c{rng.randint(1, 300):03d}",
            "currency": rng.choice(MAJORS),
            "amount": str(Decimal(rng.uniform(5, 500)).quantize(Decimal("0.01"))),
            "order_ts": _iso(ts),
        }
        key = str(i + 1).encode()
        order_records.append((key, json.dumps(value).encode(), _partition(key, order_partitions)))

    # waves: the snapshot in two halves with the first orders around them, then the log
    waves: list[Wave] = []
    half = len(snapshot) // 2
    first_orders = orders // 10
    waves.append(Wave(cdc=snapshot[:half], orders=order_records[:first_orders]))
    waves.append(
        Wave(
            cdc=snapshot[half:] + malformed[:1],
            orders=order_records[first_orders : 2 * first_orders],
        )
    )
    rest_orders = order_records[2 * first_orders :]
    n_log_waves = 6
    for w in range(n_log_waves):
        lo, hi = (len(log) * w) // n_log_waves, (len(log) * (w + 1)) // n_log_waves
        olo, ohi = (
            (len(rest_orders) * w) // n_log_waves,
            (len(rest_orders) * (w + 1)) // n_log_waves,
        )
        extra = malformed[1:] if w == 2 else []
        waves.append(Wave(cdc=log[lo:hi] + extra, orders=rest_orders[olo:ohi]))
    return DemoData(tuple(waves), cdc_partitions, order_partitions)


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
