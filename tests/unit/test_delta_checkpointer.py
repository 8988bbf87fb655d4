"""The queue of Delta checkpoints written beside the next batch (lakehouse.delta.checkpointer),
without Spark: what it writes, in which order, and that a failure is a warning."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from lakehouse.delta import checkpointer


@pytest.fixture
def written(monkeypatch):
    calls: list[tuple[str, int]] = []

    def fake(uri, due):
        if uri == "broken":
            raise RuntimeError("disk full\nat java...")
        calls.append((uri, due.version))

    monkeypatch.setattr(checkpointer, "_checkpoint", fake)
    yield calls
    assert checkpointer.drain(timeout=30)


SPARK = SimpleNamespace(sparkContext=SimpleNamespace(_jsc=object()))


def test_a_table_queued_twice_gets_one_checkpoint_of_its_newest_version(written):
    with checkpointer._cond:  # the worker waits until all three are queued
        checkpointer.schedule(SPARK, None, "a", 10, batch_id=4)
        checkpointer.schedule(SPARK, None, "b", 10, batch_id=4)
        checkpointer.schedule(SPARK, None, "a", 20, batch_id=9)
    assert checkpointer.drain(timeout=30)
    assert written == [("b", 10), ("a", 20)]


def test_a_failed_checkpoint_is_a_warning_and_the_queue_goes_on(written, caplog):
    with caplog.at_level(logging.WARNING, logger="lakehouse.delta"):
        with checkpointer._cond:
            checkpointer.schedule(SPARK, None, "broken", 30, batch_id=1)
            checkpointer.schedule(SPARK, None, "c", 30, batch_id=1)
        assert checkpointer.drain(timeout=30)
    assert written == [("c", 30)]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == (
        "Delta table broken: checkpoint at version 30 not written (readers replay more of "
        "its log until the next one): disk full"
    )


def test_drain_returns_at_once_when_nothing_is_queued():
    assert checkpointer.drain(timeout=0)
