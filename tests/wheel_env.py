"""lakehouse as a user installs it: the built wheel in a fresh virtual environment.

``installed_wheel`` (session) builds the wheel from the checkout (``pip wheel --no-deps``),
creates a new virtual environment, installs the wheel there with its ``[spark]`` extra at the
pinned versions (``constraints.txt``; pip's cache serves what ``make`` downloaded), and
checks that ``import lakehouse`` there resolves to that environment's site-packages, never to
the source tree. The environment is deleted at the end of the session (it is about 1.4 GB).

The JVM jars are not in a wheel: commands run from it get ``LAKEHOUSE_JVM_DIR`` pointing at
the checkout's ``.jvm`` (README, "Engine and installation"), as a user would set it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class InstalledWheel:
    """A fresh virtual environment with the wheel installed (not editable)."""

    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def lakehouse(self) -> Path:
        """The installed console script."""
        return self.venv / "bin" / "lakehouse"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a command of this install runs with: its ``bin`` first on the
        ``PATH``, the jars of the checkout, no ``PYTHONPATH`` (nothing of the source tree)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        env["LAKEHOUSE_JVM_DIR"] = str(ROOT / ".jvm")
        env["COLUMNS"] = "4000"
        env.update(extra or {})
        return env

    def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command (``args[0]`` a program of this environment, e.g. ``lakehouse``) in
        ``cwd``, output captured, the exit code left to the caller."""
        program = self.venv / "bin" / args[0]
        return subprocess.run(
            [str(program), *args[1:]],
            cwd=cwd,
            env=self.env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def entry_points(self) -> str:
        """The wheel's ``entry_points.txt``."""
        with zipfile.ZipFile(self.wheel) as z:
            name = next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
            return z.read(name).decode()


#: What the copy the wheel is built from leaves out, at the top of the checkout only (a
#: ``dist/`` inside the package, such as the Data Docs assets', belongs to it).
_TOP_LEVEL_LEFT_OUT = {
    ".git",
    ".venv",
    ".venv-spark40",
    ".jvm",
    "build",
    "dist",
    "demo-output",
    ".hypothesis",
    ".pytest_cache",
    ".ruff_cache",
}


def _not_sources(directory: str, names: list[str]) -> set[str]:
    left_out = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
    if Path(directory) == ROOT:
        left_out |= _TOP_LEVEL_LEFT_OUT & set(names)
    if Path(directory) in (ROOT / "bench", ROOT / "soak"):
        left_out |= {"out"} & set(names)  # their reports
    return left_out


def _run(cmd: Sequence[str], what: str, *, cwd: Path = ROOT, timeout: float = 900) -> None:
    done = subprocess.run(
        list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr[-3000:]}")


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstalledWheel]:
    """The wheel of this checkout installed into a fresh virtual environment."""
    base = tmp_path_factory.mktemp("wheel")
    # built from a copy: setuptools stages into build/, and a stale build/ of the checkout
    # (a module since deleted) would end up in the wheel
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=_not_sources)
    dist = base / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), "."],
        "building the wheel",
        cwd=source,
    )
    shutil.rmtree(source)
    wheel = next(dist.glob("lakehouse_temporal_join-*.whl"))
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], "creating the virtual environment")
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-c",
            str(ROOT / "constraints.txt"),
            f"{wheel}[spark]",
        ],
        "installing the wheel",
    )
    installed = InstalledWheel(wheel=wheel, venv=venv)
    where = subprocess.run(
        [str(installed.python), "-c", "import lakehouse; print(lakehouse.__file__)"],
        cwd=base,
        env=installed.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(venv)), f"lakehouse imported from {where}, not the wheel"
    try:
        yield installed
    finally:
        shutil.rmtree(venv, ignore_errors=True)
