"""Every worked example in the package runs in ``make test``.

pytest skips some folder names when it collects (``build``, ``dist``, dot-folders, ...: its
``norecursedirs``), and a module it does not reach has its doctests silently ignored — the
build side's package was once called ``build`` and 10 doctests never ran. This test asks
pytest what it collects and fails naming any module with a ``>>>`` example it misses.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_with_examples_has_its_doctests_collected():
    with_examples = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "lakehouse").rglob("*.py")
        if ">>> " in p.read_text(encoding="utf-8")
    }
    assert len(with_examples) > 10  # the check itself sees the package
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "lakehouse",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    collected = {line.split("::", 1)[0] for line in done.stdout.splitlines() if "::" in line}
    missing = sorted(with_examples - collected)
    assert not missing, f"modules whose examples pytest does not collect: {missing}"
