"""The package's public surface: a small, deliberate ``__all__`` whose names resolve, and an
``import lakehouse`` that loads no pyspark (the command line and the Spark-free quality report
start fast, and a machine without Spark can use them)."""

from __future__ import annotations

import subprocess
import sys

import lakehouse


def test_every_public_name_resolves_and_is_documented():
    assert lakehouse.__all__ == sorted(lakehouse.__all__)
    assert set(lakehouse.__all__) == set(lakehouse._EXPORTS)
    for name in lakehouse.__all__:
        value = getattr(lakehouse, name)
        assert value.__doc__, f"lakehouse.{name} has no docstring"
        assert name in dir(lakehouse)


def test_the_reference_renders_every_public_name():
    """docs/reference/python-api.md renders each name of ``__all__`` from its docstring."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs/reference/python-api.md").read_text()
    rendered = {
        line.split()[-1].rsplit(".", 1)[-1] for line in page.splitlines() if line.startswith(":::")
    }
    assert set(lakehouse.__all__) <= rendered, sorted(set(lakehouse.__all__) - rendered)


def test_an_unknown_name_is_an_attribute_error():
    try:
        lakehouse.temporal_joins  # noqa: B018
    except AttributeError as e:
        assert "temporal_joins" in str(e)
    else:
        raise AssertionError("lakehouse.temporal_joins resolved")


def test_importing_lakehouse_loads_no_spark():
    code = (
        "import sys, lakehouse; "
        "lakehouse.JoinOptions; lakehouse.IngestOptions; lakehouse.load_settings; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout
