"""The watermark plot: probe, build and combined watermarks and the pending backlog per batch.

Drawn with matplotlib's object API on an Agg canvas (no pyplot, no global backend switch, no
display needed), from the pending table's commit metadata (:mod:`._ledger`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from lakehouse.quality._ledger import BatchRecord
from lakehouse.time import WATERMARK_MIN, Watermark

_MS_PER_DAY = 86_400_000


def _as_date_number(wm: Watermark) -> float:
    """Matplotlib date number (days since 1970-01-01) of an event-time watermark; NaN for
    ``MIN`` and processing time, which have no place on a time axis (drawn separately)."""
    if wm.use_processing_time or wm.timestamp == WATERMARK_MIN:
        return math.nan
    return wm.timestamp / _MS_PER_DAY


def plot_watermarks(records: Sequence[BatchRecord], path: Path, *, title: str) -> Path:
    """Write a PNG of the watermarks and the pending backlog over the batches.

    Top panel: the probe, build and combined watermarks (event time, UTC) per batch; batches
    whose watermark is processing time are marked along the top edge, and ``MIN`` ("nothing
    known yet") leaves a gap. Bottom panel: rows pending after each batch.

    Args:
        records: the batch records, in version order.
        path: the PNG to write (overwritten).
        title: the figure's title.

    Returns:
        ``path``.
    """
    import matplotlib.dates as mdates
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(11, 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1.4))
    batches = [r.batch_id for r in records]
    # combined first, wide and pale, so the channel it equals stays visible on top of it
    series = (
        ("combined", "tab:green", "D", [r.combined for r in records]),
        ("probe", "tab:blue", "o", [r.probe for r in records]),
        ("build", "tab:orange", "s", [r.build for r in records]),
    )
    has_points = False
    for label, color, marker, wms in series:
        ys = [_as_date_number(w) for w in wms]
        has_points = has_points or any(not math.isnan(y) for y in ys)
        wide = label == "combined"
        top.plot(
            batches,
            ys,
            marker=marker,
            color=color,
            label=f"{label} watermark",
            lw=6 if wide else 1.5,
            alpha=0.35 if wide else 1.0,
            markersize=10 if wide else 5,
        )
    for offset, (label, color, _, wms) in enumerate(series):
        proc = [b for b, w in zip(batches, wms, strict=True) if w.use_processing_time]
        if proc:
            # processing time sorts after every event time: mark it above the time axis
            top.scatter(
                proc,
                [1.02 + 0.035 * offset] * len(proc),
                transform=top.get_xaxis_transform(),
                marker="^",
                color=color,
                clip_on=False,
                label=f"{label}: processing time",
            )
    if has_points:
        top.yaxis_date(tz="UTC")
        top.yaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d\n%H:%M:%S", tz="UTC"))
    else:
        top.set_yticks([])
        top.text(0.5, 0.5, "no event-time watermark yet", ha="center", transform=top.transAxes)
    top.set_ylabel("watermark (UTC)")
    top.set_title(title, fontsize="medium")
    top.grid(True, alpha=0.3)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")

    bottom.bar(batches, [r.pending_rows for r in records], color="tab:gray", label="pending rows")
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.set_ylabel("pending rows")
    bottom.set_xlabel("batch id")
    bottom.grid(True, alpha=0.3)
    if batches:
        bottom.set_xticks(batches if len(batches) <= 30 else batches[:: len(batches) // 30 + 1])
    fig.savefig(path, dpi=100)
    return path
