"""The columns one batch writes to one build table, decided without Spark
(lakehouse.dimension.plan.plan_columns)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
)

from lakehouse.delta.types import fits, value_checked, widened
from lakehouse.dimension.layout import PROP_PRIMARY_KEY
from lakehouse.dimension.look import NO_TABLE, TargetLook
from lakehouse.dimension.plan import ColumnPlan, ColumnSet, plan_columns, require_columns
from lakehouse.dimension.targets import BuildTarget
from lakehouse.errors import ConfigError

TYPES: list[DataType] = [
    IntegerType(),
    LongType(),
    DoubleType(),
    StringType(),
    BooleanType(),
    DateType(),
    TimestampType(),
    DecimalType(10, 2),
    DecimalType(20, 4),
    ArrayType(LongType()),
    ArrayType(DoubleType()),
]
NAMES = ["id", "rate", "name", "day"]
TARGET = BuildTarget("/t/rates", key_columns=("id",))


def _look(**columns: DataType) -> TargetLook:
    return TargetLook(exists=True, properties={}, replay=False, columns=columns)


def _set(*columns: tuple[str, DataType | None], keys: tuple[str, ...] = ()) -> ColumnSet:
    return ColumnSet(repr(columns), tuple(columns), key_columns=keys)


column_types = st.one_of(st.none(), st.sampled_from(TYPES))
column_sets = st.lists(
    st.dictionaries(st.sampled_from(NAMES), column_types, min_size=1).map(
        lambda cols: _set(*cols.items())
    ),
    max_size=6,
    unique_by=lambda s: s.name,
)
tables = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(TYPES)).map(
    lambda cols: NO_TABLE if not cols else _look(**cols)
)
answers = st.dictionaries(st.sampled_from(NAMES), st.none() | st.just("9007199254740993"))


def _answer(plan: ColumnPlan, lost: dict[str, str | None]) -> dict:
    return {w: lost.get(w[0]) for w in plan.unchecked}


@given(tables, column_sets, answers)
def test_each_set_goes_in_or_is_refused_and_what_goes_in_fits(look, sets, lost):
    plan = plan_columns(TARGET, look, sets)
    plan = plan_columns(TARGET, look, sets, _answer(plan, lost))
    names = [s.name for s in sets]
    assert sorted([*plan.compatible, *plan.refused]) == sorted(names)
    assert not set(plan.compatible) & set(plan.refused)
    for s in sets:
        if s.name in plan.compatible:
            for name, typ in s.columns:
                if typ is not None:
                    # in as it is, or each value checked (bigint into double)
                    fit = fits(typ, plan.types[name])
                    assert fit or s.name in plan.value_checks[name][1], (name, typ)
        else:
            refusal = plan.refused[s.name]
            assert refusal.column in dict(s.columns)
            assert refusal.column in refusal.reason


@given(tables, column_sets, answers)
def test_a_table_column_is_never_narrowed_nor_dropped(look, sets, lost):
    plan = plan_columns(TARGET, look, sets)
    plan = plan_columns(TARGET, look, sets, _answer(plan, lost))
    for name, typ in look.columns.items():
        assert name in plan.order
        now = plan.types[name]
        assert now == typ or widened(typ, now) == now, (name, typ, now)
    assert list(plan.order[: len(look.columns)]) == list(look.columns)


@given(tables, column_sets)
def test_only_widenings_that_can_lose_a_value_ask_for_a_scan(look, sets):
    plan = plan_columns(TARGET, look, sets)
    for name, old, new in plan.unchecked:
        assert look.columns[name] == old
        assert value_checked(old, new)
    # answered, the plan asks for nothing more
    answered = plan_columns(TARGET, look, sets, {w: None for w in plan.unchecked})
    assert not answered.unchecked
    assert answered == plan_columns(TARGET, look, sets, {w: None for w in plan.unchecked})


def test_a_value_the_wider_type_does_not_hold_refuses_the_set():
    look = _look(id=LongType(), rate=LongType())
    sets = [_set(("id", LongType()), ("rate", DoubleType()))]
    asked = plan_columns(TARGET, look, sets)
    assert asked.unchecked == {("rate", LongType(), DoubleType())}
    assert asked.types["rate"] == DoubleType()
    refused = plan_columns(TARGET, look, sets, {("rate", LongType(), DoubleType()): "2^53+1"})
    assert refused.compatible == () and refused.types["rate"] == LongType()
    assert "which holds 2^53+1 (not exact as double)" in refused.refused[sets[0].name].reason
    held = plan_columns(TARGET, look, sets, {("rate", LongType(), DoubleType()): None})
    assert held.compatible == (sets[0].name,) and held.types["rate"] == DoubleType()


def test_the_records_widened_to_double_are_checked_one_by_one():
    look = _look(id=LongType(), rate=DoubleType())
    sets = [_set(("id", LongType()), ("rate", LongType()))]
    plan = plan_columns(TARGET, look, sets)
    assert plan.value_checks == {"rate": (LongType(), (sets[0].name,))}


def test_the_key_is_the_configured_one_then_the_tables_then_the_records():
    sets = [_set(("id", LongType()), ("code", StringType()), keys=("code",))]
    stored = TargetLook(exists=True, properties={PROP_PRIMARY_KEY: "id"}, replay=False, columns={})
    unkeyed = BuildTarget("/t/rates")
    assert plan_columns(BuildTarget("/t/r", key_columns=("x",)), stored, sets).key_columns == ("x",)
    assert plan_columns(unkeyed, stored, sets).key_columns == ("id",)
    assert plan_columns(unkeyed, NO_TABLE, sets).key_columns == ("code",)
    assert plan_columns(unkeyed, NO_TABLE, []).key_columns == ()


def test_a_column_seen_only_as_null_waits_for_a_type_unless_the_table_needs_it_now():
    target = BuildTarget("/t/rates", key_columns=("id",), event_time_column="at")
    sets = [
        ColumnSet(
            "s",
            (("id", None), ("at", None), ("note", None), ("tags", None)),
            fallbacks=(("tags", ArrayType(StringType())),),
        )
    ]
    plan = plan_columns(target, NO_TABLE, sets)
    assert plan.order == ("id", "at", "tags")
    assert plan.types == {"tags": ArrayType(StringType())}  # id and at read as string


def test_a_batch_the_table_cannot_be_keyed_or_timed_by_is_refused_in_one_line():
    sets = [_set(("code", StringType()))]
    with pytest.raises(ConfigError, match="no key columns configured"):
        require_columns(BuildTarget("/t/r"), plan_columns(BuildTarget("/t/r"), NO_TABLE, []))
    with pytest.raises(ConfigError, match=r"key column\(s\) \['id'\] are not in the row image"):
        require_columns(TARGET, plan_columns(TARGET, NO_TABLE, sets))
    timed = BuildTarget("/t/r", key_columns=("code",), event_time_column="at")
    with pytest.raises(ConfigError, match="event-time column 'at' is not in the row image"):
        require_columns(timed, plan_columns(timed, NO_TABLE, sets))
