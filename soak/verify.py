"""The soak's verdict: the tables the pipelines wrote against what was produced.

Every check compares a table with an expectation computed in plain Python from the produced
records (with their Kafka partition and offset), using the reference implementation of the
join semantics (``tests/reference.py``):

* **build table** = the CDC input applied: one row per change record, with its key, op, event
  time, rate and source position, none missing, none twice; tombstones and malformed records
  make no row; the snapshot marker is set;
* **ingest dead letters** = exactly the malformed CDC records, once each;
* per join, **no probe lost or duplicated**: every valid order id is exactly once in the
  output or the pending table; the malformed orders are exactly the join's dead letters;
* **row time**: released rows and their values are ``reference.rowtime_join`` at the join's
  final combined watermark (left join); the final watermark has passed every real order, so
  only the sentinels wait;
* **processing time**: each row joined ``reference.as_of(..., t=None)`` (the latest version)
  over the build versions visible at the ``_build_version`` it records (the rows whose source
  offsets the build table's commits up to that version had consumed, from their
  ``lakehouse.endOffsets``), and no row read a version before the snapshot was complete.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from lakehouse.dimension.layout import (
    EVENT_TIME,
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    META_END_OFFSETS,
    OP,
    PROP_SNAPSHOT_COMPLETE,
    PROP_SNAPSHOT_FIRST_COMPLETED_VERSION,
    PROP_SNAPSHOT_SIGNAL,
)
from lakehouse.join.layout import BUILD_EVENT_TIME, BUILD_VERSION, MATCHED
from soak.data import CDC_TOPIC, CdcRecord, ProbeRecord, reference

_QUANTUM = Decimal("0.0001")
SAMPLES = 8


@dataclass
class Check:
    """One verdict: a name, pass or fail, what was found, and a few offending examples."""

    name: str
    passed: bool
    detail: str
    samples: list[str] = field(default_factory=list)


@dataclass
class JoinFigures:
    """What one join's tables hold, against the expectation."""

    output_rows: int = 0
    pending_rows: int = 0
    dead_letters: int = 0
    lost: int = 0
    duplicated: int = 0
    value_mismatches: int = 0
    final_watermark: str = ""


@dataclass
class Verification:
    """All checks and the figures of the report."""

    checks: list[Check] = field(default_factory=list)
    build_rows: int = 0
    build_missing: int = 0
    build_duplicated: int = 0
    ingest_dead_letters: int = 0
    joins: dict[str, JoinFigures] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Whether every check passed."""
        return all(c.passed for c in self.checks)


def _rate(value: Any) -> Decimal | None:
    return None if value is None else Decimal(value).quantize(_QUANTUM)


def verify(
    spark: Any,
    *,
    tables: dict[str, str],
    cdc: list[CdcRecord],
    probes: list[ProbeRecord],
) -> Verification:
    """Run every check (see the module docstring).

    Args:
        spark: a SparkSession to read the tables with.
        tables: locations: ``build``, ``ingest_dead_letter``, and ``<join>_output``,
            ``<join>_pending``, ``<join>_dead_letter`` for ``rowtime`` and ``proctime``.
        cdc: the produced CDC records, with their offsets.
        probes: the produced orders, with their offsets.
    """
    result = Verification()
    _verify_build(spark, tables, cdc, result)
    changes = [r for r in cdc if r.kind == "change"]
    for mode in ("rowtime", "proctime"):
        _verify_join(spark, tables, mode, changes, probes, result)
    return result


# ---------------------------------------------------------------------------------- build


def _verify_build(
    spark: Any, tables: dict[str, str], cdc: list[CdcRecord], result: Verification
) -> None:
    from pyspark.sql import functions as F

    from lakehouse import delta

    rows = (
        delta.read(spark, tables["build"])
        .select(
            "currency",
            OP,
            F.unix_millis(EVENT_TIME).alias("t"),
            "rate",
            KAFKA_PARTITION,
            KAFKA_OFFSET,
        )
        .collect()
    )
    actual = Counter(
        (r["currency"], r[OP], r["t"], _rate(r["rate"]), r[KAFKA_PARTITION], r[KAFKA_OFFSET])
        for r in rows
    )
    expected = Counter(
        (v.key, v.op, v.time, _rate(v.value[0]), r.partition, r.offset)
        for r in cdc
        if r.kind == "change"
        for v in (r.version,)
    )
    missing = expected - actual
    extra = actual - expected
    positions = Counter((k[4], k[5]) for k in actual.elements())
    duplicated = sum(n - 1 for n in positions.values() if n > 1)
    result.build_rows = len(rows)
    result.build_missing = sum(missing.values())
    result.build_duplicated = duplicated
    result.checks.append(
        Check(
            "build table = CDC input applied (per key, versions)",
            not missing and not extra,
            f"{len(rows)} rows; expected {sum(expected.values())}; {sum(missing.values())} "
            f"missing, {sum(extra.values())} unexpected, {duplicated} duplicated",
            [f"missing {k}" for k in list(missing)[:SAMPLES]]
            + [f"unexpected {k}" for k in list(extra)[:SAMPLES]],
        )
    )
    props = delta.get_properties(tables["build"])
    result.checks.append(
        Check(
            "snapshot marker set",
            props.get(PROP_SNAPSHOT_COMPLETE) == "true",
            f"complete={props.get(PROP_SNAPSHOT_COMPLETE)}, signal="
            f"{props.get(PROP_SNAPSHOT_SIGNAL)}, first completed version="
            f"{props.get(PROP_SNAPSHOT_FIRST_COMPLETED_VERSION)}",
        )
    )

    dead = (
        delta.read(spark, tables["ingest_dead_letter"])
        .select("_topic", "_partition", "_offset", "_error_kind")
        .collect()
        if delta.table_exists(tables["ingest_dead_letter"])
        else []
    )
    got = Counter((r["_partition"], r["_offset"]) for r in dead)
    want = Counter((r.partition, r.offset) for r in cdc if r.kind == "malformed")
    result.ingest_dead_letters = len(dead)
    kinds = Counter(r["_error_kind"] for r in dead)
    result.checks.append(
        Check(
            "ingest dead letters = the malformed CDC records, once each",
            got == want,
            f"{len(dead)} dead letters ({dict(kinds)}); {sum(want.values())} malformed produced"
            f"; {sum((want - got).values())} missing, {sum((got - want).values())} unexpected",
            [f"missing {k}" for k in list(want - got)[:SAMPLES]]
            + [f"unexpected {k}" for k in list(got - want)[:SAMPLES]],
        )
    )


# ----------------------------------------------------------------------------------- joins


def _verify_join(
    spark: Any,
    tables: dict[str, str],
    mode: str,
    changes: list[CdcRecord],
    probes: list[ProbeRecord],
    result: Verification,
) -> None:
    from pyspark.sql import functions as F

    from lakehouse import delta

    figures = result.joins.setdefault(mode, JoinFigures())
    out_uri, pending_table, dead_uri = (
        tables[f"{mode}_output"],
        tables[f"{mode}_pending"],
        tables[f"{mode}_dead_letter"],
    )
    out = (
        delta.read(spark, out_uri)
        .select(
            "order_id",
            "currency",
            "rate",
            MATCHED,
            BUILD_VERSION,
            F.unix_millis(BUILD_EVENT_TIME).alias("bt"),
        )
        .collect()
        if delta.table_exists(out_uri)
        else []
    )
    pending = (
        [r["order_id"] for r in delta.read(spark, pending_table).select("order_id").collect()]
        if delta.table_exists(pending_table)
        else []
    )
    dead = (
        delta.read(spark, dead_uri)
        .select("_partition", "_offset", "_error_kind", "_raw_value")
        .collect()
        if delta.table_exists(dead_uri)
        else []
    )
    figures.output_rows, figures.pending_rows, figures.dead_letters = (
        len(out),
        len(pending),
        len(dead),
    )

    valid = {p.row.id: p for p in probes if p.kind == "probe"}
    malformed = Counter((p.partition, p.offset) for p in probes if p.kind == "malformed")
    seen: Counter[int] = Counter(r["order_id"] for r in out)
    seen.update(pending)
    dead_positions = Counter((r["_partition"], r["_offset"]) for r in dead)
    dead_valid = [r for r in dead if (r["_partition"], r["_offset"]) not in malformed]
    for r in dead_valid:
        seen.update([_probe_id(r["_raw_value"])])
    lost = sorted(i for i in valid if seen[i] == 0)
    duplicated = sorted(i for i, n in seen.items() if n > 1)
    unexpected = sorted(i for i in seen if i not in valid)
    figures.lost, figures.duplicated = len(lost), len(duplicated)
    result.checks.append(
        Check(
            f"{mode}: no probe lost or duplicated (output + pending + dead letters)",
            not lost and not duplicated and not unexpected,
            f"{len(valid)} valid orders; {len(out)} output rows, {len(pending)} pending, "
            f"{len(dead_valid)} valid ones dead-lettered; {len(lost)} lost, {len(duplicated)} "
            f"duplicated, {len(unexpected)} unknown ids",
            [f"lost id {i}" for i in lost[:SAMPLES]]
            + [f"duplicated id {i} ({seen[i]}x)" for i in duplicated[:SAMPLES]]
            + [f"unknown id {i}" for i in unexpected[:SAMPLES]],
        )
    )
    missing_dead = malformed - dead_positions
    result.checks.append(
        Check(
            f"{mode}: dead letters = the malformed orders, once each",
            not missing_dead
            and not dead_valid
            and all(n == 1 for k, n in dead_positions.items() if k in malformed),
            f"{len(dead)} dead letters ({dict(Counter(r['_error_kind'] for r in dead))}); "
            f"{sum(malformed.values())} malformed produced; {sum(missing_dead.values())} "
            f"missing, {len(dead_valid)} valid orders among them",
            [f"missing {k}" for k in list(missing_dead)[:SAMPLES]]
            + [f"valid order dead-lettered: {r['_error_kind']}" for r in dead_valid[:SAMPLES]],
        )
    )

    actual: dict[int, tuple[Decimal | None, int] | None] = {}
    versions_of: dict[int, int] = {}
    for r in out:
        if r["order_id"] in actual:
            continue  # counted as duplicated above
        actual[r["order_id"]] = (_rate(r["rate"]), r["bt"]) if r[MATCHED] else None
        versions_of[r["order_id"]] = r[BUILD_VERSION]
    if mode == "rowtime":
        _check_rowtime(tables, changes, valid, actual, set(pending), figures, result)
    else:
        _check_proctime(tables, changes, valid, actual, versions_of, pending, figures, result)


def _probe_id(raw: bytes | None) -> int | None:
    try:
        return int(json.loads(raw or b"")["order_id"])
    except (ValueError, KeyError, TypeError):
        return None


def _by_key(changes: Iterable[CdcRecord]) -> tuple[dict[Any, list[Any]], list[Any]]:
    """Versions grouped by key, and the truncates (they end every key's versions)."""
    by_key: dict[Any, list[Any]] = defaultdict(list)
    truncates: list[Any] = []
    for r in changes:
        if r.version.op == "t":
            truncates.append(r.version)
        else:
            by_key[r.version.key].append(r.version)
    return by_key, truncates


def _check_rowtime(
    tables: dict[str, str],
    changes: list[CdcRecord],
    valid: dict[int, ProbeRecord],
    actual: dict[int, tuple[Decimal | None, int] | None],
    pending: set[int],
    figures: JoinFigures,
    result: Verification,
) -> None:
    from lakehouse import delta
    from lakehouse.time import Watermark

    watermark = None
    for entry in delta.history(tables["rowtime_pending"], limit=16):
        if "lakehouse.state" in entry.metadata:
            state = json.loads(entry.metadata["lakehouse.state"])
            watermark = Watermark.from_dict(state["combined"])
            break
    figures.final_watermark = str(watermark)
    real = [p.row for p in valid.values() if p.row.time < _sentinel_floor(valid)]
    newest = max(p.time for p in real)
    drained = (
        watermark is not None
        and not watermark.use_processing_time
        and watermark.timestamp >= newest
    )
    result.checks.append(
        Check(
            "rowtime: drained (the final watermark passed every real order)",
            drained,
            f"final combined watermark {watermark}; newest real order at {newest}",
        )
    )
    wm = watermark.timestamp if watermark is not None else reference.WATERMARK_MIN
    by_key, truncates = _by_key(changes)
    probes_by_key: dict[Any, list[Any]] = defaultdict(list)
    for p in valid.values():
        probes_by_key[p.row.key].append(p.row)
    expected: dict[int, Any] = {}
    expected_pending: set[int] = set()
    for key, rows in probes_by_key.items():
        # only the key's own versions and the truncates can decide its rows (reference.as_of)
        released, waiting = reference.rowtime_join(
            rows, by_key.get(key, []) + truncates, watermark=wm, left=True
        )
        expected.update(released)
        expected_pending.update(waiting)
    mismatches = [
        f"order {i}: expected {expected[i]}, got {actual[i]}"
        for i in sorted(expected)
        if i in actual and actual[i] != expected[i]
    ]
    early = sorted(i for i in actual if i in expected_pending)
    stuck = sorted(i for i in pending if i in expected)
    figures.value_mismatches = len(mismatches) + len(early) + len(stuck)
    result.checks.append(
        Check(
            "rowtime: output = reference.rowtime_join (rows by probe id, joined values)",
            not mismatches and not early and not stuck and set(pending) == expected_pending,
            f"{len(expected)} expected released, {len(expected_pending)} expected pending; "
            f"{len(mismatches)} wrong values, {len(early)} released though the watermark had "
            f"not passed them, {len(stuck)} still pending though it had",
            mismatches[:SAMPLES]
            + [f"order {i} released early" for i in early[:SAMPLES]]
            + [f"order {i} still pending" for i in stuck[:SAMPLES]],
        )
    )


def _sentinel_floor(valid: dict[int, ProbeRecord]) -> int:
    """Orders at or after this time are the sentinels (hours ahead of everything else)."""
    from soak.data import SENTINEL_AHEAD_MS

    return max(p.row.time for p in valid.values()) - SENTINEL_AHEAD_MS // 2


def _check_proctime(
    tables: dict[str, str],
    changes: list[CdcRecord],
    valid: dict[int, ProbeRecord],
    actual: dict[int, tuple[Decimal | None, int] | None],
    versions_of: dict[int, int],
    pending: list[int],
    figures: JoinFigures,
    result: Verification,
) -> None:
    from lakehouse import delta

    # what each build table version had consumed of the CDC topic: the running maximum of
    # the end offsets its data commits record
    commits: list[tuple[int, dict[int, int]]] = []
    for entry in delta.history(tables["build"]):
        text = entry.metadata.get(META_END_OFFSETS)
        if text:
            ends = json.loads(text).get(CDC_TOPIC, {})
            commits.append((entry.version, {int(p): int(o) for p, o in ends.items()}))
    commits.sort()
    cumulative: list[dict[int, int]] = []
    running: dict[int, int] = {}
    for _, ends in commits:
        for p, o in ends.items():
            running[p] = max(running.get(p, 0), o)
        cumulative.append(dict(running))
    commit_versions = [v for v, _ in commits]

    def consumed(version: int) -> dict[int, int]:
        i = bisect.bisect_right(commit_versions, version) - 1
        return cumulative[i] if i >= 0 else {}

    props = delta.get_properties(tables["build"])
    first_complete = int(props.get(PROP_SNAPSHOT_FIRST_COMPLETED_VERSION, -1))
    keyed: dict[Any, list[CdcRecord]] = defaultdict(list)
    truncates = [r for r in changes if r.version.op == "t"]
    for r in changes:
        if r.version.op != "t":
            keyed[r.version.key].append(r)
    cache: dict[tuple[int, Any], Any] = {}
    mismatches: list[str] = []
    too_early: list[str] = []
    for order_id, got in sorted(actual.items()):
        probe = valid.get(order_id)
        if probe is None:
            continue
        version = versions_of[order_id]
        if version < first_complete:
            too_early.append(f"order {order_id} read build version {version} < {first_complete}")
        memo = (version, probe.row.key)
        if memo not in cache:
            ends = consumed(version)
            visible = [
                r.version
                for r in keyed.get(probe.row.key, []) + truncates
                if r.offset < ends.get(r.partition, 0)
            ]
            best = reference.as_of(visible, probe.row.key, None)
            cache[memo] = None if best is None else best.value
        if got != cache[memo]:
            mismatches.append(
                f"order {order_id} at build version {version}: expected {cache[memo]}, got {got}"
            )
    figures.value_mismatches = len(mismatches) + len(too_early) + len(pending)
    result.checks.append(
        Check(
            "proctime: output = reference.as_of(latest) at the build version each row read",
            not mismatches and not pending,
            f"{len(actual)} rows checked against {len(cache)} (version, key) states; "
            f"{len(mismatches)} wrong values; {len(pending)} still pending",
            mismatches[:SAMPLES] + [f"order {i} still pending" for i in pending[:SAMPLES]],
        )
    )
    result.checks.append(
        Check(
            "proctime: no row joined before the snapshot was complete",
            first_complete >= 0 and not too_early,
            f"first complete build version {first_complete}; {len(too_early)} rows read "
            "an older one",
            too_early[:SAMPLES],
        )
    )
