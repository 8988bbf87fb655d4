"""The connector's own position of a change, as a string whose order is the change order.

The build table orders the changes of one key by ``_seq``. Positions are tuples of
non-negative integers; :func:`format_seq` writes each as a fixed-width, zero-padded decimal
and joins them with ``"."``, so that comparing the strings compares the tuples (``"."`` sorts
before every digit, so a tuple that is a prefix of another sorts first, as in tuple order).

What each connector's position is (Debezium docs, "Change event values", ``source``):

* PostgreSQL: ``(lsn,)``. Every row of one snapshot shares the snapshot's LSN; that is fine
  for ordering changes of one key, which a snapshot reads once.
* MySQL and MariaDB: ``(binlog file number, pos, row)``; the number is the numeric suffix of
  ``file`` (``mysql-bin.000003`` -> 3); ``row`` (the row within a multi-row binlog event)
  defaults to 0. An empty ``file`` (Flink CDC's snapshot reader sends ``""`` and ``pos`` 0)
  means no position.
* SQL Server: the ``:``-separated hex parts of ``commit_lsn``, then of ``change_lsn``.
* Oracle: ``(scn,)``, plus ``commit_scn`` when present.
* Anything else: no position (``None``); the caller falls back to Kafka partition + offset.
"""

from __future__ import annotations

import re

from lakehouse.cdc.models import SourceInfo
from lakehouse.errors import CdcDecodeError

__all__ = ["SEQ_COMPONENT_WIDTH", "format_seq", "position_seq"]

SEQ_COMPONENT_WIDTH = 20
"""Digits per component: enough for any unsigned 64-bit value (18446744073709551615)."""

_LIMIT = 10**SEQ_COMPONENT_WIDTH
_FILE_NUMBER = re.compile(r"([0-9]+)\Z")


def format_seq(components: tuple[int, ...]) -> str:
    """Write a position tuple as a string whose lexicographic order is the tuple order.

    Args:
        components: non-negative integers below ``10**20``.

    Returns:
        The components, each zero-padded to 20 digits, joined by ``"."``.

    Raises:
        ValueError: for a negative or too large component, or an empty tuple.

    Example:
        >>> format_seq((3, 1442, 1))
        '00000000000000000003.00000000000000001442.00000000000000000001'
        >>> format_seq((3, 1442, 0)) < format_seq((3, 1442, 1)) < format_seq((4, 0, 0))
        True
        >>> format_seq((2**64 - 1,))
        '18446744073709551615'
    """
    if not components:
        raise ValueError("a position needs at least one component")
    for c in components:
        if type(c) is not int or not 0 <= c < _LIMIT:
            raise ValueError(f"position component {c!r} is not an integer in 0..10**20-1")
    return ".".join(f"{c:020d}" for c in components)


def _hex_parts(value: str, what: str) -> tuple[int, ...]:
    try:
        parts = tuple(int(part, 16) for part in value.split(":"))
    except ValueError:
        raise CdcDecodeError(
            f"source.{what} {value!r:.60} is not a ':'-separated hex LSN", kind="invalid_value"
        ) from None
    return parts


def _scn(value: str | int, what: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, str) and value.isdigit() and value.isascii():
        return int(value)
    raise CdcDecodeError(f"source.{what} {value!r:.60} is not a decimal SCN", kind="invalid_value")


def position_seq(source: SourceInfo | None) -> str | None:
    """The connector's position of a change as a sortable string (see the module docstring).

    Returns:
        The formatted position, or ``None`` when the connector gives none.

    Raises:
        CdcDecodeError: ``invalid_value`` when a position field is malformed (negative,
            wider than 20 digits, not hex/decimal where it must be).

    Example:
        >>> src = SourceInfo.model_validate(
        ...     {"connector": "mysql", "file": "mysql-bin.000003", "pos": 1442, "row": 1})
        >>> position_seq(src)
        '00000000000000000003.00000000000000001442.00000000000000000001'
        >>> position_seq(SourceInfo.model_validate({"connector": "postgresql", "lsn": 23911624}))
        '00000000000023911624'
    """
    if source is None:
        return None
    connector = source.connector
    components: tuple[int, ...]
    if connector == "postgresql":
        if source.lsn is None:
            return None
        components = (source.lsn,)
    elif connector in ("mysql", "mariadb"):
        match = _FILE_NUMBER.search(source.file) if source.file else None
        if match is None or source.pos is None:
            return None
        components = (int(match.group(1)), source.pos, source.row or 0)
    elif connector == "sqlserver":
        if not source.commit_lsn:
            return None
        components = _hex_parts(source.commit_lsn, "commit_lsn")
        if source.change_lsn:
            components += _hex_parts(source.change_lsn, "change_lsn")
    elif connector == "oracle":
        if source.scn is None:
            return None
        components = (_scn(source.scn, "scn"),)
        if source.commit_scn is not None:
            components += (_scn(source.commit_scn, "commit_scn"),)
    else:
        return None
    try:
        return format_seq(components)
    except ValueError as e:
        raise CdcDecodeError(
            f"{connector} position {components}: {e}", kind="invalid_value"
        ) from None
