"""What a table is: every table lakehouse creates records its kind and the pipeline that
created it in its properties, so that a command given the wrong table refuses it in one line
(before Spark starts), and ``lakehouse status`` says what it looks at.

=================  ====================================  =================================
kind               what it holds                         written by
=================  ====================================  =================================
``build``          the versioned dimension               ``lakehouse ingest``
``output``         joined probe rows                     ``lakehouse join``
``pending``        probe rows waiting for the watermark  ``lakehouse join``
``dead-letter``    records that could not be used        ``lakehouse ingest`` and ``join``
``unmatched``      the quality report's unmatched rows   ``lakehouse quality``
=================  ====================================  =================================

Build tables have recorded ``lakehouse.tableKind`` since the first version; the other kinds
record it from their creation on. A table without the property (created before, or not by
lakehouse) has no known kind: the checks refuse it only where a build table is expected.

>>> props = creation_properties(TableKind.OUTPUT, "join-orders")
>>> props
{'lakehouse.tableKind': 'output', 'lakehouse.pipeline': 'join-orders'}
>>> kind_of(props)
<TableKind.OUTPUT: 'output'>
>>> print(expected_kind("tables/orders_rowtime", props, TableKind.BUILD, setting="build_table"))
build_table: tables/orders_rowtime is an output table (created by pipeline join-orders), not a \
build table (written by lakehouse ingest); point build_table at a build table
>>> expected_kind("tables/rates", {}, TableKind.OUTPUT, setting="join.output_table") is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

#: The table's kind: a :class:`TableKind` value.
PROP_TABLE_KIND: Final = "lakehouse.tableKind"
#: The pipeline id of the job that created the table (a dead-letter table may be shared by
#: several jobs; it names the first).
PROP_PIPELINE: Final = "lakehouse.pipeline"


class TableKind(StrEnum):
    """The kinds of table lakehouse writes."""

    BUILD = "build"
    OUTPUT = "output"
    PENDING = "pending"
    DEAD_LETTER = "dead-letter"
    UNMATCHED = "unmatched"

    @property
    def label(self) -> str:
        """``build table``, ``dead-letter table``...: the words messages use."""
        return f"{self.value} table"

    @property
    def article(self) -> str:
        """``a build table``, ``an output table``."""
        return ("an " if self.value[0] in "aeiou" else "a ") + self.label

    @property
    def writer(self) -> str:
        """The command that writes tables of this kind."""
        return _WRITERS[self]


_WRITERS: Final = {
    TableKind.BUILD: "lakehouse ingest",
    TableKind.OUTPUT: "lakehouse join",
    TableKind.PENDING: "lakehouse join",
    TableKind.DEAD_LETTER: "lakehouse ingest or lakehouse join",
    TableKind.UNMATCHED: "lakehouse quality",
}


def creation_properties(kind: TableKind, pipeline: str | None = None) -> dict[str, str]:
    """The properties a table of ``kind`` gets when it is created (by ``pipeline``)."""
    props = {PROP_TABLE_KIND: kind.value}
    if pipeline:
        props[PROP_PIPELINE] = pipeline
    return props


def kind_of(properties: Mapping[str, str]) -> TableKind | None:
    """The kind a table's properties record, or None (no kind, or one this version does not
    know)."""
    try:
        return TableKind(properties.get(PROP_TABLE_KIND, ""))
    except ValueError:
        return None


def describe(properties: Mapping[str, str]) -> str:
    """``output table (created by pipeline join-orders)``; ``no lakehouse kind`` for a table
    without one."""
    kind = kind_of(properties)
    if kind is None:
        recorded = properties.get(PROP_TABLE_KIND)
        return f"unknown kind {recorded!r}" if recorded else "no lakehouse kind recorded"
    pipeline = properties.get(PROP_PIPELINE)
    return kind.label + (f" (created by pipeline {pipeline})" if pipeline else "")


def expected_kind(
    uri: str,
    properties: Mapping[str, str],
    expected: TableKind,
    *,
    setting: str,
    writes: bool = False,
) -> str | None:
    """The one line refusing the table at ``uri`` (an existing table with ``properties``) as
    the ``setting``'s table of kind ``expected``, or None when it may serve.

    A recorded kind must be ``expected``. A table without one is refused only where a build
    table is read: a build table records its kind from its creation on, except after a crash
    between the creation's two commits, which the job that ``writes`` it (the ingest)
    finishes (:func:`check_kind` lets a table in that state pass: its first commit says it is
    being created, :data:`lakehouse.delta.META_CREATING`); an output, pending or dead-letter
    table created before kinds were recorded has none, and gets it with its next write.
    """
    kind = kind_of(properties)
    if kind is expected or (kind is None and (writes or expected is not TableKind.BUILD)):
        return None
    return (
        f"{setting}: {uri} is {_what(properties)}, not {expected.article} (written by "
        f"{expected.writer}); point {setting} at {expected.article}"
    )


def _what(properties: Mapping[str, str]) -> str:
    kind = kind_of(properties)
    if kind is None:
        return "a Delta table without a lakehouse kind (lakehouse did not create it)"
    pipeline = properties.get(PROP_PIPELINE)
    return kind.article + (f" (created by pipeline {pipeline})" if pipeline else "")


def check_kind(
    uri: str,
    expected: TableKind,
    *,
    setting: str,
    must_exist: bool = False,
    writes: bool = False,
) -> None:
    """Refuse the table at ``uri`` as the ``setting``'s table of kind ``expected``
    (:func:`expected_kind`; ``writes``: the command writes it). Reads the table's log once,
    never starting Spark (:func:`lakehouse.delta.peek`): a table that cannot be read without
    Spark is left for the check a job repeats once Spark runs.

    Raises:
        ConfigError: the table is of another kind; or ``must_exist`` and there is no table.
    """
    from lakehouse import delta
    from lakehouse.errors import ConfigError

    look = delta.peek(uri)
    if look is None:
        return
    if not look.exists:
        if must_exist:
            raise ConfigError(
                f"{setting}: there is no Delta table at {uri}; expected {expected.article} "
                f"(written by {expected.writer})",
                setting=setting,
            )
        return
    refusal = expected_kind(uri, look.properties, expected, setting=setting, writes=writes)
    if refusal is not None and not _being_created(look):
        raise ConfigError(refusal, setting=setting)


def _being_created(look: Any) -> bool:
    """Whether the table is lakehouse's creation between its two commits (no properties
    yet; its first commit says so, :data:`lakehouse.delta.META_CREATING`): its writer
    finishes it."""
    from lakehouse import delta

    if kind_of(look.properties) is not None or look.version != 0:
        return False
    first = look.commit(0)
    return first is not None and delta.META_CREATING in first.metadata
