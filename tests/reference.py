"""A small, obviously-correct reference of the temporal join semantics, in plain Python.

Everything is a linear scan over lists; no sorting tricks, no vectorisation. The pipelines
are compared against these functions on generated inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

WATERMARK_MIN = -(2**63)


@dataclass(frozen=True)
class Version:
    """One build table row: a change of ``key`` (None for a truncate) at ``time``."""

    key: Any
    time: int
    seq: str
    op: str  # r c u d t
    value: Any = None


def as_of(versions: Iterable[Version], key: Any, t: int | None) -> Version | None:
    """The version of ``key`` valid at ``t`` (None: the latest), or None when there is none.

    Greatest start <= t, ties by seq; a delete or a later truncate (at or before t) means no
    match.
    """
    versions = list(versions)
    candidates = [
        v for v in versions if v.op != "t" and v.key == key and (t is None or v.time <= t)
    ]
    if key is None or not candidates:
        return None
    best = candidates[0]
    for v in candidates[1:]:
        if (v.time, v.seq) > (best.time, best.seq):
            best = v
    for tr in versions:
        if (
            tr.op == "t"
            and (t is None or tr.time <= t)
            and (tr.time, tr.seq) > (best.time, best.seq)
        ):
            return None
    if best.op == "d":
        return None
    return best


@dataclass(frozen=True)
class ProbeRow:
    id: int
    key: Any
    time: int


def rowtime_join(
    probes: Sequence[ProbeRow], versions: Sequence[Version], *, watermark: int, left: bool
) -> tuple[list[tuple[int, Any]], list[int]]:
    """Release probe rows with time <= watermark and join each as of its time.

    Returns (output rows as (probe id, joined value or None), ids still pending).
    """
    out: list[tuple[int, Any]] = []
    pending: list[int] = []
    for p in probes:
        if p.time > watermark:
            pending.append(p.id)
            continue
        v = as_of(versions, p.key, p.time)
        if v is not None:
            out.append((p.id, v.value))
        elif left:
            out.append((p.id, None))
    return out, pending
