"""The watermark plot of the quality report (``watermarks.png``).

Both panels share one x axis: the wall-clock time (UTC) at which each join batch committed.

* Top, when any batch has an event-time watermark: the combined, probe and build event-time
  watermarks (UTC) over commit time, as steps (a watermark holds until the next batch).
  ``MIN`` ("nothing known yet") leaves a gap, the end of input (``WATERMARK_MAX``) is drawn on
  an "end of input" line above the event times, and batches in which a watermark was
  processing time are shaded "at processing time".
* Top, when no batch has an event-time watermark (a processing-time join): each channel's
  watermark state over commit time (nothing yet, processing time, end of input).
* Bottom: the rows pending after each batch (the backlog, a step) and the rows each batch
  released.
* On both: a "snapshot complete" line when the build table's snapshot completed (its
  ``lakehouse.snapshot.completedAt``); the time axis is extended to it, unless it is far
  from the batches, when the top panel's legend names it instead.
* The figure's title is short (e.g. the join's table name and version); the full table
  location, if given, is in small print at the bottom. Without batches, the figure says
  "no batch recorded yet".

Drawn with matplotlib's object API on an Agg canvas (no pyplot, no global backend switch, no
display needed), from the pending table's commit metadata (:mod:`._ledger`).
:func:`watermark_figure` builds the figure, :func:`plot_watermarks` writes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from lakehouse.dimension.marker import iso_to_ms
from lakehouse.quality._ledger import BatchRecord
from lakehouse.time import WATERMARK_MAX, WATERMARK_MIN, Watermark

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Text of the figure drawn for a ledger without batches.
NO_BATCH_TEXT: Final = "no batch recorded yet"
#: Label of the line at the build table's snapshot completion.
SNAPSHOT_LABEL: Final = "snapshot complete"
#: Label of the line the end-of-input watermark (``WATERMARK_MAX``) is drawn on.
END_OF_INPUT_LABEL: Final = "end of input"
#: Label of the shading of batches with a processing-time watermark.
PROCESSING_TIME_LABEL: Final = "at processing time"
#: ``gid`` of the "snapshot complete" lines (one per panel), for finding them in a figure.
SNAPSHOT_GID: Final = "snapshot-complete"

_State = Literal["min", "event", "processing", "end"]

_MS_PER_DAY: Final = 86_400_000
_SECOND: Final = 1 / 86_400  # in days, the unit of matplotlib date numbers
_MINUTE: Final = 60 * _SECOND
# event times outside these years cannot be labelled on a date axis (Python's datetime ends
# at year 9999, and the axis is padded): earlier ones count as MIN, later ones as the end
_FIRST_MS: Final = int(datetime(1000, 1, 1, tzinfo=UTC).timestamp() * 1000)
_LAST_MS: Final = int(datetime(9000, 1, 1, tzinfo=UTC).timestamp() * 1000)
# channels, drawing order (combined first, wide and pale, so the channel it equals stays
# visible on top of it), colour, marker
_SERIES: Final = (
    ("combined", "tab:green", "D"),
    ("probe", "tab:blue", "o"),
    ("build", "tab:orange", "s"),
)
_STATE_STYLE: Final[dict[_State, tuple[str, str]]] = {
    "min": ("nothing yet (MIN)", "0.82"),
    "event": ("event time", "tab:blue"),
    "processing": ("processing time", "tab:purple"),
    "end": (END_OF_INPUT_LABEL, "0.25"),
}
_PROCESSING_COLOR: Final = "tab:purple"
_SNAPSHOT_COLOR: Final = "tab:red"
_MARKERS_UP_TO: Final = 60  # batches; with more, markers would only blur the lines
_TITLE_CHARS: Final = 100
_SOURCE_CHARS: Final = 170


def plot_watermarks(
    records: Sequence[BatchRecord],
    path: Path,
    *,
    title: str,
    source: str | None = None,
    snapshot_completed_at: int | str | None = None,
) -> Path:
    """Write the watermark plot (module docstring) as a PNG.

    Args:
        records: the batch records, in batch order.
        path: the PNG to write (overwritten).
        title: the figure's title; keep it short (e.g. the join's table name and version).
        source: shown in small print at the bottom (e.g. the pending table's full URI).
        snapshot_completed_at: when the build table's snapshot completed, as epoch ms or as
            the ISO-8601 text of ``lakehouse.snapshot.completedAt``; None or unparsable: not
            drawn.

    Returns:
        ``path``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    completed_ms = (
        iso_to_ms(snapshot_completed_at)
        if isinstance(snapshot_completed_at, str)
        else snapshot_completed_at
    )
    fig = watermark_figure(
        records, title=title, source=source, snapshot_completed_at_ms=completed_ms
    )
    FigureCanvasAgg(fig).print_png(path)
    return path


def watermark_figure(
    records: Sequence[BatchRecord],
    *,
    title: str,
    source: str | None = None,
    snapshot_completed_at_ms: int | None = None,
) -> Figure:
    """Build the watermark plot (module docstring) on an Agg canvas, without writing it.

    Args:
        records: the batch records, in batch order (drawn in commit-time order).
        title: the figure's title (shortened in the middle if very long).
        source: shown in small print at the bottom (shortened in the middle if very long).
        snapshot_completed_at_ms: when the build table's snapshot completed, epoch ms. The
            time axis is extended to it unless it lies far outside the batches' time range
            (more than that range, or 15 minutes, away): then the top panel's legend names it.

    Returns:
        The figure, attached to a ``FigureCanvasAgg``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(_shorten(title, _TITLE_CHARS), fontsize="large", parse_math=False)
    if source:
        fig.supxlabel(
            _shorten(source, _SOURCE_CHARS),
            x=0.005,
            ha="left",
            fontsize="x-small",
            color="0.4",
            parse_math=False,
        )
    ordered = sorted(records, key=lambda r: (r.timestamp_ms, r.batch_id))
    if not ordered:
        _draw_no_batch(fig, snapshot_completed_at_ms)
        return fig

    xs = [_date_number(r.timestamp_ms) for r in ordered]
    snap = None if snapshot_completed_at_ms is None else _date_number(snapshot_completed_at_ms)
    lo, hi = min(xs), max(xs)
    near = max(hi - lo, 15 * _MINUTE)
    snap_in_range = snap is not None and lo - near <= snap <= hi + near
    if snap is not None and snap_in_range:
        lo, hi = min(lo, snap), max(hi, snap)
    pad = max((hi - lo) * 0.03, 5 * _SECOND)
    xlim = (lo - pad, hi + pad)

    states = {
        name: [_state(getattr(r, name)) for r in ordered] for name, _color, _marker in _SERIES
    }
    has_event_time = any(s == "event" for column in states.values() for s in column)
    top, bottom = fig.subplots(
        2, 1, sharex=True, height_ratios=(3, 1.6) if has_event_time else (1.7, 1.6)
    )
    if has_event_time:
        _draw_event_time(top, ordered, xs, states, xlim)
    else:
        _draw_states(top, xs, states, xlim)
    _draw_backlog(bottom, ordered, xs, xlim)
    for ax in (top, bottom):
        ax.set_xlim(*xlim)
    _date_axis(bottom, "x")
    bottom.set_xlabel("batch commit time (UTC)")
    if snapshot_completed_at_ms is not None and snap is not None:
        if snap_in_range:
            _draw_snapshot_line(top, bottom, snap, xlim)
        else:
            _draw_snapshot_off_range(top, snapshot_completed_at_ms, before=snap < xlim[0])
    for ax in (top, bottom):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return fig


# ------------------------------------------------------------------------------- panels


def _draw_no_batch(fig: Figure, snapshot_ms: int | None) -> None:
    """The figure of a ledger without batches: one empty panel that says so."""
    ax = fig.subplots()
    ax.set_axis_off()
    text = NO_BATCH_TEXT
    if snapshot_ms is not None:
        text += f"\nbuild table {SNAPSHOT_LABEL} at {_format_ms(snapshot_ms)}"
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize="large", color="0.3")


def _draw_event_time(
    ax: Axes,
    records: Sequence[BatchRecord],
    xs: Sequence[float],
    states: dict[str, list[_State]],
    xlim: tuple[float, float],
) -> None:
    """Top panel when there are event-time watermarks: one step line per channel that has
    any; the end of input on a line of its own above them; processing time shaded."""
    channels = {
        name: [_event_number(getattr(r, name)) for r in records] for name, _c, _m in _SERIES
    }
    finite = [y for ys in channels.values() for y in ys if not math.isnan(y)]
    lo, hi = min(finite), max(finite)
    ypad = max((hi - lo) * 0.06, 5 * _SECOND)
    has_end = any(s == "end" for column in states.values() for s in column)
    end_y = hi + 2.5 * ypad
    markers = len(records) <= _MARKERS_UP_TO
    for name, color, marker in _SERIES:
        if not any(s == "event" for s in states[name]):
            continue  # never an event time: no line, no legend entry
        ys = [end_y if s == "end" else y for s, y in zip(states[name], channels[name], strict=True)]
        wide = name == "combined"
        ax.plot(
            [*xs, xlim[1]],
            [*ys, ys[-1]],  # the last watermark holds until the next batch
            drawstyle="steps-post",
            color=color,
            lw=6 if wide else 1.6,
            alpha=0.35 if wide else 1.0,
            label=f"{name} watermark",
            solid_capstyle="butt",
        )
        if markers:
            ax.plot(
                xs,
                ys,
                ls="none",
                marker=marker,
                color=color,
                alpha=0.35 if wide else 1.0,
                markersize=9 if wide else 4.5,
            )
    if has_end:
        ax.axhspan(hi + ypad, end_y + ypad, color="0.5", alpha=0.08, lw=0)
        ax.axhline(end_y, color="0.25", ls="--", lw=1)
        ax.text(
            0.005,
            end_y,
            f" {END_OF_INPUT_LABEL} (MAX)",
            transform=ax.get_yaxis_transform(),
            va="bottom",
            ha="left",
            fontsize="small",
            color="0.25",
        )
    cutoff = hi + ypad  # dates above the event times are not labelled: the end of input is
    ax.set_ylim(lo - ypad, (end_y if has_end else hi) + ypad)
    _shade_processing_time(ax, xs, states, xlim)
    _date_axis(ax, "y", label_up_to=cutoff if has_end else None)
    ax.set_ylabel("event-time watermark (UTC)")
    ax.set_title("watermarks per batch (MIN: gap)", fontsize="medium")
    ax.grid(True, alpha=0.3)


def _shade_processing_time(
    ax: Axes, xs: Sequence[float], states: dict[str, list[_State]], xlim: tuple[float, float]
) -> None:
    """Shade the time of batches in which any channel's watermark was processing time."""
    flags = [any(states[name][i] == "processing" for name in states) for i in range(len(xs))]
    spans = _spans(xs, flags, xlim)
    for i, (start, end) in enumerate(spans):
        ax.axvspan(
            start,
            end,
            color=_PROCESSING_COLOR,
            alpha=0.15,
            lw=0,
            label=PROCESSING_TIME_LABEL if i == 0 else None,
        )


def _draw_states(
    ax: Axes, xs: Sequence[float], states: dict[str, list[_State]], xlim: tuple[float, float]
) -> None:
    """Top panel without event-time watermarks: each channel's watermark state over time,
    one row per channel, each state lasting until the next batch."""
    rows = [name for name, _c, _m in _SERIES]  # combined on top
    seen: set[_State] = set()
    for row, name in enumerate(reversed(rows)):
        column = states[name]
        for state in _STATE_STYLE:
            flags = [s == state for s in column]
            if not any(flags):
                continue
            label, color = _STATE_STYLE[state]
            segments = [(start, end - start) for start, end in _spans(xs, flags, xlim, held=True)]
            ax.broken_barh(
                segments,
                (row - 0.3, 0.6),
                facecolors=color,
                edgecolor="white",
                lw=0.3,
                label=None if state in seen else label,
            )
            seen.add(state)
    ax.scatter(
        xs,
        [len(rows) - 0.5] * len(xs),
        marker="|",
        color="0.35",
        s=40,
        lw=0.8,
        label="batch commit",
    )
    ax.set_yticks(range(len(rows)), list(reversed(rows)))
    ax.set_ylim(-0.6, len(rows) - 0.3)
    ax.set_ylabel("watermark")
    processing = any(s == "processing" for s in states["combined"])
    ax.set_title(
        "watermark state per batch (no event-time watermark"
        + ("; a processing-time join)" if processing else ")"),
        fontsize="medium",
    )
    ax.grid(True, axis="x", alpha=0.3)


def _draw_backlog(
    ax: Axes, records: Sequence[BatchRecord], xs: Sequence[float], xlim: tuple[float, float]
) -> None:
    """Bottom panel: rows pending after each batch (a step, held until the next batch) and
    rows released by each batch (stems)."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    pending = [r.pending_rows for r in records]
    released = [r.released for r in records]
    held_xs, held_pending = [*xs, xlim[1]], [*pending, pending[-1]]  # held to the next batch
    ax.fill_between(held_xs, held_pending, step="post", color="tab:gray", alpha=0.3, lw=0)
    ax.step(
        held_xs,
        held_pending,
        where="post",
        color="0.2",
        lw=1.4,
        label="pending after batch",
        zorder=3,
    )
    dense = len(records) > _MARKERS_UP_TO
    if any(released):  # behind the backlog, thinner when there are many batches
        ax.vlines(
            xs,
            0,
            released,
            color="tab:green",
            lw=0.8 if dense else 1.5,
            alpha=0.6 if dense else 1.0,
            label="released by batch",
            zorder=2,
        )
        if not dense:
            ax.plot(xs, released, ls="none", marker="o", markersize=3.5, color="tab:green")
    top = max(*pending, *released, 1)
    ax.set_ylim(0, top * 1.12)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    if len(records) > 1 and len({r.timestamp_ms for r in records}) == 1:
        ax.text(  # they are drawn on top of each other: say so
            0.01,
            0.95,
            f"all {len(records)} batches committed at {_format_ms(records[0].timestamp_ms)}",
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize="small",
            color="0.3",
        )
    ax.set_ylabel("rows")
    ax.set_title("pending backlog and releases", fontsize="medium")
    ax.grid(True, alpha=0.3)


def _draw_snapshot_line(top: Axes, bottom: Axes, x: float, xlim: tuple[float, float]) -> None:
    """The "snapshot complete" line on both panels, labelled in the top one."""
    for ax in (top, bottom):
        ax.axvline(x, color=_SNAPSHOT_COLOR, ls="--", lw=1.4, gid=SNAPSHOT_GID, zorder=3)
    right_side = x > xlim[0] + 0.8 * (xlim[1] - xlim[0])
    top.text(
        x,
        0.97,
        f" {SNAPSHOT_LABEL} ",
        transform=top.get_xaxis_transform(),
        rotation=90,
        ha="right" if right_side else "left",
        va="top",
        fontsize="small",
        color=_SNAPSHOT_COLOR,
        bbox={"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 1},
        zorder=4,
    )


def _draw_snapshot_off_range(top: Axes, snapshot_ms: int, *, before: bool) -> None:
    """Name the snapshot's completion in the top panel's legend when it is far outside the
    batches' time range (extending the axis to it would squeeze the batches together)."""
    when = "earlier" if before else "later"
    top.plot(
        [],
        [],
        color=_SNAPSHOT_COLOR,
        ls="--",
        lw=1.4,
        label=f"{SNAPSHOT_LABEL}, {when}:\n{_format_ms(snapshot_ms)}",
        gid=SNAPSHOT_GID,
    )


# ------------------------------------------------------------------------------- helpers


def _state(wm: Watermark) -> _State:
    """What a watermark is, for drawing it."""
    if wm.use_processing_time:
        return "processing"
    if wm.timestamp == WATERMARK_MIN or wm.timestamp < _FIRST_MS:
        return "min"
    if wm.timestamp == WATERMARK_MAX or wm.timestamp > _LAST_MS:
        return "end"
    return "event"


def _event_number(wm: Watermark) -> float:
    """Date number of an event-time watermark; NaN for anything else (see :func:`_state`)."""
    return _date_number(wm.timestamp) if _state(wm) == "event" else math.nan


def _date_number(ms: int) -> float:
    """Matplotlib date number (days since its epoch) of epoch milliseconds."""
    from matplotlib.dates import date2num

    return float(date2num(datetime(1970, 1, 1, tzinfo=UTC))) + ms / _MS_PER_DAY


def _format_ms(ms: int) -> str:
    """Epoch milliseconds as UTC text, to the second."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms"


def _spans(
    xs: Sequence[float], flags: Sequence[bool], xlim: tuple[float, float], *, held: bool = False
) -> list[tuple[float, float]]:
    """The x ranges of the runs of flagged batches.

    ``held``: a batch's range runs from its time to the next batch's (the last to the
    axis' end). Otherwise it is centred on the batch, half way to its neighbours. Every
    range is at least 0.8 % of the axis wide, so a single batch stays visible."""
    n = len(xs)
    least = (xlim[1] - xlim[0]) * 0.008
    bounds: list[tuple[float, float]] = []
    for i in range(n):
        if held:
            start, end = xs[i], xs[i + 1] if i + 1 < n else xlim[1]
        else:
            start = (xs[i - 1] + xs[i]) / 2 if i > 0 else xlim[0]
            end = (xs[i] + xs[i + 1]) / 2 if i + 1 < n else xlim[1]
        bounds.append((start, end))
    spans: list[tuple[float, float]] = []
    for i, flag in enumerate(flags):
        if not flag:
            continue
        start, end = bounds[i]
        if spans and i > 0 and flags[i - 1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return [
        (start, end) if end - start >= least else (start - least / 2, start + least / 2)
        for start, end in spans
    ]


def _date_axis(ax: Axes, which: Literal["x", "y"], *, label_up_to: float | None = None) -> None:
    """Make an axis a UTC date axis with concise, readable tick labels; ticks above
    ``label_up_to`` stay unlabelled."""
    import matplotlib.dates as mdates

    class _Formatter(mdates.ConciseDateFormatter):
        def format_ticks(self, values: Sequence[float]) -> list[str]:
            labels = super().format_ticks(values)
            if label_up_to is None:
                return labels
            return [t if v <= label_up_to else "" for v, t in zip(values, labels, strict=True)]

    axis = ax.xaxis if which == "x" else ax.yaxis
    locator = mdates.AutoDateLocator(tz=UTC, minticks=4, maxticks=9)
    # finer steps than matplotlib's (1, 5, 10, ... minutes), so a 9-minute run gets 5 ticks
    locator.intervald[mdates.MINUTELY] = [1, 2, 5, 10, 15, 20, 30]
    locator.intervald[mdates.SECONDLY] = [1, 2, 5, 10, 15, 20, 30]
    axis.set_major_locator(locator)
    # seconds as times of day ("04:23:15", not "15"); the offset then only names the day
    seconds = "%H:%M:%S.%f"  # trailing zeros are cut: "04:23:15", "00:00:00.09"
    axis.set_major_formatter(
        _Formatter(
            locator,
            tz=UTC,
            formats=["%Y", "%b", "%d", "%H:%M", "%H:%M", seconds],
            zero_formats=["", "%Y", "%b", "%b-%d", "%H:%M", seconds],
            offset_formats=["", "%Y", "%Y-%b", "%Y-%b-%d", "%Y-%b-%d", "%Y-%b-%d"],
            show_offset=True,
        )
    )


def _shorten(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, cut in the middle."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    half = (limit - 1) // 2
    return f"{text[:half]}\N{HORIZONTAL ELLIPSIS}{text[len(text) - (limit - 1 - half) :]}"
