"""Connector positions as sortable strings."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakehouse.cdc.models import SourceInfo
from lakehouse.cdc.seq import format_seq, position_seq
from lakehouse.errors import CdcDecodeError

components = st.integers(min_value=0, max_value=10**20 - 1)


@given(
    a=st.lists(components, min_size=3, max_size=3), b=st.lists(components, min_size=3, max_size=3)
)
@settings(max_examples=300)
def test_string_order_is_tuple_order_for_equal_lengths(a, b):
    sa, sb = format_seq(tuple(a)), format_seq(tuple(b))
    assert (sa < sb) == (tuple(a) < tuple(b))
    assert (sa == sb) == (a == b)


@given(
    a=st.lists(components, min_size=1, max_size=5), b=st.lists(components, min_size=1, max_size=5)
)
@settings(max_examples=300)
def test_string_order_is_tuple_order_for_any_lengths(a, b):
    # "." sorts before every digit, so a prefix sorts first, as in tuple order
    assert (format_seq(tuple(a)) < format_seq(tuple(b))) == (tuple(a) < tuple(b))


@given(a=st.lists(st.lists(components, min_size=2, max_size=2).map(tuple), max_size=20))
@settings(max_examples=100)
def test_sorting_strings_sorts_positions(a):
    assert sorted(a) == sorted(a, key=format_seq)


def test_components_are_fixed_width():
    assert format_seq((0,)) == "0" * 20
    assert format_seq((2**64 - 1, 1)) == "18446744073709551615.00000000000000000001"


@pytest.mark.parametrize("bad", [(), (-1,), (10**20,), (1.5,), (True,)])
def test_format_seq_rejects(bad):
    with pytest.raises(ValueError):
        format_seq(bad)


def _src(**fields: Any) -> SourceInfo:
    return SourceInfo.model_validate(fields)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # MySQL: file number, pos, row
        (
            _src(connector="mysql", file="mysql-bin.000003", pos=1442, row=1),
            "00000000000000000003.00000000000000001442.00000000000000000001",
        ),
        (
            _src(connector="mysql", file="binlog.000065", pos=234),  # no row: 0
            "00000000000000000065.00000000000000000234.00000000000000000000",
        ),
        (
            _src(connector="mariadb", file="mariadb-bin.000010", pos=4, row=0),
            "00000000000000000010.00000000000000000004.00000000000000000000",
        ),
        # Flink CDC's snapshot reader: empty file name, no position
        (_src(connector="mysql", file="", pos=0, row=0), None),
        (_src(connector="mysql", file="mysql-bin", pos=4), None),
        (_src(connector="mysql", file="mysql-bin.000003"), None),
        # PostgreSQL: lsn
        (_src(connector="postgresql", lsn=34466480), "00000000000034466480"),
        (_src(connector="postgresql"), None),
        # SQL Server: commit_lsn then change_lsn, hex parts
        (
            _src(
                connector="sqlserver",
                commit_lsn="0000002a:00000b28:0003",
                change_lsn="0000002a:00000b20:0002",
            ),
            "00000000000000000042.00000000000000002856.00000000000000000003."
            "00000000000000000042.00000000000000002848.00000000000000000002",
        ),
        # snapshot rows have no change_lsn
        (
            _src(connector="sqlserver", commit_lsn="0000002a:00000b28:0003"),
            "00000000000000000042.00000000000000002856.00000000000000000003",
        ),
        (_src(connector="sqlserver"), None),
        # Oracle: scn (+ commit_scn)
        (
            _src(connector="oracle", scn="1234567", commit_scn="1234570"),
            "00000000000001234567.00000000000001234570",
        ),
        (_src(connector="oracle", scn="1234567"), "00000000000001234567"),
        # anything else has no position here
        (_src(connector="mongodb"), None),
        (_src(lsn=5), None),
        (None, None),
    ],
)
def test_position_seq(source, expected):
    assert position_seq(source) == expected


def test_sqlserver_order_follows_commit_then_change_lsn():
    first = position_seq(
        _src(
            connector="sqlserver",
            commit_lsn="0000002a:00000b28:0003",
            change_lsn="0000002a:00000b30:0001",
        )
    )
    later = position_seq(
        _src(
            connector="sqlserver",
            commit_lsn="0000002a:00000c00:0001",
            change_lsn="0000002a:00000b29:0001",
        )
    )
    assert first is not None and later is not None and first < later


@pytest.mark.parametrize(
    "source",
    [
        _src(connector="sqlserver", commit_lsn="zz:00"),
        _src(connector="oracle", scn="12a"),
        _src(connector="oracle", scn="-5"),
        _src(connector="postgresql", lsn=-1),
        _src(connector="postgresql", lsn=10**20),
        _src(connector="mysql", file="mysql-bin.000003", pos=-4),
    ],
)
def test_malformed_positions_are_invalid_values(source):
    with pytest.raises(CdcDecodeError) as e:
        position_seq(source)
    assert e.value.kind == "invalid_value"
