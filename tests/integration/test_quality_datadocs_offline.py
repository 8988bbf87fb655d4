"""A real quality report's Data Docs render in a browser that cannot reach the network.

The report is ``test_quality``'s healthy one (its fixtures: one per engine, Spark and pandas). Its
``data_docs/`` is moved elsewhere (the site must be self-contained), then opened from
``file://`` in headless Chromium with every host name unresolvable and a dead proxy. The DOM
after the pages' scripts ran must hold what only jQuery + bootstrap-table (+ its filter-control
extension) produce, and screenshots must show Bootstrap's colours and Font Awesome's icons.

Chromium is required, not optional: without it the test fails saying how to install it (CI
installs it in ``.ci/run``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_quality import engine, healthy, report_dir, rowtime  # noqa: F401  (the report's fixtures)

pytestmark = pytest.mark.spark

CHROMIUM = "/usr/bin/chromium"
# every host name fails to resolve, and any request that still goes out meets a closed port
NO_NETWORK = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost",
    "--proxy-server=http://127.0.0.1:9",
]
BOOTSTRAP_SUCCESS_GREEN = (40, 167, 69)  # .text-success, the colour of GX's check icons
BOOTSTRAP_LINK_BLUE = (0, 123, 255)  # Bootstrap 4's link colour


def _chromium(tmp_path: Path, url: str, *args: str) -> str:
    """Run headless Chromium on ``url`` without network; return its stdout."""
    if not Path(CHROMIUM).is_file():
        pytest.fail(
            f"{CHROMIUM} is missing; this test renders the Data Docs in headless Chromium. "
            "Install it: apt-get install -y chromium (CI's .ci/run does)"
        )
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        *NO_NETWORK,
        "--virtual-time-budget=5000",
        *args,
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _dom(tmp_path: Path, page: Path) -> str:
    return _chromium(tmp_path, page.as_uri(), "--dump-dom")


def _screenshot(tmp_path: Path, page: Path, png: Path) -> np.ndarray:
    _chromium(tmp_path, page.as_uri(), f"--screenshot={png}", "--window-size=1280,900")
    return np.asarray(Image.open(png).convert("RGB")).astype(int)


def _pixels_near(image: np.ndarray, colour: tuple[int, int, int], tolerance: int) -> int:
    return int((np.abs(image - np.array(colour)).max(axis=2) <= tolerance).sum())


@pytest.fixture(scope="module")
def site(healthy, tmp_path_factory) -> Path:  # noqa: F811  (the fixture imported above)
    """The healthy report's Data Docs (each engine's), moved away from where they were
    written."""
    report = healthy.report
    moved = tmp_path_factory.mktemp("moved") / "docs"
    shutil.copytree(report.data_docs_path.parent, moved)
    return moved


def test_the_browser_really_has_no_network(tmp_path):
    """The control: a page loading jQuery from its CDN gets no jQuery in this browser."""
    page = tmp_path / "control.html"
    page.write_text(
        '<html><body><script src="https://code.jquery.com/jquery-3.7.1.min.js"></script>'
        "<script>document.body.dataset.jquery = typeof window.jQuery;</script></body></html>"
    )
    assert 'data-jquery="undefined"' in _dom(tmp_path, page)


def test_no_page_loads_anything_from_the_network(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) == 13  # index, 6 suites, 6 validations
    remote = re.compile(r"<(?:script|link)\b[^>]*?\b(?:src|href)=\"(?:https?:)?//", re.I)
    assert [p for p in pages if remote.search(p.read_text())] == []


def test_index_renders_its_validation_list_offline(site, tmp_path):
    validations = sorted(str(p.relative_to(site)) for p in (site / "validations").rglob("*.html"))
    assert len(validations) == 6
    dom = _dom(tmp_path, site / "index.html")
    # bootstrap-table (which needs jQuery) wrapped both lists and rendered their rows
    assert dom.count('class="bootstrap-table bootstrap4"') == 2
    assert dom.count('class="fixed-table-container"') == 2
    rows = re.findall(r'<tr class="clickable-row" data-href="([^"]+)" data-index="\d+"', dom)
    assert sorted(r for r in rows if r.startswith("validations/")) == validations
    # the filter-control extension added its filters to the header
    assert "bootstrap-table-filter-control-run_time" in dom


def test_a_validation_page_renders_offline(site, tmp_path):
    page = next((site / "validations" / "output_matched").rglob("*.html"))
    dom = _dom(tmp_path, page)
    tables = dom.count('class="bootstrap-table bootstrap4"')
    assert tables >= 2 and dom.count('class="fixed-table-container"') == tables
    assert re.search(r'<tr data-index="0"', dom)
    assert "output_matched" in dom


def test_screenshots_show_bootstrap_and_font_awesome(site, tmp_path):
    """Green check icons need Bootstrap's CSS *and* Font Awesome's webfont; blue links need
    Bootstrap's CSS. An unstyled page has neither colour."""
    shots = {
        "index": site / "index.html",
        "validation": next((site / "validations" / "output_matched").rglob("*.html")),
    }
    for name, page in shots.items():
        image = _screenshot(tmp_path, page, tmp_path / f"{name}.png")
        assert image.shape == (900, 1280, 3)
        assert _pixels_near(image, BOOTSTRAP_SUCCESS_GREEN, 6) > 100, name
        assert _pixels_near(image, BOOTSTRAP_LINK_BLUE, 10) > 500, name
