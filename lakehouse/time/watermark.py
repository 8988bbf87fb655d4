"""Watermarks that carry both kinds of time (FLIP-326, "Watermark(timestamp, useProcessingTime)").

A watermark is a promise about a stream. An *event-time* watermark ``Watermark(t)`` says that no
more rows with ``ts <= t`` will follow. A *processing-time* watermark ``Watermark(t, True)`` says
that the stream now follows the wall clock: every row may be handled as soon as it arrives. This
is the seed FLIP's answer to FLINK-19830 (a processing-time temporal join that must wait for the
build side's snapshot): the build side sends event-time ``MIN`` while its snapshot loads, then
switches to processing time.

Order (used by every component that promises "never decreases"): event-time watermarks are
ordered by timestamp, and every processing-time watermark comes *after* every event-time one,
because processing time is "now", beyond all event times that are still pending. Processing-time
watermarks are ordered among themselves by timestamp (they normally carry ``WATERMARK_MIN``).

>>> Watermark(10) < Watermark(20) < Watermark.PROCESSING_TIME
True
>>> max([Watermark(5), Watermark.MIN, Watermark(7)])
Watermark(timestamp=7, use_processing_time=False)
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar, Final

from lakehouse.errors import WatermarkError

WATERMARK_MIN: Final[int] = -(2**63)
"""The smallest watermark timestamp (Java's ``Long.MIN_VALUE``, as in Flink): "nothing is known
yet". Use this name, never a bare ``-2**63``."""

WATERMARK_MAX: Final[int] = 2**63 - 1
"""The largest watermark timestamp (Java's ``Long.MAX_VALUE``), Flink's "end of event time"."""

_EPOCH: Final[datetime] = datetime(1970, 1, 1, tzinfo=UTC)

# Keys of the JSON-friendly form (see Watermark.to_dict). Values are strings because Delta commit
# metadata is JSON and many JSON readers lose precision past 2**53 (WATERMARK_MIN is -2**63).
_KEY_TIMESTAMP: Final[str] = "timestamp"
_KEY_PROCESSING_TIME: Final[str] = "use_processing_time"
_INTEGER: Final[re.Pattern[str]] = re.compile(r"[+-]?[0-9]+")


class WatermarkStatus(enum.Enum):
    """Whether a channel currently promises to send watermarks (cf. Flink's WatermarkStatus).

    An ``IDLE`` channel is left out of the combined watermark until it is ``ACTIVE`` again, so a
    source without data does not hold back everything downstream.

    >>> WatermarkStatus("idle")
    <WatermarkStatus.IDLE: 'idle'>
    """

    ACTIVE = "active"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class Watermark:
    """A watermark in epoch milliseconds that is either event time or processing time.

    Attributes:
        timestamp: Epoch milliseconds, in ``[WATERMARK_MIN, WATERMARK_MAX]`` (Java's ``long``).
            For event time: no more rows with ``ts <= timestamp`` will follow. For processing
            time it is normally ``WATERMARK_MIN``; if set, it must not be later than the clock's
            now when a valve or output receives it.
        use_processing_time: ``True`` when the stream follows the wall clock (FLIP-326).

    Invariants (checked at construction): ``timestamp`` is an ``int`` (not ``bool``) in range and
    ``use_processing_time`` is a ``bool``.

    Ordering: ``a < b`` compares ``(use_processing_time, timestamp)``, so every processing-time
    watermark is greater than every event-time one. Equality is field equality, consistent with
    that order.

    Examples:
        >>> wm = Watermark(1_700_000_000_000)
        >>> str(wm)
        '2023-11-14T22:13:20.000Z'
        >>> wm.covers(1_700_000_000_000), wm.covers(1_700_000_000_001)
        (True, False)
        >>> str(Watermark.MIN), str(Watermark.PROCESSING_TIME)
        ('MIN', 'processing-time')
        >>> Watermark.from_dict(wm.to_dict()) == wm
        True
    """

    MIN: ClassVar[Watermark]
    """``Watermark(WATERMARK_MIN, False)``: event time, nothing known yet; holds everything back."""

    PROCESSING_TIME: ClassVar[Watermark]
    """``Watermark(WATERMARK_MIN, True)``: the stream follows the wall clock."""

    timestamp: int
    use_processing_time: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.timestamp, int) or isinstance(self.timestamp, bool):
            raise TypeError(
                f"Watermark timestamp must be an int of epoch milliseconds, got "
                f"{type(self.timestamp).__name__} {self.timestamp!r}; convert it with int(...)."
            )
        if not WATERMARK_MIN <= self.timestamp <= WATERMARK_MAX:
            raise ValueError(
                f"Watermark timestamp {self.timestamp} is outside [WATERMARK_MIN, WATERMARK_MAX] "
                f"(a signed 64-bit millisecond value, as in Flink); clamp it or check its unit."
            )
        if not isinstance(self.use_processing_time, bool):
            raise TypeError(
                f"Watermark use_processing_time must be a bool, got "
                f"{type(self.use_processing_time).__name__} {self.use_processing_time!r}."
            )

    # -- order ------------------------------------------------------------------------------

    def _order_key(self) -> tuple[bool, int]:
        # Processing time sorts after all event times: it is "now", beyond every pending row.
        return (self.use_processing_time, self.timestamp)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Watermark):
            return NotImplemented
        return self._order_key() < other._order_key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Watermark):
            return NotImplemented
        return self._order_key() <= other._order_key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Watermark):
            return NotImplemented
        return self._order_key() > other._order_key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Watermark):
            return NotImplemented
        return self._order_key() >= other._order_key()

    # -- meaning ----------------------------------------------------------------------------

    @property
    def is_min(self) -> bool:
        """``True`` for ``Watermark.MIN`` (event time, nothing known yet)."""
        return self == Watermark.MIN

    def covers(self, ts_ms: int) -> bool:
        """Whether a row with event time ``ts_ms`` is complete under this watermark.

        A processing-time watermark covers every row; an event-time watermark covers exactly the
        rows with ``ts_ms <= timestamp`` (the boundary is included, as in Flink).

        Args:
            ts_ms: The row's event time in epoch milliseconds.

        Returns:
            ``True`` when the row may be released now.

        >>> [Watermark(4).covers(ts) for ts in (3, 4, 5)]
        [True, True, False]
        >>> Watermark.PROCESSING_TIME.covers(10**12)
        True
        """
        return self.use_processing_time or ts_ms <= self.timestamp

    # -- serialisation ----------------------------------------------------------------------

    def to_dict(self) -> dict[str, str]:
        """The JSON-friendly form stored in Delta commit metadata.

        Both values are strings: JSON readers commonly parse numbers as doubles, which cannot
        hold ``WATERMARK_MIN`` exactly.

        >>> Watermark.PROCESSING_TIME.to_dict()
        {'timestamp': '-9223372036854775808', 'use_processing_time': 'true'}
        """
        return {
            _KEY_TIMESTAMP: str(self.timestamp),
            _KEY_PROCESSING_TIME: "true" if self.use_processing_time else "false",
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Watermark:
        """Parse the form written by :meth:`to_dict`.

        Also accepts an ``int`` timestamp and a ``bool`` flag (a hand-written dict). Other keys
        are ignored, so a newer writer may add fields.

        Args:
            data: A mapping with ``timestamp`` and ``use_processing_time``.

        Returns:
            The watermark.

        Raises:
            WatermarkError: When a key is missing or a value does not parse; the message names
                the key and the value.

        >>> Watermark.from_dict({"timestamp": "42", "use_processing_time": "false"})
        Watermark(timestamp=42, use_processing_time=False)
        >>> Watermark.from_dict({"timestamp": "soon"})
        Traceback (most recent call last):
        ...
        lakehouse.errors.WatermarkError: Stored watermark has timestamp 'soon', ...
        """
        if _KEY_TIMESTAMP not in data:
            raise WatermarkError(
                f"Stored watermark {dict(data)!r} has no {_KEY_TIMESTAMP!r} key; it was not "
                f"written by Watermark.to_dict(). Repair or remove the stored value."
            )
        raw_ts = data[_KEY_TIMESTAMP]
        timestamp: int
        if isinstance(raw_ts, int) and not isinstance(raw_ts, bool):
            timestamp = raw_ts
        elif isinstance(raw_ts, str) and _INTEGER.fullmatch(raw_ts.strip()):
            timestamp = int(raw_ts)
        else:
            raise WatermarkError(
                f"Stored watermark has timestamp {raw_ts!r}, which is not an integer of epoch "
                f"milliseconds; it was not written by Watermark.to_dict(). Repair or remove it."
            )
        raw_pt = data.get(_KEY_PROCESSING_TIME, "false")
        use_processing_time: bool
        if isinstance(raw_pt, bool):
            use_processing_time = raw_pt
        elif isinstance(raw_pt, str) and raw_pt.strip().lower() in ("true", "false"):
            use_processing_time = raw_pt.strip().lower() == "true"
        else:
            raise WatermarkError(
                f"Stored watermark has {_KEY_PROCESSING_TIME} {raw_pt!r}; expected 'true' or "
                f"'false'. Repair or remove the stored value."
            )
        try:
            return cls(timestamp, use_processing_time)
        except ValueError as e:
            raise WatermarkError(f"Stored watermark is invalid: {e}") from e

    # -- display ----------------------------------------------------------------------------

    def __str__(self) -> str:
        if self.use_processing_time:
            if self.timestamp == WATERMARK_MIN:
                return "processing-time"
            return f"processing-time@{format_epoch_ms(self.timestamp)}"
        if self.timestamp == WATERMARK_MIN:
            return "MIN"
        if self.timestamp == WATERMARK_MAX:
            return "MAX"  # Flink's end of event time: a bounded input has ended
        return format_epoch_ms(self.timestamp)


Watermark.MIN = Watermark(WATERMARK_MIN, False)
Watermark.PROCESSING_TIME = Watermark(WATERMARK_MIN, True)


def format_epoch_ms(ts_ms: int) -> str:
    """Format epoch milliseconds as ISO 8601 in UTC, or ``"<n> ms"`` outside years 1-9999.

    >>> format_epoch_ms(0)
    '1970-01-01T00:00:00.000Z'
    >>> format_epoch_ms(-(2**62))
    '-4611686018427387904 ms'
    """
    try:
        moment = _EPOCH + timedelta(milliseconds=ts_ms)
    except OverflowError:
        return f"{ts_ms} ms"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
