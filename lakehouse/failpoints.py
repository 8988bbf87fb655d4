"""Failpoints: named places where a test can make the process die, for crash-recovery tests.

Set ``LAKEHOUSE_FAILPOINTS`` to a comma-separated list of ``name@batch`` (or ``name`` for every
batch). When the code reaches :func:`failpoint` with a listed name and batch, the process
sends itself SIGKILL: no cleanup, no ``finally``, no flush, exactly like a machine dying. Unset
(the default), a failpoint costs one dictionary lookup.

Failpoints in the code:

* ``ingest.after_dead_letters``, ``ingest.after_data`` (before the marker commit);
* ``join.before_output``, ``join.after_output`` (before the pending write),
  ``join.after_pending``.
"""

from __future__ import annotations

import os
import signal

ENV = "LAKEHOUSE_FAILPOINTS"


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


def failpoint(name: str, batch_id: int) -> None:
    """Die here (SIGKILL) when ``name`` is armed for ``batch_id``; otherwise do nothing."""
    if ENV not in os.environ:
        return
    armed = _armed()
    if name in armed and (armed[name] is None or batch_id in (armed[name] or ())):
        os.kill(os.getpid(), signal.SIGKILL)
