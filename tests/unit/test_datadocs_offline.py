"""Offline Data Docs (``lakehouse.quality._offline``) on small pages, without Spark or GX runs.

The last tests hold the vendored assets against the installed Great Expectations: every CDN
URL its templates load has a copy, and the two copies GX pins a subresource-integrity hash for
are the bytes the CDN serves.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from lakehouse.quality import QualityError
from lakehouse.quality._offline import (
    ASSETS_DIR,
    VENDOR_SCRIPT,
    AssetManifest,
    load_manifest,
    make_site_offline,
    rewrite_page,
)

JQUERY = "https://code.jquery.com/jquery-3.7.1.min.js"
POPPER = "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js"
BOOTSTRAP_CSS = "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"
LOGO = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png"
UNKNOWN = "https://cdn.example.com/new-widget@2.0.0/widget.min.js"

PAGE = f"""<!DOCTYPE html>
<html>
  <head>
    <link rel="stylesheet" href="{BOOTSTRAP_CSS}"/>
    <link rel="canonical" href="https://greatexpectations.io/docs">
    <!-- <script src="{UNKNOWN}"></script> -->
    <script src="{JQUERY}"></script>
    <script src="{POPPER}" integrity="sha384-abc" crossorigin="anonymous"></script>
    <script src="local.js"></script>
    <script>var cdn = '<script src="{UNKNOWN}"></' + 'script>';</script>
  </head>
  <body>
    <img class="NO-CACHE" src="{LOGO}?d=20240101T000000.000000Z&amp;dataContextId=x" alt="GX"/>
    <img src="https://example.com/chart.png" alt="remote image">
    <a href="https://greatexpectations.io">Great Expectations</a>
  </body>
</html>
"""


@pytest.fixture(scope="module")
def manifest() -> AssetManifest:
    return load_manifest()


def _srcs(page_html: str) -> list[str]:
    return re.findall(r'<(?:script|link|img)\b[^>]*?(?:src|href)="([^"]*)"', page_html)


def test_top_level_page_points_at_the_vendored_copies(manifest):
    out, missing = rewrite_page(PAGE, "index.html", manifest)
    assert missing == []
    assert (
        '<link rel="stylesheet" href="static/vendor/bootstrap-4.3.1/dist/css/bootstrap.min.css"/>'
    ) in out
    assert '<script src="static/vendor/jquery-3.7.1/dist/jquery.min.js"></script>' in out
    # integrity and crossorigin are dropped (a file:// page refuses them), nothing else
    assert '<script src="static/vendor/popper.js-1.12.9/dist/umd/popper.min.js"></script>' in out
    assert "integrity" not in out and "crossorigin" not in out
    # GX's logo: the site's own copy, without the timestamp and context id
    assert '<img class="NO-CACHE" src="static/images/logo-long.png" alt="GX"/>' in out


def test_nested_page_gets_paths_relative_to_its_directory(manifest):
    out, _ = rewrite_page(PAGE, "validations/suite/run/20240101T000000Z/batch.html", manifest)
    assert '<script src="../../../../static/vendor/jquery-3.7.1/dist/jquery.min.js">' in out
    out, _ = rewrite_page(PAGE, "expectations/suite.html", manifest)
    assert '<script src="../static/vendor/jquery-3.7.1/dist/jquery.min.js">' in out


def test_everything_that_loads_nothing_is_left_as_written(manifest):
    out, _ = rewrite_page(PAGE, "index.html", manifest)
    kept = [
        '<a href="https://greatexpectations.io">Great Expectations</a>',
        '<link rel="canonical" href="https://greatexpectations.io/docs">',
        f'<!-- <script src="{UNKNOWN}"></script> -->',  # a comment
        f"var cdn = '<script src=\"{UNKNOWN}\"></' + 'script>';",  # text of an inline script
        '<script src="local.js"></script>',
        '<img src="https://example.com/chart.png" alt="remote image">',  # not one of GX's
    ]
    for text in kept:
        assert text in out
    # and the rest of the page is byte for byte the same
    assert out.count("\n") == PAGE.count("\n")
    assert out.endswith("</body>\n</html>\n")


def test_a_page_without_remote_assets_is_unchanged(manifest):
    out, _ = rewrite_page(PAGE, "index.html", manifest)
    assert rewrite_page(out, "index.html", manifest) == (out, [])


@pytest.mark.parametrize(
    "tag",
    [
        f'<script src="{UNKNOWN}"></script>',
        '<link rel="stylesheet" href="https://cdn.example.com/theme.css">',
        '<link href="//cdn.example.com/theme.css" rel="stylesheet">',  # protocol-relative
        '<script src="https://code.jquery.com/jquery-3.7.2.min.js"></script>',  # a new version
    ],
)
def test_a_remote_asset_without_a_copy_is_reported(manifest, tag):
    page = PAGE.replace("</head>", f"  {tag}\n  </head>")
    url = re.search(r'(?:src|href)="([^"]+)"', tag).group(1)
    assert rewrite_page(page, "index.html", manifest)[1] == [url]


def _site(root: Path, pages: dict[str, str]) -> Path:
    for name, text in pages.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    (root / "static" / "images").mkdir(parents=True)
    (root / "static" / "images" / "logo-long.png").write_bytes(b"\x89PNG")
    return root


def test_a_site_is_made_self_contained(tmp_path, manifest):
    nested = "validations/s/run/20240101T000000Z/batch.html"
    site = _site(tmp_path / "site", {"index.html": PAGE, nested: PAGE, "notes.txt": JQUERY})
    changed = make_site_offline(site, manifest)
    assert changed == [site / "index.html", site / nested]
    assert (site / "notes.txt").read_text() == JQUERY  # only .html files are pages
    for package in manifest.packages:  # each package is copied with its license
        copied = site / "static" / "vendor" / package
        assert any(p.name.upper().startswith("LICENSE") for p in copied.iterdir()), package
    # every rewritten path resolves from its page, also after the site is moved
    moved = tmp_path / "elsewhere" / "docs"
    shutil.move(site, moved)
    for page in (moved / "index.html", moved / nested):
        local = [s for s in _srcs(page.read_text()) if "static/" in s]
        assert len(local) == 4  # bootstrap.css, jquery, popper, the logo
        for src in local:
            assert (page.parent / src).is_file(), (page, src)
    # a second run finds nothing to do
    assert make_site_offline(moved, manifest) == []


def test_the_logo_is_left_remote_when_the_site_has_no_copy(tmp_path, manifest):
    site = _site(tmp_path, {"index.html": PAGE})
    (site / "static" / "images" / "logo-long.png").unlink()
    make_site_offline(site, manifest)
    assert f'src="{LOGO}?d=' in (site / "index.html").read_text()


def test_an_unknown_cdn_asset_fails_the_site_and_changes_nothing(tmp_path, manifest):
    bad = PAGE.replace("</head>", f'<script src="{UNKNOWN}"></script></head>')
    site = _site(tmp_path, {"index.html": PAGE, "expectations/a.html": bad})
    with pytest.raises(QualityError) as e:
        make_site_offline(site, manifest)
    message = str(e.value)
    assert UNKNOWN in message and "(in expectations/a.html)" in message
    assert VENDOR_SCRIPT in message and "manifest.json" in message
    assert e.value.stage == "making the Data Docs work offline"
    # checked before anything is written
    assert (site / "index.html").read_text() == PAGE
    assert not (site / "static" / "vendor").exists()


def test_a_missing_vendored_file_is_an_error_naming_it(tmp_path):
    assets = tmp_path / "assets"
    shutil.copytree(ASSETS_DIR, assets)
    (assets / "jquery-3.7.1" / "dist" / "jquery.min.js").unlink()
    with pytest.raises(QualityError, match=r"offline copy of https://code\.jquery\.com/.*missing"):
        load_manifest(assets)
    (assets / "manifest.json").write_text("{}")
    with pytest.raises(QualityError, match=r"manifest .* is missing or malformed"):
        load_manifest(assets)


# ------------------------------------------------- the vendored assets vs installed GX


def _gx_templates() -> list[Path]:
    import great_expectations

    return sorted(
        (Path(great_expectations.__file__).parent / "render" / "view" / "templates").glob("*.j2")
    )


def test_every_cdn_asset_of_the_installed_gx_templates_has_a_copy(manifest):
    """A GX upgrade that loads a new CDN file fails here first (and at run time, loudly)."""
    tag = re.compile(r"<(script|link)\b[^>]*?\b(?:src|href)=\"(https?://[^\"{}]+)\"", re.S)
    found = {url for t in _gx_templates() for _, url in tag.findall(t.read_text())}
    assert len(found) >= 16
    assert found - set(manifest.urls) == set(), f"vendor them with {VENDOR_SCRIPT}"


def test_the_copies_gx_pins_integrity_hashes_for_are_the_cdn_bytes(manifest):
    pinned = re.compile(r'src="(https://[^"]+)" integrity="sha384-([^"]+)"')
    checked = 0
    for template in _gx_templates():
        for url, digest in pinned.findall(template.read_text()):
            data = (manifest.assets_dir / manifest.urls[url]).read_bytes()
            assert base64.b64encode(hashlib.sha384(data).digest()).decode() == digest, url
            checked += 1
    assert checked == 2  # popper.js and bootstrap.js


def test_what_the_vendored_css_refers_to_is_vendored_too(manifest):
    """Font Awesome's webfonts sit where its CSS looks for them (woff2; the .ttf fallback
    after it in each @font-face is left out, see the manifest)."""
    for file in sorted(set(manifest.urls.values())):
        if not file.endswith(".css"):
            continue
        css = (manifest.assets_dir / file).read_text(encoding="utf-8")
        for ref in re.findall(r"url\(\s*['\"]?([^'\")]+)", css):
            if ref.startswith(("data:", "#")) or ref.endswith(".ttf"):
                continue
            assert not ref.startswith(("http:", "https:", "//")), (file, ref)
            assert (manifest.assets_dir / file).parent.joinpath(ref).resolve().is_file(), ref


def test_the_manifest_pins_exact_versions_and_licenses():
    raw = json.loads((ASSETS_DIR / "manifest.json").read_text())
    for package in raw["packages"]:
        name, _, version = package["npm"].rpartition("@")
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), package["npm"]
        assert package["dir"].endswith(f"-{version}")
        assert package["integrity"].startswith("sha512-")
        license_file = package.get("license") or package["license_from"]["file"]
        assert (ASSETS_DIR / package["dir"] / license_file).is_file(), name
