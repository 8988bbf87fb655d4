"""A streaming job's checkpoint, and the binding of a pipeline id to it.

Exactly-once writes rest on Delta's application transactions: every commit of a job carries
``txnAppId = pipeline id`` and ``txnVersion = micro-batch id``, and a commit whose batch id is
not above the recorded one is a replay and is skipped. Batch ids come from the query's
checkpoint. A *new* checkpoint (deleted, moved, mistyped, or another job's) restarts them at
0, so under an existing pipeline id every batch it runs would be skipped as "already
committed" — data silently dropped, exit 0. Delta's own ``txnAppId`` has the same trap.

So a pipeline id is bound to one checkpoint:

* every version a job writes names its checkpoint in the commit metadata
  (:data:`META_CHECKPOINT_ID`, Spark's own query id from ``<checkpoint>/metadata``, which a
  restart from the same checkpoint keeps, and :data:`META_CHECKPOINT`, its location);
* before the query starts, :func:`check_binding` refuses a checkpoint that is new while the
  pipeline id has committed to the job's tables, or that is not the one the pipeline's last
  commit names, with :class:`~lakehouse.errors.DataSafetyError` saying how to continue
  (restore that checkpoint) or start over on purpose (a new pipeline id).

Tables written before this binding existed name no checkpoint; only the new-checkpoint rule
applies to them until their next commit records one.

The offsets in a checkpoint belong to one *incarnation* of each Kafka topic. A topic deleted
and created again (or a broker that lost its data) starts its offsets again at 0; once the
new topic has grown past the checkpoint's offsets, Spark sees nothing wrong and silently
skips every record below them. So the checkpoint also keeps the topics' ids (KIP-516) in
:data:`TOPICS_FILE`, and :func:`check_topics` compares them before every start of the query
(the first, and each restart after an outage).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from lakehouse.errors import DataSafetyError
from lakehouse.storage import filesystem

__all__ = [
    "META_CHECKPOINT",
    "META_CHECKPOINT_ID",
    "TOPICS_FILE",
    "Binding",
    "binding_metadata",
    "binding_problem",
    "check_binding",
    "check_topics",
    "checkpoint_id",
    "has_offsets",
    "read_text",
    "recreated_topics",
]

#: Commit metadata: Spark's query id of the checkpoint the commit's job ran from.
META_CHECKPOINT_ID: Final = "lakehouse.checkpointId"
#: Commit metadata: that checkpoint's location (as configured).
META_CHECKPOINT: Final = "lakehouse.checkpoint"
#: The ids of the Kafka topics the checkpoint's offsets refer to, kept next to them.
TOPICS_FILE: Final = "lakehouse-topics.json"
#: Commits searched, newest first, for the pipeline's last one.
_HISTORY: Final = 100


def read_text(path: str) -> str | None:
    """The text of a file under a local path or a URI (``file:``, ``s3://``, ...); None when
    it cannot be read."""
    try:
        fs, inner = filesystem(path)
        with fs.open_input_stream(inner) as f:
            data: bytes = f.read()
        return data.decode("utf-8")
    except (OSError, ValueError):
        return None


def _offset_batches(checkpoint: str) -> list[int] | None:
    """The batch ids in the query's write-ahead offsets log (``<checkpoint>/offsets``),
    ascending; None when the log cannot be read."""
    import pyarrow.fs as pafs

    try:
        fs, inner = filesystem(f"{checkpoint.rstrip('/')}/offsets")
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    except (OSError, ValueError):
        return None
    return sorted(int(i.base_name) for i in infos if i.base_name.isdigit())


def has_offsets(checkpoint: str) -> bool:
    """Whether Spark has planned a batch in ``checkpoint`` (its ``offsets`` log has an entry);
    True when that cannot be read (callers then assume the checkpoint is in use)."""
    batches = _offset_batches(checkpoint)
    return batches is None or bool(batches)


def checkpoint_id(checkpoint: str) -> str | None:
    """Spark's query id kept in ``<checkpoint>/metadata`` (written when a query first starts
    from the checkpoint, kept by every restart), or None for a checkpoint no query has run
    from."""
    text = read_text(f"{checkpoint.rstrip('/')}/metadata")
    if not text:
        return None
    try:
        value = json.loads(text.splitlines()[0]).get("id")
    except (ValueError, AttributeError, IndexError):
        return None
    return str(value) if value else None


def binding_metadata(checkpoint: str) -> dict[str, str]:
    """The metadata every commit of a job running from ``checkpoint`` carries (read once the
    query has started, when Spark has written the checkpoint's id)."""
    meta = {META_CHECKPOINT: checkpoint}
    found = checkpoint_id(checkpoint)
    if found is not None:
        meta[META_CHECKPOINT_ID] = found
    return meta


@dataclass(frozen=True, slots=True, kw_only=True)
class Binding:
    """What one table says about a pipeline id: the last batch it committed and the checkpoint
    of its newest commit (None for commits from before the binding existed)."""

    table: str
    last_batch: int | None
    checkpoint_id: str | None
    checkpoint: str | None


def binding_problem(
    binding: Binding, *, pipeline_id: str, checkpoint: str, current_id: str | None
) -> str | None:
    """Why a job running from ``checkpoint`` (Spark's id ``current_id``, None when new) must not
    write ``binding.table`` under ``pipeline_id``, or None when it may.

    >>> b = Binding(table="out", last_batch=41, checkpoint_id="a1", checkpoint="/ck/join")
    >>> binding_problem(b, pipeline_id="p", checkpoint="/ck/join", current_id="a1") is None
    True
    >>> import textwrap
    >>> problem = binding_problem(b, pipeline_id="p", checkpoint="/ck/new", current_id=None)
    >>> print(textwrap.fill(problem, 88))
    pipeline 'p' has committed batches up to 41 to out from /ck/join, and the checkpoint
    /ck/new is new: its batch ids start again at 0, so every batch up to 41 would be skipped
    as already committed. To continue the pipeline, run it from /ck/join; to start over on
    purpose, give it a new pipeline_id (the rows already written stay)
    >>> fresh = Binding(table="out", last_batch=None, checkpoint_id=None, checkpoint=None)
    >>> binding_problem(fresh, pipeline_id="p", checkpoint="/ck/new", current_id=None) is None
    True
    """
    if binding.last_batch is None:
        return None
    if current_id is not None and current_id == binding.checkpoint_id:
        return None
    if current_id is not None and binding.checkpoint_id is None:
        return None  # written before commits named their checkpoint: nothing to compare
    origin = binding.checkpoint or "another checkpoint"
    if current_id is None:
        what = f"the checkpoint {checkpoint} is new: its batch ids start again at 0"
    else:
        what = (
            f"the checkpoint {checkpoint} is another one (query id {current_id}, the table's "
            f"commits name {binding.checkpoint_id}): its batch ids are not the pipeline's"
        )
    keep = f"run it from {binding.checkpoint}" if binding.checkpoint else "restore its checkpoint"
    return (
        f"pipeline {pipeline_id!r} has committed batches up to {binding.last_batch} to "
        f"{binding.table} from {origin}, and {what}, so every batch up to "
        f"{binding.last_batch} would be skipped as already committed. To continue the "
        f"pipeline, {keep}; to start over on purpose, give it a new pipeline_id (the rows "
        "already written stay)"
    )


def _binding(uri: str, pipeline_id: str) -> Binding:
    from lakehouse import delta

    snap = delta.snapshot(uri)
    if not snap.exists:
        return Binding(table=uri, last_batch=None, checkpoint_id=None, checkpoint=None)
    last = snap.transaction_version(pipeline_id)
    newest = snap.find(_HISTORY, pipeline=pipeline_id) if last is not None else None
    meta = newest.metadata if newest is not None else {}
    return Binding(
        table=uri,
        last_batch=last,
        checkpoint_id=meta.get(META_CHECKPOINT_ID),
        checkpoint=meta.get(META_CHECKPOINT),
    )


def check_binding(checkpoint: str, pipeline_id: str, tables: Iterable[str]) -> None:
    """Refuse, before the query starts, a checkpoint that is not the one ``pipeline_id`` has
    committed to ``tables`` from (see the module docstring).

    Raises:
        DataSafetyError: naming the table, the last batch, both checkpoints and the two ways
            on.
    """
    current = checkpoint_id(checkpoint)
    for uri in tables:
        problem = binding_problem(
            _binding(uri, pipeline_id),
            pipeline_id=pipeline_id,
            checkpoint=checkpoint,
            current_id=current,
        )
        if problem is not None:
            raise DataSafetyError(problem, table_uri=uri)


def recreated_topics(
    recorded: dict[str, str], current: dict[str, str]
) -> dict[str, tuple[str, str]]:
    """The topics whose id changed: ``{topic: (recorded id, current id)}``. A topic without a
    recorded or a current id cannot be compared and is left out.

    >>> recreated_topics({"a": "x1", "b": "y1"}, {"a": "x1", "b": "y2", "c": "z1"})
    {'b': ('y1', 'y2')}
    """
    return {
        t: (old, current[t])
        for t, old in sorted(recorded.items())
        if t in current and current[t] != old
    }


def check_topics(checkpoint: str, current: dict[str, str], *, on_recreated: str = "fail") -> None:
    """Compare the topics' ids with those the checkpoint's offsets were recorded against, then
    record the current ones (a topic seen for the first time is recorded as it is).

    Raises:
        DataSafetyError: a topic was recreated and ``on_recreated`` is ``"fail"``.
    """
    path = f"{checkpoint.rstrip('/')}/{TOPICS_FILE}"
    text = read_text(path)
    try:
        recorded = dict(json.loads(text)) if text else {}
    except (ValueError, TypeError):
        recorded = {}
    changed = recreated_topics(recorded, current)
    if changed and on_recreated != "continue" and has_offsets(checkpoint):
        listed = ", ".join(f"{t!r} (id {old} -> {new})" for t, (old, new) in changed.items())
        raise DataSafetyError(
            f"Kafka topic(s) {listed} were deleted and created again since the checkpoint "
            f"{checkpoint} recorded its offsets: continuing would silently skip the new "
            "topic's records below those offsets. To read the new topic from its start, run "
            "with a new checkpoint and a new pipeline_id (starting_offsets = earliest); to go "
            "on from the recorded offsets on purpose, set kafka.on_recreated_topic = "
            '"continue"'
        )
    merged = {**recorded, **current}
    if merged == recorded:
        return
    fs, inner = filesystem(path)
    fs.create_dir(inner.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(inner) as f:
        f.write(json.dumps(merged, sort_keys=True).encode("utf-8"))
