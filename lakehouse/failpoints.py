"""Failpoints: named places where a test can make the process die, for crash-recovery tests.

Set ``LAKEHOUSE_FAILPOINTS`` to a comma-separated list of ``name@batch`` (or ``name`` for every
batch). When the code reaches :func:`failpoint` with a listed name and batch, the process
sends itself SIGKILL: no cleanup, no ``finally``, no flush, exactly like a machine dying. Unset
(the default), a failpoint costs one dictionary lookup.

Every failpoint sits between two durable effects (a Delta commit, a file Spark's checkpoint
keeps), so that together they cut every window in which a process can die with some of a
step's effects on storage and not the others. :data:`POINTS` lists them, each with what is on
storage when the process dies there; ``tests/integration/test_crash_matrix.py`` kills the
installed command at every one of them, restarts it, and compares the tables with an
uninterrupted run. A failpoint whose name is not in :data:`POINTS` is a programming error.

Points outside a micro-batch (the table-maintenance commands, a table's creation) take
``batch_id = 0``.
"""

from __future__ import annotations

import os
import signal
from typing import Final

ENV: Final = "LAKEHOUSE_FAILPOINTS"

#: Every failpoint, in the order a process meets them, and what storage holds when it dies there.
POINTS: Final[dict[str, str]] = {
    # a micro-batch of either job (lakehouse.runner, the same code for both)
    "batch.start": "Spark wrote the batch's offsets; no table has it",
    # a table's creation (lakehouse.delta.create_table), when the location already holds files
    "create.before_properties": "the empty table committed, its properties not yet",
    # an idempotent write (lakehouse.delta.write), in every batch: to an existing table, or
    # the build table's first rows, whose commit creates it
    "delta.before_commit": "a write's data files written, its commit not yet",
    # the checkpoint a commit made due, written beside the next batch (lakehouse.delta)
    "delta.checkpoint": "a commit that made a log checkpoint due, the checkpoint not yet",
    # the ingest's batch (lakehouse.dimension.sink), in write order
    "ingest.after_one_pass": "the batch's rows staged by its one pass, nothing committed",
    "ingest.after_dead_letters": "the batch's dead letters committed, no build-table write",
    # a build table created before any row (nothing routed to it yet)
    "ingest.after_create": "the build table created, the batch's data not yet",
    "ingest.after_connect_schemas": "the records' new Connect schema recorded, data not yet",
    "ingest.after_resnapshot_start": "a re-snapshot started (marker cleared), its data not yet",
    "ingest.after_block": "a schema block recorded, the batch's data not yet",
    "widen.before_data": "columns widened (the table rewritten), the batch's data not yet",
    "ingest.after_data": "the data committed, the snapshot marker not yet",
    "optimize.after_commit": "small files compacted after a data commit, the batch not done",
    # the join's batch (lakehouse.join.operator), in write order
    "join.after_create_pending": "the pending table created, nothing of the batch written",
    "join.after_dead_letters": "the batch's dead letters committed, no output",
    "join.after_output": "the output committed, the pending table not yet",
    # after a handler returned, before Spark commits the batch to its checkpoint
    "ingest.batch_end": "every table has the batch, Spark's commit log not yet",
    "join.batch_end": "every table has the batch, Spark's commit log not yet",
    # maintenance commands
    "schema_resolve.after_replay": "held-back records replayed, the block not yet cleared",
    "compact.before_commit": "the rows to drop decided, nothing committed",
    "vacuum.before_delete": "the files to delete listed, none deleted",
}


def _armed() -> dict[str, set[int] | None]:
    points: dict[str, set[int] | None] = {}
    for item in os.environ.get(ENV, "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _, batch = item.partition("@")
        if not batch:
            points[name] = None
        else:
            existing = points.get(name, set())
            if existing is not None:
                existing.add(int(batch))
                points[name] = existing
    return points


def failpoint(name: str, batch_id: int = 0) -> None:
    """Die here (SIGKILL) when ``name`` is armed for ``batch_id``; otherwise do nothing.

    Raises:
        KeyError: ``name`` is not one of :data:`POINTS` (only when failpoints are armed, so
            that the check costs nothing in production).
    """
    if ENV not in os.environ:
        return
    if name not in POINTS:
        raise KeyError(f"failpoint {name!r} is not listed in lakehouse.failpoints.POINTS")
    armed = _armed()
    if name in armed and (armed[name] is None or batch_id in (armed[name] or ())):
        os.kill(os.getpid(), signal.SIGKILL)
