"""The as-of kernel: which build version each probe row joins. Pure numpy, no Spark.

Semantics (``FOR SYSTEM_TIME AS OF probe.t``; ARCHITECTURE.md, issue "Temporal join"):

* A probe row with key ``k`` and time ``t`` joins the version of ``k`` whose start is the
  greatest ``<= t``; versions with equal start are ordered by their ``seq`` (the later change
  wins).
* If that version is a delete, the row does not match.
* If a truncate (a build row that belongs to no key) lies after that version and at or
  before ``t`` — ordered by ``(start, seq)`` like the versions — the row does not match: a
  truncate ends every version open at its time.
* Processing time is the same question asked at ``t = +inf``: the latest version.

Worked example (Flink's ``TemporalRowTimeJoinOperator`` style), build versions of one key
``[1(+I), 4(+U), 7(+U), 9(-D), 12(+I)]`` and a truncate at 14:

* t = 0  -> no match (before the first version)
* t = 6  -> the version that started at 4
* t = 7  -> the version that started at 7 (starts are inclusive)
* t = 10 -> no match: the version in [9, 12) is a delete
* t = 13 -> the version that started at 12
* t = 14 -> no match: truncated at 14

>>> import numpy as np
>>> t = np.array([1, 4, 7, 9, 12])
>>> match = asof_match(
...     probe_keys=[np.array(["a"] * 6)], probe_time=np.array([0, 6, 7, 10, 13, 14]),
...     build_keys=[np.array(["a"] * 5)], build_time=t,
...     build_seq=np.array(["1", "2", "3", "4", "5"]),
...     build_is_delete=np.array([False, False, False, True, False]),
...     truncate_time=np.array([14]), truncate_seq=np.array(["6"]))
>>> match.tolist()
[-1, 1, 2, -1, 4, -1]

The algorithm is one sort and one scan, O((P + B) log(P + B)) for P probe rows and B build
rows, independent of how many versions each key has: build and probe rows are sorted together
by ``(key, time, side, seq)`` with build rows before probe rows at equal time (starts are
inclusive), and a running maximum carries the position of the last build row forward; it is
valid for a probe row when it lies inside the probe row's key group.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

#: Probe time meaning "now": processing-time lookups ask for the latest version.
LATEST = np.iinfo(np.int64).max


def _group_ids(
    probe_keys: Sequence[np.ndarray], build_keys: Sequence[np.ndarray], n_probe: int
) -> tuple[np.ndarray, np.ndarray]:
    """Dense integer ids for the key tuples of both sides (equal tuples, equal ids)."""
    if len(probe_keys) == 1:
        both = np.concatenate(
            [np.asarray(probe_keys[0], dtype=object), np.asarray(build_keys[0], dtype=object)]
        )
        ids, _ = pd.factorize(both, use_na_sentinel=True)
    else:
        frame = pd.DataFrame(
            {
                i: np.concatenate([np.asarray(p, dtype=object), np.asarray(b, dtype=object)])
                for i, (p, b) in enumerate(zip(probe_keys, build_keys, strict=True))
            }
        )
        ids = frame.groupby(list(frame.columns), sort=False, dropna=False).ngroup().to_numpy()
    ids = np.asarray(ids, dtype=np.int64)
    return ids[:n_probe], ids[n_probe:]


def asof_match(
    *,
    probe_keys: Sequence[np.ndarray],
    probe_time: np.ndarray,
    build_keys: Sequence[np.ndarray],
    build_time: np.ndarray,
    build_seq: np.ndarray,
    build_is_delete: np.ndarray,
    truncate_time: np.ndarray | None = None,
    truncate_seq: np.ndarray | None = None,
) -> np.ndarray:
    """Return, for each probe row, the index of the build row it joins, or -1.

    Args:
        probe_keys: one array per key column, each of length P (NULL keys never match).
        probe_time: int64 times of the probe rows (any unit, the same as ``build_time``);
            :data:`LATEST` asks for the latest version.
        build_keys: one array per key column, each of length B, aligned with ``probe_keys``.
        build_time: int64 version starts.
        build_seq: sortable strings ordering versions with equal start (later wins).
        build_is_delete: True where the version is a delete.
        truncate_time, truncate_seq: truncates, which end every version before them.

    Returns:
        int64 array of length P with build row indices or -1.
    """
    n_p = len(probe_time)
    n_b = len(build_time)
    result = np.full(n_p, -1, dtype=np.int64)
    if n_p == 0 or n_b == 0:
        return result
    p_gid, b_gid = _group_ids(probe_keys, build_keys, n_p)

    # One rank for every seq string (versions and truncates), so tuples compare as numbers.
    trunc_t = np.asarray(truncate_time if truncate_time is not None else [], dtype=np.int64)
    trunc_s = np.asarray(truncate_seq if truncate_seq is not None else [], dtype=object)
    all_seq = np.concatenate([np.asarray(build_seq, dtype=object), trunc_s]).astype(str)
    _, seq_rank = np.unique(all_seq, return_inverse=True)
    b_rank = seq_rank[:n_b].astype(np.int64)
    t_rank = seq_rank[n_b:].astype(np.int64)

    gid = np.concatenate([b_gid, p_gid])
    times = np.concatenate(
        [np.asarray(build_time, dtype=np.int64), np.asarray(probe_time, dtype=np.int64)]
    )
    side = np.concatenate([np.zeros(n_b, np.int8), np.ones(n_p, np.int8)])  # build first
    rank = np.concatenate([b_rank, np.zeros(n_p, np.int64)])
    order = np.lexsort((rank, side, times, gid))  # last key is the primary one

    s_gid = gid[order]
    is_build = side[order] == 0
    pos = np.arange(len(order))
    last_build_pos = np.maximum.accumulate(np.where(is_build, pos, -1))
    group_start = np.zeros(len(order), dtype=np.int64)
    boundaries = np.flatnonzero(s_gid[1:] != s_gid[:-1]) + 1
    group_start[boundaries] = boundaries
    group_start = np.maximum.accumulate(group_start)

    probe_here = ~is_build
    valid = probe_here & (last_build_pos >= group_start) & (s_gid >= 0)
    probe_index = order[probe_here] - n_b
    matched_build = np.where(
        valid[probe_here], order[np.maximum(last_build_pos[probe_here], 0)], -1
    )
    result[probe_index] = matched_build

    is_delete = np.asarray(build_is_delete, dtype=bool)
    hit = result >= 0
    result[hit & is_delete[np.maximum(result, 0)]] = -1

    if len(trunc_t):
        # the latest truncate at or before t, by (time, seq)
        t_order = np.lexsort((t_rank, trunc_t))
        st, sr = trunc_t[t_order], t_rank[t_order]
        p_t = np.asarray(probe_time, dtype=np.int64)
        idx = np.searchsorted(st, p_t, side="right") - 1
        hit = (result >= 0) & (idx >= 0)
        if hit.any():
            v = result[hit]
            tr = idx[hit]
            v_t = np.asarray(build_time, dtype=np.int64)[v]
            ends = (st[tr] > v_t) | ((st[tr] == v_t) & (sr[tr] > b_rank[v]))
            sub = result[hit]
            sub[ends] = -1
            result[hit] = sub
    return result
