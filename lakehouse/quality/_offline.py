"""Make a Great Expectations Data Docs site render without the network.

GX's page templates load Bootstrap, jQuery, bootstrap-table, Font Awesome, vega and friends
from CDNs; on a machine without internet the pages render unstyled and the bootstrap-table
lists stay empty. lakehouse ships copies of exactly those files (``datadocs_assets/``, fetched
by ``scripts/vendor_datadocs_assets.py``; ``datadocs_assets/manifest.json`` maps each CDN URL
to its copy). :func:`make_site_offline` copies them into the site (``static/vendor/``) and
points every page at them, so the site folder is self-contained: it can be zipped, moved and
opened from ``file://``.

What is rewritten, in every ``.html`` file of the site:

* ``<script src>`` and ``<link href>`` (any ``rel`` but purely navigational ones such as
  ``canonical`` or ``alternate``) whose URL is remote (``http:``, ``https:`` or ``//``): the
  URL becomes the path of the copy relative to the page, and ``integrity`` and
  ``crossorigin`` are dropped (a ``crossorigin`` request from a ``file://`` page is refused,
  and subresource integrity needs CORS). The copies are the bytes the CDN serves (the tests
  check the two integrity hashes GX pins). A remote script or stylesheet with no copy is an
  error (:class:`QualityError`), never a page left to load it from the network.
* ``<img src>`` whose URL, without its query string, is one of GX's own images
  (``site_files`` in the manifest: the logo, which GX loads from its web host with a
  timestamp and the context id although the site holds a copy): pointed at the site's copy.
  Other images are left alone.

Anchors (``<a href="https://greatexpectations.io">``), comments and the text of inline
scripts and styles are never touched (GX's inline CSS names one remote image, a logo shown
only in dark mode; offline it is not drawn, which changes nothing else). Rewriting is
idempotent: a rewritten page has no remote script or stylesheet left.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import json
import os
import posixpath
import shutil
from collections.abc import Mapping
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any

from lakehouse.quality.errors import QualityError

#: The vendored assets shipped with the package (and their ``manifest.json``).
ASSETS_DIR = Path(__file__).resolve().parent / "datadocs_assets"
#: Where the assets are copied to, relative to the site's root directory.
SITE_VENDOR_DIR = "static/vendor"
#: The script that (re-)fetches the vendored assets, for error messages.
VENDOR_SCRIPT = "scripts/vendor_datadocs_assets.py"

STAGE = "making the Data Docs work offline"

# the asset attribute of each tag that loads one
_URL_ATTR = {"script": "src", "link": "href", "img": "src"}
# attributes that make a file:// page refuse a local copy
_DROPPED_ATTRS = frozenset({"integrity", "crossorigin"})
# <link rel> values that only name a related document: nothing is loaded
_NAVIGATIONAL_RELS = frozenset(
    {"alternate", "author", "bookmark", "canonical", "help", "license", "me", "next", "prev"}
    | {"search", "tag", "external", "nofollow", "noopener", "noreferrer"}
)


@dataclasses.dataclass(frozen=True, slots=True)
class AssetManifest:
    """What the vendored assets replace.

    Attributes:
        assets_dir: the directory holding the vendored packages (one directory each).
        packages: the packages' directory names under ``assets_dir``.
        urls: CDN URL (exact, as the templates write it) -> file under ``assets_dir``
            (posix, e.g. ``jquery-3.7.1/dist/jquery.min.js``).
        site_files: remote URL without its query string -> file the site already holds,
            relative to the site's root (posix).
    """

    assets_dir: Path
    packages: tuple[str, ...]
    urls: Mapping[str, str]
    site_files: Mapping[str, str]

    def site_path(self, url: str) -> str | None:
        """The file that replaces ``url``, relative to the site's root; None if none does."""
        if url in self.urls:
            return f"{SITE_VENDOR_DIR}/{self.urls[url]}"
        return self.site_files.get(url.split("#", 1)[0].split("?", 1)[0])


def load_manifest(assets_dir: Path = ASSETS_DIR) -> AssetManifest:
    """Read ``<assets_dir>/manifest.json`` and check that every file it maps to is there.

    Raises:
        QualityError: the manifest is missing or malformed, or a vendored file is missing
            (an installation without the package data); the message names it.
    """
    path = assets_dir / "manifest.json"
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
        packages = tuple(str(p["dir"]) for p in raw["packages"])
        urls = {str(k): str(v) for k, v in raw["urls"].items()}
        site_files = {str(k): str(v) for k, v in raw.get("site_files", {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise QualityError(
            f"the Data Docs asset manifest '{path}' is missing or malformed "
            f"({type(e).__name__}: {e}); reinstall lakehouse or run {VENDOR_SCRIPT}",
            stage=STAGE,
        ) from e
    for url, file in urls.items():
        if PurePosixPath(file).parts[0] not in packages or not (assets_dir / file).is_file():
            raise QualityError(
                f"the offline copy of {url} ('{assets_dir / file}') is missing; reinstall "
                f"lakehouse or run {VENDOR_SCRIPT}",
                stage=STAGE,
            )
    return AssetManifest(assets_dir=assets_dir, packages=packages, urls=urls, site_files=site_files)


def is_remote(url: str) -> bool:
    """Whether the browser would fetch ``url`` from the network (``http(s):`` or ``//``).

    >>> [is_remote(u) for u in ("https://x/a.js", "//x/a.js", "HTTP://x", "a.js", "data:,")]
    [True, True, True, False, False]
    """
    url = url.strip().lower()
    return url.startswith(("http://", "https://", "//"))


@dataclasses.dataclass(frozen=True, slots=True)
class _Tag:
    start: int  # offset of '<' in the page
    text: str  # the start tag as written
    name: str
    attrs: list[tuple[str, str | None]]


class _StartTags(HTMLParser):
    """Collects the start tags of ``script``, ``link`` and ``img`` with their offsets.

    HTMLParser skips comments and treats the content of ``<script>``/``<style>`` as text, so
    a URL inside either is never mistaken for a tag.
    """

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        # HTMLParser.getpos() counts lines by "\n" only
        self._line_starts = [0, *itertools.accumulate(len(line) + 1 for line in page.split("\n"))]
        self.tags: list[_Tag] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _URL_ATTR:
            line, column = self.getpos()
            text = self.get_starttag_text() or ""
            self.tags.append(_Tag(self._line_starts[line - 1] + column, text, tag, attrs))


def _loads_something(tag: _Tag) -> bool:
    if tag.name != "link":
        return True
    rel = {r.lower() for r in (dict(tag.attrs).get("rel") or "").split()}
    return not rel or not rel <= _NAVIGATIONAL_RELS


def _rebuild(tag: _Tag, url_attr: str, new_url: str) -> str:
    parts = [f"<{tag.name}"]
    for name, value in tag.attrs:
        if name in _DROPPED_ATTRS:
            continue
        if name == url_attr:
            value = new_url
        parts.append(name if value is None else f'{name}="{html.escape(value, quote=True)}"')
    end = "/>" if tag.text.rstrip().endswith("/>") else ">"
    return " ".join(parts) + end


def rewrite_page(page_html: str, page: str, manifest: AssetManifest) -> tuple[str, list[str]]:
    """Point the remote assets of one page at their copies.

    Args:
        page_html: the page's text.
        page: the page's path relative to the site's root, posix
            (``validations/suite/run/2024/x.html``); the new URLs are relative to its directory.
        manifest: what replaces what.

    Returns:
        The rewritten text (equal to ``page_html`` when nothing is remote), and the remote
        script/stylesheet URLs that have no copy, in page order. The caller decides what a
        non-empty list means (:func:`make_site_offline` raises).
    """
    parser = _StartTags(page_html)
    parser.feed(page_html)
    parser.close()
    page_dir = posixpath.dirname(page) or "."
    missing: list[str] = []
    out: list[str] = []
    done = 0
    for tag in parser.tags:
        url_attr = _URL_ATTR[tag.name]
        url = dict(tag.attrs).get(url_attr)
        if not url or not is_remote(url) or not _loads_something(tag):
            continue
        target = manifest.site_path(url.strip())
        if target is None:
            if tag.name != "img":
                missing.append(url)
            continue
        if page_html[tag.start : tag.start + len(tag.text)] != tag.text:  # a parser bug
            raise QualityError(
                f"could not locate the tag {tag.text!r} in page '{page}'", stage=STAGE
            )
        out.append(page_html[done : tag.start])
        out.append(_rebuild(tag, url_attr, posixpath.relpath(target, page_dir)))
        done = tag.start + len(tag.text)
    out.append(page_html[done:])
    return "".join(out), missing


def make_site_offline(docs_dir: Path, manifest: AssetManifest | None = None) -> list[Path]:
    """Copy the vendored assets into a Data Docs site and point its pages at them.

    Contract: afterwards no ``<script src>`` or ``<link href>`` of any ``.html`` file under
    ``docs_dir`` is remote, ``<docs_dir>/static/vendor/`` holds every vendored package (with
    its license file), and the site works from any location, e.g. after being zipped and
    moved. Calling it again on the same site changes nothing. All pages are checked before
    anything is written: when one fails, the site is left as it was.

    Args:
        docs_dir: the site's root directory (the one holding ``index.html``).
        manifest: what replaces what (default: the assets shipped with lakehouse).

    Returns:
        The pages that were changed, sorted.

    Raises:
        QualityError: a page loads a remote script or stylesheet that has no vendored copy
            (the message names each URL and its pages, and says to vendor it with
            ``scripts/vendor_datadocs_assets.py``), the vendored assets are missing, or the
            site could not be read or written.
    """
    manifest = manifest if manifest is not None else load_manifest()
    # an image is pointed at the site's copy only where GX wrote one
    manifest = dataclasses.replace(
        manifest,
        site_files={u: f for u, f in manifest.site_files.items() if (docs_dir / f).is_file()},
    )
    vendor_root = docs_dir / SITE_VENDOR_DIR
    try:
        pages = sorted(
            p for p in docs_dir.rglob("*.html") if vendor_root not in p.parents and p.is_file()
        )
        rewritten: dict[Path, str] = {}
        missing: dict[str, list[str]] = {}
        for path in pages:
            relative = path.relative_to(docs_dir).as_posix()
            with path.open(encoding="utf-8", newline="") as f:
                original = f.read()
            new, unknown = rewrite_page(original, relative, manifest)
            for url in unknown:
                missing.setdefault(url, []).append(relative)
            if new != original:
                rewritten[path] = new
        if missing:
            listed = "; ".join(
                f"{url} (in {', '.join(sorted(set(where)))})" for url, where in missing.items()
            )
            raise QualityError(
                f"the Data Docs load {len(missing)} script(s)/stylesheet(s) from the network "
                f"that lakehouse has no offline copy of: {listed}. Add each to "
                f"lakehouse/quality/datadocs_assets/manifest.json (package, exact version, "
                f"URL) and fetch it with {VENDOR_SCRIPT}",
                stage=STAGE,
            )
        for package in manifest.packages:
            shutil.copytree(
                manifest.assets_dir / package, vendor_root / package, dirs_exist_ok=True
            )
        for path, text in rewritten.items():
            tmp = path.with_name(f".{path.name}.offline")
            with tmp.open("w", encoding="utf-8", newline="") as f:
                f.write(text)
            os.replace(tmp, path)
    except OSError as e:
        raise QualityError(
            f"could not make the Data Docs in '{docs_dir}' work offline: {e}", stage=STAGE
        ) from e
    return sorted(rewritten)
