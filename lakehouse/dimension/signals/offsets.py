"""Kafka offsets a signal covers: ``{topic: {partition: next_offset}}`` maps, merged and
compared (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from lakehouse.dimension.signals.kinds import Offsets


def merge_offsets(*offsets: Mapping[str, Mapping[str, int]] | None) -> Offsets:
    """The per-partition maximum of several offset maps.

    >>> merge_offsets({"a": {"0": 3}}, {"a": {"0": 2, "1": 5}}, None)
    {'a': {'0': 3, '1': 5}}
    """
    out: Offsets = {}
    for one in offsets:
        for topic, parts in (one or {}).items():
            mine = out.setdefault(str(topic), {})
            for partition, offset in parts.items():
                key = str(partition)
                mine[key] = max(int(offset), mine.get(key, int(offset)))
    return {t: dict(sorted(p.items(), key=lambda kv: int(kv[0]))) for t, p in sorted(out.items())}


def uncovered(
    positions: Mapping[str, Mapping[str, int]], covered: Mapping[str, Mapping[str, int]]
) -> Offsets:
    """The covered offsets that ``positions`` has not reached yet (empty when covered).

    An offset of 0 (an empty partition) is always reached.

    >>> uncovered({"a": {"0": 3}}, {"a": {"0": 3, "1": 0}})
    {}
    >>> uncovered({"a": {"0": 3}}, {"a": {"0": 4}, "b": {"0": 1}})
    {'a': {'0': 4}, 'b': {'0': 1}}
    """
    missing: Offsets = {}
    for topic, parts in covered.items():
        for partition, offset in parts.items():
            if int(offset) <= 0:
                continue
            if positions.get(topic, {}).get(str(partition), -1) < int(offset):
                missing.setdefault(topic, {})[str(partition)] = int(offset)
    return missing


def offsets_from_text(text: str | None) -> Offsets | None:
    """Parse an offset map written as JSON (None for empty or malformed text)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        return None
    try:
        return merge_offsets(value)
    except (TypeError, ValueError):
        return None
