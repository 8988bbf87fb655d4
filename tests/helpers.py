"""Table assertions with readable, side-by-side failures."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table


def _render(expected: Sequence[tuple[Any, ...]], actual: Sequence[tuple[Any, ...]]) -> str:
    table = Table("#", "expected", "actual", "", show_lines=False)
    for i in range(max(len(expected), len(actual))):
        e = expected[i] if i < len(expected) else None
        a = actual[i] if i < len(actual) else None
        table.add_row(str(i), repr(e), repr(a), "" if e == a else "<- differs")
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def assert_rows_equal(
    actual: Iterable[Sequence[Any]], expected: Iterable[Sequence[Any]], *, ordered: bool = False
) -> None:
    """Assert two row collections are equal; unordered unless ``ordered``; on failure show
    both side by side, sorted, with the differing rows marked."""
    a = [tuple(r) for r in actual]
    e = [tuple(r) for r in expected]
    if not ordered:
        a = sorted(a, key=repr)
        e = sorted(e, key=repr)
    if a != e:
        raise AssertionError(f"rows differ ({len(e)} expected, {len(a)} actual):\n" + _render(e, a))


def assert_table_at_version(
    spark: Any,
    uri: str,
    version: int | None,
    rows: Iterable[Sequence[Any]],
    *,
    columns: Sequence[str] | None = None,
) -> None:
    """Assert the Delta table at ``version`` holds exactly ``rows`` (in any order)."""
    from lakehouse import delta

    df = delta.read(spark, uri, version=version)
    if columns is not None:
        df = df.select(*columns)
    assert_rows_equal(df.collect(), rows)
