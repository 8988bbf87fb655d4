#!/usr/bin/env python3
"""Re-fetch the Data Docs' offline CSS/JS into lakehouse/quality/datadocs_assets/.

Reads ``lakehouse/quality/datadocs_assets/manifest.json`` (the only list of what is vendored)
and, for each package in it:

1. ``npm pack <name>@<exact version>`` into a temporary directory (the npm registry, or the
   one ``npm config get registry`` names);
2. checks the tarball's sha512 against the ``integrity`` pinned in the manifest, so a re-fetch
   gives the same bytes or fails;
3. replaces ``datadocs_assets/<dir>/`` with the listed ``files`` and the package's license
   file (``license``, or ``license_from``: the license file of another pinned tarball, for the
   packages that ship none), at their paths inside the package.

Then it checks that every URL of the manifest points at a fetched file, removes directories no
package names, and prints what it wrote. Stdlib only; needs ``npm`` on PATH and the registry
(development time only: the report never touches the network).

Usage::

    python3 scripts/vendor_datadocs_assets.py            # re-fetch everything
    python3 scripts/vendor_datadocs_assets.py --check    # fetch, compare, change nothing

To add an asset (a Great Expectations upgrade that loads a new CDN file makes the report fail
naming it): add its package to ``packages`` (``"integrity": ""`` the first time: the script
prints the value to pin and stops) and its URL to ``urls``, then run this script.
"""

from __future__ import annotations

import argparse
import base64
import filecmp
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "lakehouse" / "quality" / "datadocs_assets"
MANIFEST = ASSETS / "manifest.json"


def fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def npm_pack(spec: str, integrity: str, dest: Path) -> Path:
    """Download the tarball of ``spec`` (name@exact-version) and check its sha512."""
    try:
        out = subprocess.run(
            ["npm", "pack", spec, "--json", "--pack-destination", str(dest)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except FileNotFoundError:
        fail("npm was not found; install Node.js (npm) to re-fetch the assets")
    except subprocess.CalledProcessError as e:
        fail(f"npm pack {spec} failed:\n{e.stderr.strip()}")
    tarball = dest / json.loads(out)[0]["filename"]
    digest = "sha512-" + base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
    if not integrity:
        fail(f'{spec}: pin "integrity": "{digest}" in {MANIFEST.relative_to(ROOT)}')
    if digest != integrity:
        fail(f"{spec}: the tarball's integrity is {digest}, the manifest pins {integrity}")
    return tarball


def extract(tarball: Path, member: str, target: Path) -> None:
    """Write ``package/<member>`` of ``tarball`` to ``target``."""
    with tarfile.open(tarball, "r:gz") as tar:
        try:
            source = tar.extractfile(f"package/{member}")
        except KeyError:
            source = None
        if source is None:
            fail(f"{tarball.name} has no file {member}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read())


def safe_relative(path: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        fail(f"manifest path {path!r} must be relative and stay inside its directory")
    return p


def fetch_package(package: dict[str, Any], tmp: Path, out_dir: Path) -> None:
    name = package["dir"]
    target = out_dir / safe_relative(name)
    if target.exists():
        shutil.rmtree(target)
    tarball = npm_pack(package["npm"], package.get("integrity", ""), tmp)
    for member in package["files"]:
        extract(tarball, member, target / safe_relative(member))
    if "license" in package:
        extract(tarball, package["license"], target / safe_relative(package["license"]))
    elif "license_from" in package:
        source = package["license_from"]
        license_tarball = npm_pack(source["npm"], source.get("integrity", ""), tmp)
        extract(license_tarball, source["file"], target / safe_relative(source["file"]))
    else:
        fail(f"{package['npm']}: name its license file ('license' or 'license_from')")


def vendor(out_dir: Path) -> dict[str, Any]:
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    packages = manifest["packages"]
    with tempfile.TemporaryDirectory(prefix="datadocs-npm-") as tmp:
        for package in packages:
            print(f"fetching {package['npm']}", file=sys.stderr)
            fetch_package(package, Path(tmp), out_dir)
    for url, path in manifest["urls"].items():
        if not (out_dir / safe_relative(path)).is_file():
            fail(f"{url} maps to {path}, which no package of the manifest provides")
    return manifest


def tree(directory: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(directory)): p
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="fetch into a temporary directory and compare with the vendored files",
    )
    args = parser.parse_args()

    if args.check:
        with tempfile.TemporaryDirectory(prefix="datadocs-check-") as tmp:
            vendor(Path(tmp))
            fetched, vendored = tree(Path(tmp)), tree(ASSETS)
            differ = sorted(
                name
                for name in fetched.keys() | vendored.keys()
                if name not in fetched
                or name not in vendored
                or not filecmp.cmp(fetched[name], vendored[name], shallow=False)
            )
        if differ:
            fail("the vendored files differ from a fresh fetch: " + ", ".join(differ))
        print(f"{len(vendored)} vendored files match a fresh fetch")
        return

    manifest = vendor(ASSETS)
    wanted = {p["dir"] for p in manifest["packages"]}
    for entry in ASSETS.iterdir():
        if entry.is_dir() and entry.name not in wanted:
            print(f"removing {entry.name} (no package of the manifest)", file=sys.stderr)
            shutil.rmtree(entry)
    files = tree(ASSETS)
    total = sum(p.stat().st_size for p in files.values())
    print(f"{len(files)} files, {total / 1e6:.2f} MB in {ASSETS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
