"""The quality report's watermark plot (``lakehouse.quality._plot``), without Spark.

The ledgers are built from ``BatchRecord`` objects directly. The tests look at the figure's
elements (legend entries, lines, texts, axis formatters, window extents), not at pixels.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import matplotlib.dates as mdates
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection, PathCollection
from matplotlib.figure import Figure
from matplotlib.spines import Spine
from matplotlib.text import Text
from matplotlib.transforms import Bbox, BboxBase

from lakehouse.quality import _plot
from lakehouse.quality._ledger import BatchRecord
from lakehouse.quality._plot import (
    END_OF_INPUT_LABEL,
    NO_BATCH_TEXT,
    PROCESSING_TIME_LABEL,
    SNAPSHOT_GID,
    SNAPSHOT_LABEL,
    plot_watermarks,
    watermark_figure,
)
from lakehouse.time import WATERMARK_MAX, Watermark

T0 = int(datetime(2025, 3, 14, 9, 0, tzinfo=UTC).timestamp() * 1000)
HOUR = 3_600_000
PT = Watermark.PROCESSING_TIME
MIN = Watermark.MIN
END = Watermark(WATERMARK_MAX)
URI = "/data/warehouse/joins/orders_rowtime_pending"
TITLE = "orders_rowtime_pending @ v14: watermarks and pending backlog"
PNG = b"\x89PNG\r\n\x1a\n"

# matplotlib warns when it cannot lay out or tick a figure well: that fails a test here
pytestmark = pytest.mark.filterwarnings("error::UserWarning")


def _record(
    batch_id: int,
    timestamp_ms: int,
    *,
    probe: Watermark,
    build: Watermark,
    pending: int = 0,
    released: int = 0,
) -> BatchRecord:
    combined = min(probe, build)
    return BatchRecord(
        version=batch_id + 1,
        timestamp_ms=timestamp_ms,
        batch_id=batch_id,
        pipeline="orders",
        arrived=released,
        released=released,
        pending_rows=pending,
        dead_lettered=0,
        combined=combined,
        previous=combined,
        probe=probe,
        build=build,
        build_version=3,
    )


def _rowtime(n: int = 12, *, end_of_input: bool = False) -> list[BatchRecord]:
    """A row-time join: the build channel is MIN for three batches (snapshot loading)."""
    records = []
    for i in range(n):
        probe = Watermark(T0 - HOUR + i * 40_000)
        build = MIN if i < 3 else Watermark(T0 - HOUR + i * 35_000)
        if end_of_input and i >= n - 2:
            probe = END
            build = END if i == n - 1 else build
        records.append(
            _record(i, T0 + i * 45_000, probe=probe, build=build, pending=5 * i, released=i % 4)
        )
    return records


def _proctime(n: int = 10) -> list[BatchRecord]:
    """A processing-time join: the build channel is MIN until its snapshot completes."""
    return [
        _record(
            i,
            T0 + i * 30_000,
            probe=PT,
            build=MIN if i < 4 else PT,
            pending=25 * (i + 1) if i < 4 else 0,
            released=0 if i < 4 else 25,
        )
        for i in range(n)
    ]


# --------------------------------------------------------------------------------- helpers


def _drawn(fig: Figure) -> Figure:
    fig.canvas.draw()  # runs the constrained layout
    return fig


def _panels(fig: Figure) -> tuple[Axes, Axes]:
    top, bottom = fig.axes
    return top, bottom


def _legend_texts(ax: Axes) -> list[str]:
    legend = ax.get_legend()
    return [] if legend is None else [t.get_text() for t in legend.get_texts()]


def _texts(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def _snapshot_lines(ax: Axes) -> list[object]:
    return [line for line in ax.get_lines() if line.get_gid() == SNAPSHOT_GID]


def _drawn_artists(fig: Figure) -> list[Artist]:
    """The figure's visible artists: its own texts and legends, each panel's children
    (lines, collections, patches, texts, legend); a panel's axes (ticks and their labels)
    count through the panel's tight bounding box, as only the ticks in view are drawn."""
    out: list[Artist] = [*fig.texts, *fig.legends]  # the texts hold suptitle and supxlabel
    for ax in fig.axes:
        out.extend(
            a for a in ax.get_children() if not isinstance(a, Axis | Spine) and a is not ax.patch
        )
    blank = [a for a in out if isinstance(a, Text) and not a.get_text()]
    return [a for a in out if a.get_visible() and not any(a is b for b in blank)]


def _extent(artist: Artist, renderer: RendererBase) -> Bbox | None:
    """The part of an artist that is drawn (clipped to its clip box), None if nothing.

    Collections are measured from their paths (their window extent is infinite when they
    are not in data coordinates, as markers placed above a panel would be): a scatter's
    markers around their offsets, other collections' paths where they are drawn."""
    box = artist.get_window_extent(renderer)
    if isinstance(artist, PathCollection):
        points = artist.get_offset_transform().transform(artist.get_offsets())
        radius = math.sqrt(max(artist.get_sizes(), default=0)) / 2 * _fig_dpi(artist) / 72
        box = Bbox.from_extents(
            points[:, 0].min() - radius,
            points[:, 1].min() - radius,
            points[:, 0].max() + radius,
            points[:, 1].max() + radius,
        )
    elif isinstance(artist, Collection) and artist.get_paths():
        box = Bbox.union([p.get_extents(artist.get_transform()) for p in artist.get_paths()])
    if not all(math.isfinite(v) for v in box.bounds) or (box.width <= 0 and box.height <= 0):
        return None  # nothing drawn (an empty line, a legend-only proxy)
    clip = artist.get_clip_box() if artist.get_clip_on() else None
    return Bbox.intersection(box, clip) if clip is not None else box


def _fig_dpi(artist: Artist) -> float:
    figure = artist.get_figure()
    return 72.0 if figure is None else float(figure.dpi)


def _inside(box: BboxBase, page: BboxBase) -> bool:
    return (
        box.x0 >= page.x0 - 1
        and box.y0 >= page.y0 - 1
        and box.x1 <= page.x1 + 1
        and box.y1 <= page.y1 + 1
    )


def assert_nothing_clipped(fig: Figure) -> None:
    """Every drawn artist lies inside the figure; what a panel draws (but its legend and
    title) lies inside the panel; no panel reaches into the figure's title."""
    canvas = _drawn(fig).canvas
    assert isinstance(canvas, FigureCanvasAgg)
    renderer = canvas.get_renderer()
    page = fig.bbox
    artists = _drawn_artists(fig)
    for artist in artists:
        box = _extent(artist, renderer)
        assert box is None or _inside(box, page), f"{artist!r} at {box} leaves {page}"
    suptitle: Text | None = getattr(fig, "_suptitle", None)
    titles = [suptitle] if suptitle is not None and suptitle.get_text() else []
    for ax in fig.axes:
        tight = ax.get_tightbbox(renderer)
        assert tight is not None
        assert _inside(tight, page), f"{ax!r} at {tight} leaves the figure"
        for title in titles:
            assert tight.y1 <= title.get_window_extent(renderer).y0 + 1, "a panel in the title"
        own = [ax.get_legend(), ax.title]
        for artist in artists:
            if artist.axes is not ax or any(artist is o for o in own):
                continue
            box = _extent(artist, renderer)
            assert box is None or _inside(box, ax.bbox), f"{artist!r} is outside its panel"


def assert_dates_on_x(ax: Axes, year: int) -> None:
    """The x axis is a UTC date axis whose range and labels are of ``year``."""
    assert isinstance(ax.xaxis.get_major_formatter(), mdates.ConciseDateFormatter)
    lo, hi = (mdates.num2date(v) for v in ax.get_xlim())
    assert lo.year == hi.year == year
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) >= 2
    assert all(":" in t or t.isdigit() for t in labels), labels  # times of day / seconds
    assert str(year) in ax.xaxis.get_major_formatter().get_offset()


# ------------------------------------------------------------------------------ the cases


def test_rowtime_run_draws_event_time_over_commit_time():
    fig = _drawn(
        watermark_figure(_rowtime(), title=TITLE, source=URI, snapshot_completed_at_ms=T0 + 120_000)
    )
    top, bottom = _panels(fig)
    assert _legend_texts(top) == ["combined watermark", "probe watermark", "build watermark"]
    assert _legend_texts(bottom) == ["pending after batch", "released by batch"]
    assert_dates_on_x(bottom, 2025)
    assert top.get_shared_x_axes().joined(top, bottom)
    # the event-time axis is a date axis too, around the watermarks (an hour before)
    assert isinstance(top.yaxis.get_major_formatter(), mdates.ConciseDateFormatter)
    lo, hi = (mdates.num2date(v) for v in top.get_ylim())
    assert (
        datetime(2025, 3, 14, 7, 55, tzinfo=UTC)
        < lo
        < hi
        < datetime(2025, 3, 14, 8, 15, tzinfo=UTC)
    )
    # the snapshot line on both panels, labelled once
    assert len(_snapshot_lines(top)) == len(_snapshot_lines(bottom)) == 1
    assert [t for t in _texts(fig) if SNAPSHOT_LABEL in t] == [f" {SNAPSHOT_LABEL} "]
    # short title, the path in small print at the bottom
    assert fig.get_suptitle() == TITLE
    assert "/" not in fig.get_suptitle()
    assert fig.get_supxlabel() == URI
    assert_nothing_clipped(fig)


def test_legend_lists_only_series_that_have_an_event_time_point():
    # build at processing time throughout: no build line, the batches shaded instead
    records = [
        _record(i, T0 + i * 60_000, probe=Watermark(T0 - HOUR + i * 60_000), build=PT)
        for i in range(6)
    ]
    fig = _drawn(watermark_figure(records, title=TITLE))
    top, _ = _panels(fig)
    assert _legend_texts(top) == ["combined watermark", "probe watermark", PROCESSING_TIME_LABEL]
    assert not [t for t in _texts(fig) if SNAPSHOT_LABEL in t]
    assert not _snapshot_lines(top)
    assert fig.get_supxlabel() == ""
    assert_nothing_clipped(fig)


def test_processing_time_run_shows_each_channels_state():
    fig = _drawn(
        watermark_figure(
            _proctime(), title=TITLE, source=URI, snapshot_completed_at_ms=T0 + 100_000
        )
    )
    top, bottom = _panels(fig)
    assert "processing-time join" in top.get_title()
    assert [t.get_text() for t in top.get_yticklabels()] == ["build", "probe", "combined"]
    assert _legend_texts(top) == ["nothing yet (MIN)", "processing time", "batch commit"]
    assert not [t for t in _legend_texts(top) if "watermark" in t]
    assert not [t for t in _texts(fig) if "no event-time watermark yet" in t]
    assert len(_snapshot_lines(top)) == len(_snapshot_lines(bottom)) == 1
    assert_dates_on_x(bottom, 2025)
    assert_nothing_clipped(fig)


def test_end_of_input_is_a_line_not_year_292_million():
    fig = _drawn(
        watermark_figure(_rowtime(end_of_input=True), title=TITLE, snapshot_completed_at_ms=T0)
    )
    top, bottom = _panels(fig)
    assert f" {END_OF_INPUT_LABEL} (MAX)" in _texts(fig)
    lo, hi = (mdates.num2date(v) for v in top.get_ylim())
    assert lo.year == hi.year == 2025
    assert _legend_texts(top) == ["combined watermark", "probe watermark", "build watermark"]
    assert_dates_on_x(bottom, 2025)
    assert_nothing_clipped(fig)


def test_empty_ledger_says_no_batch_yet(tmp_path: Path):
    fig = _drawn(watermark_figure([], title=TITLE, source=URI, snapshot_completed_at_ms=T0))
    [message] = [t for t in _texts(fig) if NO_BATCH_TEXT in t]
    assert "snapshot complete at 2025-03-14 09:00:00 UTC" in message
    assert not [ax for ax in fig.axes if ax.axison]
    assert_nothing_clipped(fig)
    path = plot_watermarks([], tmp_path / "empty.png", title=TITLE)
    assert path.read_bytes()[:8] == PNG


@pytest.mark.parametrize(
    ("completed_at", "expected_ms"),
    [
        (T0 + 100_000, T0 + 100_000),
        ("2025-03-14T09:01:40.000+00:00", T0 + 100_000),  # lakehouse.snapshot.completedAt
        ("not a time", None),
        (None, None),
    ],
)
def test_plot_watermarks_writes_a_png_with_the_completion_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, completed_at: int | str | None, expected_ms
):
    seen: list[int | None] = []

    def spy(records: list[BatchRecord], **kw: object) -> Figure:
        seen.append(kw["snapshot_completed_at_ms"])  # type: ignore[arg-type]
        return watermark_figure(records, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_plot, "watermark_figure", spy)
    path = tmp_path / "watermarks.png"
    written = plot_watermarks(
        _proctime(), path, title=TITLE, source=URI, snapshot_completed_at=completed_at
    )
    assert written == path
    assert path.read_bytes()[:8] == PNG
    assert seen == [expected_ms]


def test_snapshot_far_outside_the_batches_is_named_in_the_legend():
    fig = _drawn(
        watermark_figure(_rowtime(), title=TITLE, snapshot_completed_at_ms=T0 - 5 * 24 * HOUR)
    )
    top, bottom = _panels(fig)
    assert _legend_texts(top)[-1] == f"{SNAPSHOT_LABEL}, earlier:\n2025-03-09 09:00:00 UTC"
    assert_dates_on_x(bottom, 2025)  # the axis was not stretched back five days
    assert mdates.num2date(bottom.get_xlim()[0]) > datetime(2025, 3, 14, 8, 59, tzinfo=UTC)
    assert_nothing_clipped(fig)


def test_snapshot_near_the_batches_extends_the_axis():
    fig = watermark_figure(_rowtime(), title=TITLE, snapshot_completed_at_ms=T0 - 5 * 60_000)
    _, bottom = _panels(fig)
    assert mdates.num2date(bottom.get_xlim()[0]) < datetime(2025, 3, 14, 8, 55, tzinfo=UTC)
    assert_nothing_clipped(fig)


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(_rowtime(1), id="one-record"),
        pytest.param(
            [
                _record(i, T0, probe=Watermark(T0 - i), build=PT if i % 2 else MIN, pending=i)
                for i in range(5)
            ],
            id="same-timestamp",
        ),
        pytest.param(_rowtime(400, end_of_input=True), id="hundreds"),
        pytest.param(_proctime(300), id="hundreds-processing-time"),
    ],
)
def test_edge_cases_render_inside_the_figure(records: list[BatchRecord]):
    fig = watermark_figure(records, title=TITLE, source=URI, snapshot_completed_at_ms=T0)
    assert_nothing_clipped(fig)
    assert_dates_on_x(_panels(fig)[1], 2025)


def test_long_title_and_source_are_shortened_to_fit():
    source = "s3://bucket/" + "/".join(f"segment{i:03d}" for i in range(60))
    fig = watermark_figure(_rowtime(), title="t" * 300, source=source)
    assert len(fig.get_suptitle()) <= 100
    assert fig.get_supxlabel().startswith("s3://bucket/segment000")
    assert fig.get_supxlabel().endswith("segment059")
    assert_nothing_clipped(fig)


# ------------------------------------------------------------------------ any ledger renders

_watermarks = st.one_of(
    st.sampled_from([MIN, PT, END]),
    st.integers(T0 - 400 * 24 * HOUR, T0 + 24 * HOUR).map(Watermark),
)


@st.composite
def _ledgers(draw: st.DrawFn) -> tuple[list[BatchRecord], int | None]:
    n = draw(st.integers(0, 25))
    steps = draw(
        st.lists(st.integers(0, HOUR) | st.integers(0, 10 * 24 * HOUR), min_size=n, max_size=n)
    )
    start = T0 + draw(st.integers(-300 * 24 * HOUR, 300 * 24 * HOUR))
    records = []
    t = start
    for i, step in enumerate(steps):
        t += step
        records.append(
            _record(
                i,
                t,
                probe=draw(_watermarks),
                build=draw(_watermarks),
                pending=draw(st.integers(0, 10**12)),
                released=draw(st.integers(0, 10**9)),
            )
        )
    snapshot = draw(st.none() | st.integers(start - 30 * 24 * HOUR, start + 30 * 24 * HOUR))
    return records, snapshot


_printable = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=300)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ledger=_ledgers(), title=_printable, source=_printable)
def test_any_ledger_renders_with_everything_inside_the_figure(
    ledger: tuple[list[BatchRecord], int | None], title: str, source: str
):
    records, snapshot = ledger
    fig = watermark_figure(records, title=title, source=source, snapshot_completed_at_ms=snapshot)
    assert_nothing_clipped(fig)
    if records:
        top, bottom = _panels(fig)
        assert isinstance(bottom.xaxis.get_major_formatter(), mdates.ConciseDateFormatter)
        for ax in (top, bottom):  # a legend only of what is drawn, never an empty one
            assert ax.get_legend() is not None
            assert all(_legend_texts(ax))
    else:
        assert any(NO_BATCH_TEXT in t for t in _texts(fig))
