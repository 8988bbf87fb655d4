"""What the demo shows while it runs: the pipelines' counters (updated by their batch
callbacks), a live view on a terminal or plain lines elsewhere, and the waits between waves."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from lakehouse.demo.feeds import Feed
    from lakehouse.dimension.targets import BatchReport
    from lakehouse.join.operator import JoinBatchReport
    from lakehouse.runner import SupervisedQuery

SETTLE_TIMEOUT_S = 240
#: How long a wave waits for the pipelines to take it in before the demo goes on.
WAVE_TIMEOUT_S = 120


@dataclass
class Stats:
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


def on_ingest(stats: Stats) -> Callable[[BatchReport], None]:
    def on_batch(report: BatchReport) -> None:
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


def on_join(stats: Stats, name: str) -> Callable[[JoinBatchReport], None]:
    def on_batch(report: JoinBatchReport) -> None:
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


def render(stats: Stats, phase: str) -> Group:
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


class Display:
    """Where the demo shows its progress: a live view on a terminal; on anything else (a
    file, a CI log, a pipe), plain lines: each event once, and the counts when they change,
    at most every few seconds, never a redrawn screen."""

    PLAIN_EVERY_S = 5.0

    def __init__(self, console: Console, stats: Stats) -> None:
        self.console = console
        self.stats = stats
        self.live: Live | None = None
        self._logged = 0
        self._last_line = ""
        self._last_at = 0.0

    def __enter__(self) -> Display:
        if self.console.is_terminal:
            self.live = Live(
                render(self.stats, "starting"),
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
            self.live.update(render(self.stats, phase))
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


def wait_for_wave(
    display: Display, stats: Stats, feed: Feed, wave: int, *, ingesting: bool
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


def settle(display: Display, stats: Stats, feed: Feed, queries: list[SupervisedQuery]) -> None:
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


def lag(s: dict[str, Any]) -> str:
    """The combined watermark, and how far it trails the newest order's event time."""
    if s.get("wm_ms") is None or s.get("probe_max") is None:
        return f"{s['watermark']} (releases every row)"
    return f"{s['watermark']} ({(s['probe_max'] - s['wm_ms']) / 1000:.1f} s)"
