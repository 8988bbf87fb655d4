"""The seeded workload: one build history and one probe set, written once as parquet.

Every engine reads the same two files, so every engine joins the same rows:

``build.parquet`` (``keys x versions`` rows, in key order, each key's versions in time order)
    ``k`` bigint (the key), ``t`` bigint (version start, epoch ms), ``v`` bigint (the
    value, unique per row so a wrong match changes the checksum), plus the build-table
    layout the project reads (:mod:`lakehouse.dimension.layout`): ``_op`` (``r`` for the first
    version of a key, ``u`` after), ``_seq`` (zero-padded global row number, so it grows
    with time within a key and orders equal starts), ``_event_time`` (``t`` as a UTC timestamp).
``probe.parquet`` (``probe_rows`` rows, in arrival order, i.e. unsorted)
    ``id`` bigint, ``k`` bigint (uniform over the keys), ``t`` bigint (uniform over the
    build's time range, so about ``1 / (versions + 1)`` of the rows fall before their key's
    first version and stay unmatched).

Version starts are drawn uniformly over :data:`HORIZON_MS` and independently per version,
so equal starts of one key happen (rarely) and exercise the ``_seq`` tie-break.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: Width of the time range, ms (about 11.6 days): wide enough for 1e8 distinct starts.
HORIZON_MS = 1_000_000_000
#: Epoch ms of the range's start (2023-11-14T22:13:20Z), so times look like real ones.
EPOCH0_MS = 1_700_000_000_000

_ROW_GROUP = 1_000_000


@dataclass(frozen=True, slots=True)
class Workload:
    """Sizes and seed of one workload.

    Attributes:
        probe_rows: probe rows (``P``).
        keys: distinct build keys (``K``).
        versions: versions per key (``V``); the build has ``K * V`` rows.
        seed: the generator's seed; the same workload gives the same files byte for byte.
    """

    probe_rows: int
    keys: int
    versions: int
    seed: int = 6

    @property
    def build_rows(self) -> int:
        """Rows of the build history."""
        return self.keys * self.versions

    @property
    def name(self) -> str:
        """A short label such as ``1M x 100k x 10``."""
        return f"{_short(self.probe_rows)} x {_short(self.keys)} x {self.versions}"

    @property
    def slug(self) -> str:
        """A file-system friendly label."""
        return f"p{self.probe_rows}_k{self.keys}_v{self.versions}_s{self.seed}"


def _short(n: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % (div // 10) == 0:
            text = f"{n / div:g}"
            return f"{text}{unit}"
    return str(n)


@dataclass(frozen=True, slots=True)
class WorkloadFiles:
    """Where a generated workload lives."""

    workload: Workload
    build: str
    probe: str


def build_arrays(w: Workload) -> dict[str, np.ndarray]:
    """The build history as numpy arrays (``k``, ``t``, ``v``, ``first``)."""
    rng = np.random.default_rng([w.seed, 1])
    k = np.repeat(np.arange(w.keys, dtype=np.int64), w.versions)
    starts = rng.integers(0, HORIZON_MS, (w.keys, w.versions), dtype=np.int64)
    t = EPOCH0_MS + np.sort(starts, axis=1).reshape(-1)  # a key's changes in time order
    v = np.arange(w.build_rows, dtype=np.int64) * 7 + 1
    first = np.zeros(w.build_rows, dtype=bool)
    first[:: w.versions] = True
    return {"k": k, "t": t, "v": v, "first": first}


def probe_arrays(w: Workload) -> dict[str, np.ndarray]:
    """The probe rows as numpy arrays (``id``, ``k``, ``t``)."""
    rng = np.random.default_rng([w.seed, 2])
    return {
        "id": np.arange(w.probe_rows, dtype=np.int64),
        "k": rng.integers(0, w.keys, w.probe_rows, dtype=np.int64),
        "t": EPOCH0_MS + rng.integers(0, HORIZON_MS, w.probe_rows, dtype=np.int64),
    }


def build_table(w: Workload) -> pa.Table:
    """The build history as an Arrow table (schema in the module docstring)."""
    a = build_arrays(w)
    seq = pc.utf8_lpad(pa.array(np.arange(w.build_rows, dtype=np.int64)).cast(pa.string()), 12, "0")
    op = pa.DictionaryArray.from_arrays(
        pa.array(np.where(a["first"], 0, 1).astype(np.int8)), pa.array(["r", "u"])
    ).cast(pa.string())
    return pa.table(
        {
            "k": a["k"],
            "t": a["t"],
            "v": a["v"],
            "_op": op,
            "_seq": seq,
            "_event_time": pa.array(a["t"] * 1000, pa.timestamp("us", tz="UTC")),
        }
    )


def probe_table(w: Workload) -> pa.Table:
    """The probe rows as an Arrow table."""
    return pa.table(probe_arrays(w))


def generate(w: Workload, root: str | os.PathLike[str]) -> WorkloadFiles:
    """Write the workload's parquet files under ``root`` (reused when already there).

    Returns:
        The file locations; ``build.parquet`` and ``probe.parquet`` under
        ``root/<slug>/``, and ``workload.json`` describing them.
    """
    base = Path(root) / w.slug
    files = WorkloadFiles(w, str(base / "build.parquet"), str(base / "probe.parquet"))
    marker = base / "workload.json"
    if marker.exists():
        return files
    base.mkdir(parents=True, exist_ok=True)
    pq.write_table(build_table(w), files.build, row_group_size=_ROW_GROUP)
    pq.write_table(probe_table(w), files.probe, row_group_size=_ROW_GROUP)
    marker.write_text(json.dumps(asdict(w)))
    return files
