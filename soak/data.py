"""The soak's input: a seeded currency-rates CDC stream and orders, one *tick* at a time.

Everything is a pure function of the seed and the tick number, so a run can be replayed;
only how many ticks a run produces depends on the wall clock. Tick ``i`` covers event time
``[T0 + i s, T0 + (i + 1) s)``:

* ticks 0-2 carry the Debezium snapshot of :data:`KEYS` (``op = r``, ``first`` ... ``last``),
  a third each, while orders already flow: a processing-time join must wait for the marker;
* later ticks carry ``cdc_per_tick`` changes (random-walk updates, deletes with their
  tombstones, re-inserts of deleted keys) at distinct, increasing event times, and at
  ``truncate_tick`` a truncate followed by inserts of every key;
* every tick carries ``probes_per_tick`` orders whose event times trail the dimension's
  clock by up to 3 s and lead it by up to 1 s (out of order across ticks); one in ten takes
  exactly the event time and key of a recent change (the as-of boundary); keys are drawn from
  every currency, deleted ones included (a left join releases them unmatched);
* every ``malformed_every`` ticks one malformed CDC record and one malformed order, which
  must end in the dead-letter tables.

:meth:`SoakData.final` gives the records that end the run: one change per CDC partition an
hour of event time ahead, and one order per probe partition two hours ahead (the
*sentinels*). They advance the build and the probe watermarks past every real order, so a
row-time join releases them all and keeps only the sentinels pending.

The expected build versions and probe rows are built with the classes of the plain-Python
reference (``tests/reference.py``, loaded by :func:`load_reference`), so the verification
compares the pipelines with that reference, not with a second copy of it.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
import zlib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from lakehouse.testing import DebeziumTable

REPO = Path(__file__).resolve().parent.parent

CDC_TOPIC = "dbserver1.public.rates"
ORDERS_TOPIC = "orders"
CDC_PARTITIONS = 3
PROBE_PARTITIONS = 2
KEYS = (
    "EUR",
    "GBP",
    "JPY",
    "CHF",
    "USD",
    "CAD",
    "AUD",
    "SEK",
    "NOK",
    "DKK",
    "PLN",
    "CZK",
    "HUF",
    "TRY",
    "ZAR",
    "MXN",
    "BRL",
    "INR",
    "KRW",
    "SGD",
    "HKD",
    "NZD",
    "THB",
    "ISK",
)
#: Event time of tick 0 (2026-03-02T08:00:00Z).
T0_MS = 1_772_438_400_000
TICK_MS = 1_000
SNAPSHOT_TICKS = 3
PROBE_SCHEMA = "order_id bigint, currency string, amount double, order_ts bigint"
FINAL_CDC_AHEAD_MS = 3_600_000
SENTINEL_AHEAD_MS = 7_200_000

_QUANTUM = Decimal("0.0001")

RecordKind = Literal["change", "tombstone", "malformed"]
ProbeKind = Literal["probe", "malformed"]


def load_reference() -> ModuleType:
    """Import ``tests/reference.py`` (the plain-Python reference of the join semantics).

    ``tests/`` is not a package; the module is loaded from its file and registered under
    ``soak_reference`` (dataclasses look their module up in ``sys.modules``).
    """
    name = "soak_reference"
    if name in sys.modules:
        return sys.modules[name]
    path = REPO / "tests" / "reference.py"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the reference implementation from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


reference = load_reference()


@dataclass(slots=True)
class CdcRecord:
    """One CDC record to produce; ``version`` is the build row it must become (changes)."""

    key: bytes | None
    value: bytes | None
    partition: int
    kind: RecordKind
    version: Any = None  # reference.Version, value = (rate, event time ms)
    offset: int | None = None  # set once produced


@dataclass(slots=True)
class ProbeRecord:
    """One order to produce; ``row`` is the reference's ProbeRow (None when malformed)."""

    key: bytes | None
    value: bytes
    partition: int
    kind: ProbeKind
    row: Any = None  # reference.ProbeRow
    offset: int | None = None


@dataclass(slots=True)
class Tick:
    """What the producer sends in one tick."""

    index: int
    cdc: list[CdcRecord] = field(default_factory=list)
    probes: list[ProbeRecord] = field(default_factory=list)


def _partition(key: bytes | None, partitions: int) -> int:
    # the shape of Kafka's default partitioner: a stable hash of the key
    return zlib.crc32(key or b"") % partitions


class SoakData:
    """The seeded generator (see the module docstring).

    Args:
        seed: the seed; the same seed and tick numbers give the same records.
        cdc_per_tick: log-phase changes per tick (deletes count with their tombstone as one).
        probes_per_tick: orders per tick.
        malformed_every: one malformed CDC record and one malformed order every this many
            ticks (0: none).
        truncate_tick: the tick of the truncate (None: no truncate).
    """

    def __init__(
        self,
        *,
        seed: int,
        cdc_per_tick: int = 2,
        probes_per_tick: int = 8,
        malformed_every: int = 60,
        truncate_tick: int | None = None,
    ) -> None:
        if cdc_per_tick < 1 or probes_per_tick < 1:
            raise ValueError("cdc_per_tick and probes_per_tick must be at least 1")
        self.rng = random.Random(seed)
        self.cdc_per_tick = cdc_per_tick
        self.probes_per_tick = probes_per_tick
        self.malformed_every = malformed_every
        self.truncate_tick = truncate_tick
        self.table = DebeziumTable("public", "rates", key="currency", start_ms=T0_MS, step_ms=1)
        self.rates = {k: Decimal(self.rng.uniform(0.05, 2.0)).quantize(_QUANTUM) for k in KEYS}
        self.deleted: set[str] = set()
        self.next_tick = 0
        self.next_id = 1
        self.recent: list[tuple[str, int]] = []  # (key, event time) of the last changes
        self._snapshot: list[CdcRecord] = []
        self._malformed_n = 0

    # ---------------------------------------------------------------------------- records

    def _cdc(self, message: Any, kind: RecordKind = "change") -> CdcRecord:
        """A produced record from a DebeziumTable message; a change carries its version."""
        key = message.key_bytes()
        value = message.value_bytes()
        version = None
        if kind == "change":
            payload = message.value["payload"]
            row = payload["after"] or payload["before"] or {}
            op = payload["op"]
            rate = None
            if op in ("r", "c", "u"):
                rate = self.rates[row["currency"]]
            time_ms = int(payload["source"]["ts_ms"])
            version = reference.Version(
                key=row.get("currency"),
                time=time_ms,
                seq=f"{int(payload['source']['lsn']):020d}",
                op=op,
                value=(rate, time_ms),
            )
            if op != "t":
                self.recent = [*self.recent[-7:], (row["currency"], time_ms)]
        partition = 0 if key is None else _partition(key, CDC_PARTITIONS)
        return CdcRecord(key, value, partition, kind, version)

    def _change(self, key: str) -> list[CdcRecord]:
        """A random change of ``key``: update, delete (+ tombstone) or re-insert."""
        t = self.table
        if key in self.deleted:
            self.deleted.discard(key)
            return [self._cdc(t.insert({"currency": key, "rate": str(self.rates[key])}))]
        live = len(KEYS) - len(self.deleted)
        if live > 6 and self.rng.random() < 0.04:
            self.deleted.add(key)
            delete, tombstone = t.delete(key)
            return [self._cdc(delete), self._cdc(tombstone, "tombstone")]
        step = Decimal(1 + self.rng.uniform(-0.01, 0.01))
        self.rates[key] = max(Decimal("0.0100"), (self.rates[key] * step).quantize(_QUANTUM))
        return [self._cdc(t.update({"currency": key, "rate": str(self.rates[key])}))]

    def _malformed_cdc(self) -> CdcRecord:
        variants: list[tuple[bytes | None, bytes]] = [
            (None, b'{"payload": {"op": "u", "after": {"currency": "EUR"'),  # truncated JSON
            (None, b'{"op": "x", "after": {"currency": "EUR"}, "source": {"ts_ms": 1}}'),
            (b'{"currency": "EUR"}', b'{"op": "c", "after": null, "source": {"ts_ms": 1}}'),
        ]
        key, value = variants[self._malformed_n % len(variants)]
        return CdcRecord(key, value, self.rng.randrange(CDC_PARTITIONS), "malformed")

    def _malformed_probe(self) -> ProbeRecord:
        variants = [
            b'{"order_id": 1, "currency": "EUR", "order_ts": ',  # truncated JSON
            b'{"currency": "EUR", "amount": 1.0, "order_ts": 1772438400000}',  # no order_id
            b"not json at all",
        ]
        value = variants[self._malformed_n % len(variants)]
        return ProbeRecord(None, value, self.rng.randrange(PROBE_PARTITIONS), "malformed")

    def _probe(self, order_id: int, key: str, ts: int, partition: int | None = None) -> ProbeRecord:
        value = {
            "order_id": order_id,
            "currency": key,
            "amount": round(self.rng.uniform(5, 500), 2),
            "order_ts": ts,
        }
        raw_key = str(order_id).encode()
        return ProbeRecord(
            raw_key,
            json.dumps(value).encode(),
            _partition(raw_key, PROBE_PARTITIONS) if partition is None else partition,
            "probe",
            reference.ProbeRow(order_id, key, ts),
        )

    # ------------------------------------------------------------------------------ ticks

    def tick(self) -> Tick:
        """The next tick's records."""
        i = self.next_tick
        self.next_tick += 1
        base = T0_MS + i * TICK_MS
        out = Tick(i)
        t = self.table
        if i == 0:
            t.now_ms = base
            rows = [{"currency": k, "rate": str(self.rates[k])} for k in KEYS]
            self._snapshot = [self._cdc(m) for m in t.snapshot(rows)]
        if i < SNAPSHOT_TICKS:
            n = len(self._snapshot)
            out.cdc += self._snapshot[(n * i) // SNAPSHOT_TICKS : (n * (i + 1)) // SNAPSHOT_TICKS]
        else:
            spacing = TICK_MS // (self.cdc_per_tick + len(KEYS) + 2)
            t.now_ms = base
            if i == self.truncate_tick:
                out.cdc.append(self._cdc(t.truncate()))
                self.deleted.clear()
                for k in KEYS:
                    t.now_ms += spacing
                    out.cdc.append(self._cdc(t.insert({"currency": k, "rate": str(self.rates[k])})))
            for _ in range(self.cdc_per_tick):
                t.now_ms += spacing
                out.cdc += self._change(self.rng.choice(KEYS))
        malformed_now = self.malformed_every > 0 and i % self.malformed_every == (
            self.malformed_every // 2
        )
        if malformed_now:
            out.cdc.insert(self.rng.randrange(len(out.cdc) + 1), self._malformed_cdc())
        for _ in range(self.probes_per_tick):
            if self.recent and self.rng.random() < 0.1:
                key, ts = self.rng.choice(self.recent)  # exactly at a version's start
            else:
                key = self.rng.choice(KEYS)
                ts = base + self.rng.randint(-3 * TICK_MS, TICK_MS - 1)
            out.probes.append(self._probe(self.next_id, key, ts))
            self.next_id += 1
        if malformed_now:
            out.probes.insert(self.rng.randrange(len(out.probes) + 1), self._malformed_probe())
            self._malformed_n += 1
        return out

    def final(self) -> Tick:
        """The records that end the run (see the module docstring)."""
        i = self.next_tick
        self.next_tick += 1
        out = Tick(i)
        t = self.table
        t.now_ms = T0_MS + i * TICK_MS + FINAL_CDC_AHEAD_MS
        for p in range(CDC_PARTITIONS):
            key = next(k for k in KEYS if _partition(json_key(k), CDC_PARTITIONS) == p)
            t.now_ms += 1
            out.cdc += self._change_or_insert(key)
        ts = T0_MS + i * TICK_MS + SENTINEL_AHEAD_MS
        for p in range(PROBE_PARTITIONS):
            out.probes.append(self._probe(self.next_id, KEYS[0], ts + p, partition=p))
            self.next_id += 1
        return out

    def _change_or_insert(self, key: str) -> list[CdcRecord]:
        t = self.table
        if key in self.deleted:
            self.deleted.discard(key)
            return [self._cdc(t.insert({"currency": key, "rate": str(self.rates[key])}))]
        self.rates[key] = (self.rates[key] * Decimal("1.001")).quantize(_QUANTUM)
        return [self._cdc(t.update({"currency": key, "rate": str(self.rates[key])}))]


def json_key(currency: str) -> bytes:
    """The record key a :class:`DebeziumTable` message of ``currency`` carries."""
    table = DebeziumTable("public", "rates", key="currency", start_ms=T0_MS)
    message = table.update({"currency": currency, "rate": "1"})
    key = message.key_bytes()
    assert key is not None
    return key
