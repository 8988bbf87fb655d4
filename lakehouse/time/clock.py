"""Clocks: everything in ``lakehouse.time`` that depends on "now" takes one.

Production code uses :class:`SystemClock`; tests use :class:`ManualClock` so that idleness
timeouts and processing-time checks are exact and instant (cf. Flink's ``RelativeClock`` handed
to ``WatermarksWithIdleness``).

>>> clock = ManualClock(1_000)
>>> clock.advance(500)
>>> clock.now_ms()
1500
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A source of the current time in epoch milliseconds."""

    def now_ms(self) -> int:
        """Return the current time in epoch milliseconds."""
        ...


class SystemClock:
    """The wall clock (``time.time_ns()``), in epoch milliseconds.

    It is not monotonic: the host may step its clock. Code that needs "never decreases" keeps
    its own maximum instead of trusting this clock.

    >>> SystemClock().now_ms() > 1_600_000_000_000
    True
    """

    def now_ms(self) -> int:
        """Return the wall-clock time in epoch milliseconds."""
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that moves only when told to; for tests and replays.

    Args:
        now_ms: The initial time in epoch milliseconds.

    >>> clock = ManualClock()
    >>> clock.now_ms()
    0
    >>> clock.set(42)
    >>> clock.now_ms()
    42
    >>> clock.advance(-1)
    Traceback (most recent call last):
    ...
    ValueError: ManualClock.advance(delta_ms=-1): delta_ms must be >= 0; use set() ...
    """

    __slots__ = ("_now_ms",)

    def __init__(self, now_ms: int = 0) -> None:
        self._now_ms = _check_int("now_ms", now_ms)

    def now_ms(self) -> int:
        """Return the time last set."""
        return self._now_ms

    def set(self, now_ms: int) -> None:
        """Jump to ``now_ms`` (backwards too, to simulate a stepped host clock)."""
        self._now_ms = _check_int("now_ms", now_ms)

    def advance(self, delta_ms: int) -> None:
        """Move forward by ``delta_ms`` milliseconds.

        Raises:
            ValueError: If ``delta_ms`` is negative.
        """
        _check_int("delta_ms", delta_ms)
        if delta_ms < 0:
            raise ValueError(
                f"ManualClock.advance(delta_ms={delta_ms}): delta_ms must be >= 0; use set() to "
                f"move the clock backwards on purpose."
            )
        self._now_ms += delta_ms

    def __repr__(self) -> str:
        return f"ManualClock(now_ms={self._now_ms})"


def _check_int(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int of milliseconds, got {type(value).__name__}.")
    return value
