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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

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

    def rec(message: Any) -> Record:  # a lakehouse.testing Message
        key = message.key_bytes()
        return (key, message.value_bytes(), _partition(key, cdc_partitions))

    snapshot = [
        rec(m) for m in table.snapshot([{"currency": c, "rate": str(r)} for c, r in rates.items()])
    ]

    # the log phase: 30 minutes of changes after the snapshot
    span_ms = 30 * 60_000
    log: list[Record] = []
    for i, (op, currency, rate) in enumerate(_rate_changes(rng, rates, changes)):
        table.now_ms = T0_MS + 60_000 + (span_ms * i) // changes
        if op == "d":
            log += [rec(m) for m in table.delete(currency)]  # a delete and its tombstone
        elif op == "c":
            log.append(rec(table.insert({"currency": currency, "rate": str(rate)})))
        else:
            log.append(rec(table.update({"currency": currency, "rate": str(rate)})))
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
        order_records.append(order_record(_order(rng, i + 1), ts, order_partitions))

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


def _rate_changes(
    rng: random.Random, rates: dict[str, Decimal], changes: int
) -> Iterator[tuple[str, str, Decimal | None]]:
    """The log phase both demos share, as ``(op, currency, rate)``: ``changes`` changes, a
    random walk of the rates (``u``, each by up to ±1 %), in which an exotic currency is
    deleted (``d``, rate None) at a fifth and at half of them, and inserted again (``c``, at
    its last rate) at a third and at three quarters. Updates ``rates`` as it walks; the same
    ``rng`` state gives the same changes."""
    deleted: set[str] = set()
    for i in range(changes):
        if i in (changes // 5, changes // 2):
            victim = EXOTICS[len(deleted)]
            deleted.add(victim)
            yield "d", victim, None
        elif i in (changes // 3, (3 * changes) // 4) and deleted:
            back = sorted(deleted)[0]
            deleted.discard(back)
            yield "c", back, rates[back]
        else:
            currency = rng.choice([c for c in MAJORS + EXOTICS if c not in deleted])
            rates[currency] = (rates[currency] * Decimal(1 + rng.uniform(-0.01, 0.01))).quantize(
                Decimal("0.0001")
            )
            yield "u", currency, rates[currency]


def _order(rng: random.Random, order_id: int) -> dict[str, Any]:
    """An order without its time: the major currencies only, so every order has a rate."""
    return {
        "order_id": order_id,
        "customer": f"c{rng.randint(1, 300):03d}",
        "currency": rng.choice(MAJORS),
        "amount": str(Decimal(rng.uniform(5, 500)).quantize(Decimal("0.01"))),
    }


def order_record(order: Mapping[str, Any], ts_ms: int, partitions: int) -> Record:
    """``order`` placed at ``ts_ms``, as the Kafka record the demo sends (keyed by its id)."""
    key = str(order["order_id"]).encode()
    value = {**order, "order_ts": _iso(ts_ms)}
    return (key, json.dumps(value).encode(), _partition(key, partitions))


#: One SQL statement and its parameters (psycopg's ``%s`` placeholders).
Statement = tuple[str, tuple[Any, ...]]


@dataclass
class DatabaseWave:
    """What the demo does at once in ``--source postgres`` mode: transactions against
    ``public.rates`` and orders, which are stamped with the wall clock when they are sent
    (``lag_ms`` before it: orders arrive a little out of order)."""

    transactions: list[list[Statement]] = field(default_factory=list)
    orders: list[tuple[dict[str, Any], int]] = field(default_factory=list)  # (order, lag_ms)
    #: The records Debezium sends for the transactions: one per changed row, and a
    #: tombstone after each delete.
    cdc_records: int = 0


@dataclass(frozen=True)
class DatabaseDemo:
    """The input of ``--source postgres``: the rates table's rows before the connector
    starts (Debezium's snapshot reads them), then waves. Wave 0 has orders only: they are
    sent once Debezium has read the snapshot, while the ingest is still loading it."""

    rates: dict[str, Decimal]
    waves: tuple[DatabaseWave, ...]
    order_partitions: int

    @property
    def cdc_count(self) -> int:
        """The records Debezium sends: the snapshot's, then the changes' and tombstones."""
        return len(self.rates) + sum(w.cdc_records for w in self.waves)

    @property
    def order_count(self) -> int:
        """Orders in all waves."""
        return sum(len(w.orders) for w in self.waves)


def make_database_demo(
    *,
    seed: int = 7,
    orders: int = 1200,
    changes: int = 90,
    log_waves: int = 6,
    order_partitions: int = 2,
) -> DatabaseDemo:
    """Build the input of ``--source postgres``: the same currencies, random walk of rates,
    deletes and re-inserts of exotic currencies as :func:`make_demo_data`, as SQL
    transactions of one to three statements, each change its own statement."""
    rng = random.Random(seed)
    rates = {
        c: Decimal(rng.uniform(0.05, 2.0)).quantize(Decimal("0.0001")) for c in MAJORS + EXOTICS
    }
    statements: list[tuple[Statement, int]] = []  # (statement, records Debezium sends)
    for op, currency, rate in _rate_changes(rng, dict(rates), changes):
        if op == "d":  # a delete and its tombstone
            statements.append((("DELETE FROM public.rates WHERE currency = %s", (currency,)), 2))
        elif op == "c":
            sql = "INSERT INTO public.rates (currency, rate) VALUES (%s, %s)"
            statements.append(((sql, (currency, rate)), 1))
        else:
            sql = "UPDATE public.rates SET rate = %s WHERE currency = %s"
            statements.append(((sql, (rate, currency)), 1))

    first_orders = orders // 10
    all_orders = [_order(rng, i + 1) for i in range(orders)]
    # wave 0: orders placed as the snapshot completes, none before it (as of an earlier
    # time there is, rightly, no rate to join)
    waves = [DatabaseWave(orders=[(o, 0) for o in all_orders[:first_orders]])]
    rest = all_orders[first_orders:]
    for w in range(log_waves):
        lo, hi = (len(statements) * w) // log_waves, (len(statements) * (w + 1)) // log_waves
        wave = DatabaseWave()
        chunk = statements[lo:hi]
        while chunk:
            size = rng.randint(1, 3)
            wave.transactions.append([statement for statement, _ in chunk[:size]])
            wave.cdc_records += sum(records for _, records in chunk[:size])
            chunk = chunk[size:]
        olo, ohi = (len(rest) * w) // log_waves, (len(rest) * (w + 1)) // log_waves
        wave.orders = [(o, rng.randint(0, 3000)) for o in rest[olo:ohi]]
        waves.append(wave)
    return DatabaseDemo(rates, tuple(waves), order_partitions)


def _iso(ms: int) -> str:
    from datetime import UTC, datetime

    return (
        datetime.fromtimestamp(ms / 1000, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
