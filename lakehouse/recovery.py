"""Damaged state: found before a job starts, named in one line, repaired by ``lakehouse repair``.

A crash never damages a file lakehouse or Spark writes: both write a file whole or not at all
(a rename on a filesystem, a single PUT on an object store). What does are the things around
them: a full disk under a filesystem without atomic rename, a copy or a restore cut short, a
storage fault. Two kinds of file matter, and for each only the newest ones are read when a job
starts, so only those are checked:

* **the checkpoint**: ``metadata`` (Spark's query id), the newest two entries of ``offsets/``
  (the newest batch's planned offsets and its predecessor's, where a replay starts) and the
  newest of ``commits/`` (the last batch Spark finished);
* **each table the job writes or reads**: the newest commit of ``_delta_log/`` (Delta reads
  every commit after its last checkpoint, and the newest is the one a torn write leaves) and
  ``_delta_log/_last_checkpoint``.

:func:`check` runs before every ``lakehouse ingest``/``join`` (in :mod:`lakehouse.runner`)
and refuses to start on the first damage it finds, with :class:`~lakehouse.errors.
DamagedStateError`: the file, what is wrong, and the command that repairs it.
:func:`plan_repair` decides the repair from what is on storage, and :func:`apply` carries it
out; nothing is deleted, a damaged file is *set aside* into ``<table>/_lakehouse/damaged/``
or ``<checkpoint>/damaged/``. The rules, each keeping exactly-once whole
(docs/concepts/exactly-once.md):

* a damaged newest ``commits/N``: set aside. Spark then runs batch ``N`` again from its
  offsets; every table that holds it already skips it.
* a damaged newest ``offsets/N``: when no table holds batch ``N``, it (and its ``commits/N``)
  is set aside and Spark plans the batch again. When a table holds it, its offsets are lost
  and a replay could cover other records than the table holds: not repaired (restore the file
  from a backup, or start a new pipeline id and checkpoint from the offsets the tables record).
* a damaged ``metadata``: written again with the query id the tables' commits record for the
  pipeline (:data:`lakehouse.checkpoint.META_CHECKPOINT_ID`); without one, not repaired.
* a damaged newest commit ``V`` of a table the job writes: set aside (with its ``.crc``), so
  the table reads as of ``V - 1`` again, and Spark's record of the newest batch ``L``
  (``commits/L``) with it, so ``L`` runs again and writes what ``V`` held. That is exact when
  ``V`` was written during batch ``L`` or after it (its transaction or batch id says so, or,
  when it is unreadable, its modification time is not older than ``offsets/L``), or when it
  changed no rows (properties, the snapshot marker, ``OPTIMIZE``: the next start derives the
  marker again). A commit of an older batch is not repaired: Spark replays only its newest
  batch (restore the file from a backup).
* a damaged table the job only reads (the join's build table) is the ingest's to repair.
* a damaged ``_last_checkpoint``: set aside; Delta then finds its checkpoint by listing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from lakehouse.checkpoint import META_CHECKPOINT_ID
from lakehouse.errors import DamagedStateError
from lakehouse.storage import filesystem

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = [
    "DAMAGED_DIR",
    "Damage",
    "RepairPlan",
    "Step",
    "apply",
    "check",
    "inspect",
    "plan_repair",
]

#: Where a repair sets damaged files aside: ``<table>/_lakehouse/damaged`` (Delta ignores
#: ``_``-prefixed folders) and ``<checkpoint>/damaged`` (Spark reads only its own folders).
DAMAGED_DIR: Final = "damaged"
_TABLE_ASIDE: Final = f"_lakehouse/{DAMAGED_DIR}"
#: Commits that change no rows: setting one aside loses nothing a replay must bring back.
_NO_ROWS_OPERATIONS: Final = frozenset(
    {"SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "OPTIMIZE", "VACUUM START", "VACUUM END"}
)

DamageKind = Literal["metadata", "offsets", "commits", "delta commit", "last checkpoint"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Damage:
    """A file a job reads at start that does not parse.

    Attributes:
        path: the file.
        problem: what is wrong with it, in a few words.
        owner: the checkpoint or the table it belongs to.
        kind: which file of the checkpoint or the table it is.
        number: the batch id (``offsets``, ``commits``) or the table version (``delta
            commit``); None for the others.
    """

    path: str
    problem: str
    owner: str
    kind: DamageKind
    number: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    """One action of a repair.

    Attributes:
        action: ``set_aside`` (move ``path`` to ``target``) or ``write`` (``path`` gets
            ``text``).
        path: the file acted on.
        why: the reason, one sentence.
    """

    action: Literal["set_aside", "write"]
    path: str
    why: str
    target: str | None = None
    text: str | None = None

    def describe(self) -> str:
        """The step as one line."""
        if self.action == "write":
            return f"write {self.path}: {self.why}"
        return f"set aside {self.path} (to {self.target}): {self.why}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RepairPlan:
    """What :func:`plan_repair` found and decided.

    Attributes:
        damage: every damaged file found.
        steps: the repair, in order (empty when nothing is damaged or nothing can be done).
        unrepairable: one sentence per damage lakehouse does not repair, with the way by
            hand; when not empty, :func:`apply` refuses the whole plan.
    """

    damage: tuple[Damage, ...]
    steps: tuple[Step, ...]
    unrepairable: tuple[str, ...]


# ------------------------------------------------------------------------------ storage


def _join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def _listing(directory: str) -> dict[str, pafs.FileInfo]:
    """The files directly in ``directory`` by name (empty when it does not exist)."""
    import pyarrow.fs as pafs

    fs, inner = filesystem(directory)
    infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    return {i.base_name: i for i in infos if i.type == pafs.FileType.File}


def _read(path: str) -> bytes:
    fs, inner = filesystem(path)
    with fs.open_input_stream(inner) as f:
        data: bytes = f.read()
    return data


def _numbered(listing: dict[str, pafs.FileInfo], suffix: str = "") -> list[int]:
    """The numbers of ``N<suffix>`` files, ascending."""
    out = []
    for name in listing:
        stem = name[: len(name) - len(suffix)] if suffix and name.endswith(suffix) else name
        if (not suffix or name.endswith(suffix)) and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def _mtime_ns(info: pafs.FileInfo) -> int | None:
    value = info.mtime_ns
    return int(value) if value is not None else None


# ------------------------------------------------------------------------------ parsing


def _json_problem(text: str) -> str | None:
    """Why ``text`` is not one JSON value (None when it is)."""
    try:
        json.loads(text)
    except ValueError as e:
        return f"not JSON ({e})"
    return None


def _log_entry_problem(data: bytes, *, lines: int | None) -> str | None:
    """Why a Spark metadata-log entry (``v1`` then JSON lines) does not parse; ``lines``: how
    many JSON lines it must have at least."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    parts = text.split("\n")
    if not parts or not parts[0].startswith("v") or not parts[0][1:].isdigit():
        return f"no version line (starts {text[:20]!r})" if text else "empty"
    body = [p for p in parts[1:] if p.strip()]
    for i, line in enumerate(body, start=2):
        problem = _json_problem(line)
        if problem is not None:
            return f"line {i} is {problem}"
    if lines is not None and len(body) < lines:
        return f"cut short ({len(body)} of at least {lines} JSON lines)"
    return None


def _commit_problem(data: bytes) -> str | None:
    """Why a Delta commit (one JSON action per line) does not parse."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    lines = [line for line in text.split("\n") if line.strip()]
    if not lines:
        return "empty"
    for i, line in enumerate(lines, start=1):
        problem = _json_problem(line)
        if problem is not None:
            return f"action {i} of {len(lines)} is {problem}"
    return None


def _readable_actions(data: bytes) -> list[dict[str, object]]:
    """The actions of a (damaged) commit that still parse."""
    out = []
    for line in data.decode("utf-8", errors="replace").split("\n"):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


# ------------------------------------------------------------------------------ inspection


def _inspect_checkpoint(checkpoint: str) -> list[Damage]:
    found = []
    top = _listing(checkpoint)
    if "metadata" in top:
        path = _join(checkpoint, "metadata")
        text = _read(path).decode("utf-8", errors="replace")
        first = text.split("\n")[0]
        problem = _json_problem(first)
        if problem is None and not isinstance(json.loads(first), dict):
            problem = "not a JSON object"
        if problem is None and not json.loads(first).get("id"):
            problem = "no query id"
        if problem is not None:
            found.append(Damage(path=path, problem=problem, owner=checkpoint, kind="metadata"))
    offsets = _join(checkpoint, "offsets")
    batches = _numbered(_listing(offsets))
    for n in batches[-2:]:
        path = _join(offsets, str(n))
        problem = _log_entry_problem(_read(path), lines=2)
        if problem is not None:
            found.append(
                Damage(path=path, problem=problem, owner=checkpoint, kind="offsets", number=n)
            )
    commits = _join(checkpoint, "commits")
    done = _numbered(_listing(commits))
    if done:
        path = _join(commits, str(done[-1]))
        problem = _log_entry_problem(_read(path), lines=1)
        if problem is not None:
            found.append(
                Damage(
                    path=path, problem=problem, owner=checkpoint, kind="commits", number=done[-1]
                )
            )
    return found


def _infos(paths: Sequence[str]) -> dict[str, pafs.FileInfo]:
    """The files among ``paths`` that exist (one request per path on an object store, and
    never a listing: a table's log can hold hundreds of thousands of commits)."""
    import pyarrow.fs as pafs

    if not paths:
        return {}
    fs, _ = filesystem(paths[0])
    inner = [filesystem(p)[1] for p in paths]
    return {
        path: info
        for path, info in zip(paths, fs.get_file_info(inner), strict=True)
        if info.type == pafs.FileType.File
    }


def _read_commits(table: str) -> tuple[dict[int, pafs.FileInfo], str | None]:
    """The commits Delta reads to load ``table`` (those after its newest checkpoint, by
    version, with their file infos) and the path of its ``_last_checkpoint`` when it has one.

    Found as Delta finds them: from the version ``_last_checkpoint`` names, commit after
    commit until one is missing; a listing of the log only when that pointer is missing or
    damaged (then every commit after the newest checkpoint file)."""
    log = _join(table, "_delta_log")
    pointer = _join(log, "_last_checkpoint")
    found = _infos([pointer])
    start: int | None = None
    if found:
        try:
            start = int(json.loads(_read(pointer).decode("utf-8"))["version"]) + 1
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            start = None
    commits: dict[int, pafs.FileInfo] = {}
    if start is None:
        listing = _listing(log)
        checkpoints = [
            int(name.split(".", 1)[0])
            for name in listing
            if ".checkpoint" in name
            and name.endswith(".parquet")
            and name.split(".", 1)[0].isdigit()
        ]
        newest_checkpoint = max(checkpoints, default=-1)
        for version in _numbered(listing, ".json"):
            if version > newest_checkpoint:
                commits[version] = listing[f"{version:020d}.json"]
        return commits, pointer if found else None
    while True:
        window = list(range(start, start + 32))
        infos = _infos([_commit_path(table, v) for v in window])
        for v in window:
            info = infos.get(_commit_path(table, v))
            if info is None:
                return commits, pointer
            commits[v] = info
        start += 32


def _commit_path(table: str, version: int) -> str:
    return _join(table, "_delta_log", f"{version:020d}.json")


def _inspect_table(table: str) -> list[Damage]:
    commits, pointer = _read_commits(table)
    found = []
    if pointer is not None:
        problem = _json_problem(_read(pointer).decode("utf-8", errors="replace"))
        if problem is not None:
            found.append(Damage(path=pointer, problem=problem, owner=table, kind="last checkpoint"))
    for version in sorted(commits):
        path = _commit_path(table, version)
        problem = _commit_problem(_read(path))
        if problem is not None:
            found.append(
                Damage(path=path, problem=problem, owner=table, kind="delta commit", number=version)
            )
    return found


def inspect(checkpoint: str | None, tables: Iterable[str]) -> list[Damage]:
    """Every damaged file of ``checkpoint`` and ``tables`` that a job reads when it starts
    (module docstring). Missing files and folders are not damage (a new job has none)."""
    found = _inspect_checkpoint(checkpoint) if checkpoint else []
    for table in dict.fromkeys(tables):
        found += _inspect_table(table)
    return found


# ------------------------------------------------------------------------------ repair


def _aside(path: str, owner: str, *, table: bool) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    folder = _join(owner, _TABLE_ASIDE) if table else _join(owner, DAMAGED_DIR)
    return _join(folder, f"{path.rsplit('/', 1)[-1]}.{stamp}")


def _crc_of(path: str) -> list[str]:
    """The checksum files that go with ``path`` where they exist: Hadoop's local ``.N.crc``
    beside a checkpoint entry or commit, and Delta's ``V.crc`` beside commit ``V.json``."""
    directory, _, name = path.rpartition("/")
    names = [f".{name}.crc"]
    if name.endswith(".json"):
        stem = name.removesuffix(".json")
        names += [f"{stem}.crc", f".{stem}.crc.crc"]
    candidates = [_join(directory, n) for n in names]
    present = _infos(candidates)
    return [c for c in candidates if c in present]


def _set_aside(path: str, owner: str, why: str, *, table: bool) -> list[Step]:
    return [
        Step(action="set_aside", path=p, target=_aside(p, owner, table=table), why=why)
        for p in (path, *_crc_of(path))
    ]


def _recorded_batch(table: str, pipeline_id: str) -> int | None:
    """The newest batch of ``pipeline_id`` ``table`` records (its app transaction), read from
    its log through delta-rs (no Spark): None when it records none or cannot be opened."""
    from lakehouse.delta.inspect import open_view

    view = open_view(table)
    if view is None or not view.exists:
        return None
    return view.transaction_version(pipeline_id)


def _recorded_query_id(tables: Iterable[str], pipeline_id: str) -> str | None:
    """The checkpoint's query id the newest commit of ``pipeline_id`` in ``tables`` records."""
    from lakehouse.delta.inspect import open_view

    best: tuple[int, str] | None = None
    for table in tables:
        view = open_view(table)
        if view is None or not view.exists:
            continue
        for found in view.commits(100):
            if found.metadata.get("lakehouse.pipeline") != pipeline_id:
                continue
            if found.metadata.get(META_CHECKPOINT_ID):
                stamp = found.timestamp_ms
                if best is None or stamp > best[0]:
                    best = (stamp, found.metadata[META_CHECKPOINT_ID])
                break
    return best[1] if best else None


def _commit_batch(data: bytes, pipeline_id: str) -> tuple[int | None, str | None]:
    """What a damaged commit still says: the batch of ``pipeline_id`` it committed (its
    transaction, or its commit metadata) and its operation."""
    batch: int | None = None
    operation: str | None = None
    for action in _readable_actions(data):
        txn = action.get("txn")
        if isinstance(txn, dict) and txn.get("appId") == pipeline_id:
            batch = int(str(txn.get("version")))
        info = action.get("commitInfo")
        if isinstance(info, dict):
            operation = str(info.get("operation") or "") or None
            meta = info.get("userMetadata")
            try:
                keys = json.loads(meta) if isinstance(meta, str) else {}
            except ValueError:
                keys = {}
            if keys.get("lakehouse.pipeline") == pipeline_id and batch is None:
                value = str(keys.get("lakehouse.batchId", ""))
                batch = int(value) if value.isdigit() else None
    return batch, operation


def plan_repair(
    *,
    checkpoint: str,
    pipeline_id: str,
    tables: Sequence[str],
    read_tables: Sequence[str] = (),
) -> RepairPlan:
    """Find the damage of a job (its checkpoint, the ``tables`` it writes, in the order each
    batch writes them, and the ``read_tables`` it only reads) and decide its repair (the
    rules of the module docstring). Reads storage only; changes nothing."""
    damage = inspect(checkpoint, [*tables, *read_tables])
    steps: list[Step] = []
    unrepairable: list[str] = []
    offsets_dir, commits_dir = _join(checkpoint, "offsets"), _join(checkpoint, "commits")
    offsets_listing = _listing(offsets_dir)
    batches = _numbered(offsets_listing)
    newest = batches[-1] if batches else None
    commits_listing = _listing(commits_dir)
    bad_offsets = {d.number for d in damage if d.kind == "offsets"}

    for d in damage:
        if d.kind == "commits":
            steps += _set_aside(
                d.path,
                checkpoint,
                "Spark runs the batch again; tables holding it skip it",
                table=False,
            )
        elif d.kind == "offsets" and d.number is not None:
            holders = [t for t in tables if (_recorded_batch(t, pipeline_id) or -1) >= d.number]
            if d.number != newest:
                unrepairable.append(
                    f"{d.path} ({d.problem}) is the offsets of batch {d.number}, where a replay "
                    f"of batch {newest} starts; restore it from a backup"
                )
            elif holders:
                unrepairable.append(
                    f"{d.path} ({d.problem}): batch {d.number} is committed to {holders[0]}, so "
                    "its offsets cannot be planned again; restore the file from a backup, or "
                    "run the pipeline from a new checkpoint and pipeline_id starting at the "
                    "offsets its tables record"
                )
            else:
                why = f"no table holds batch {d.number}: Spark plans it again"
                steps += _set_aside(d.path, checkpoint, why, table=False)
                if str(d.number) in commits_listing:
                    steps += _set_aside(
                        _join(commits_dir, str(d.number)), checkpoint, why, table=False
                    )
                # the batch Spark runs again, if any, is the one before
                newest = batches[-2] if len(batches) > 1 else None
        elif d.kind == "metadata":
            query_id = _recorded_query_id(tables, pipeline_id)
            if query_id is None:
                unrepairable.append(
                    f"{d.path} ({d.problem}): no table records the query id of pipeline "
                    f"{pipeline_id!r}; restore the file from a backup"
                )
            else:
                steps += _set_aside(d.path, checkpoint, "written again below", table=False)
                steps.append(
                    Step(
                        action="write",
                        path=d.path,
                        text=json.dumps({"id": query_id}),
                        why=f"the query id the tables' commits record ({query_id})",
                    )
                )
        elif d.kind == "last checkpoint":
            steps += _set_aside(
                d.path, d.owner, "Delta finds its checkpoint by listing the log", table=True
            )
        elif d.owner not in tables:  # a damaged table the job only reads
            unrepairable.append(
                f"{d.path} ({d.problem}) belongs to {d.owner}, which this job only reads; "
                "repair it with the job that writes it (lakehouse repair ingest)"
            )

    damaged_from: dict[str, int] = {}
    for d in damage:
        if d.kind == "delta commit" and d.owner in tables and d.number is not None:
            damaged_from[d.owner] = min(d.number, damaged_from.get(d.owner, d.number))
    if damaged_from:
        rolled, why_not = _roll_back(
            tables, damaged_from, pipeline_id, newest, offsets_listing.get(str(newest))
        )
        unrepairable += why_not
        replays = False
        for table, commits in rolled.items():
            back = f"version {commits[0].version - 1}" if commits[0].version else "no commit"
            for c in commits:
                path = _commit_path(table, c.version)
                reason = (
                    "damaged"
                    if any(d.path == path for d in damage)
                    else "written after the damaged commit"
                )
                if c.batch is None and c.operation in _NO_ROWS_OPERATIONS:
                    then = "it changed no rows (the next start derives it again)"
                else:
                    then = f"batch {newest} runs again and writes what it held"
                    replays = True
                if c.damaged and c.batch is None and c.operation is None:
                    then += (
                        " (nothing of it is readable: taken for the newest batch's by its "
                        "modification time)"
                    )
                steps += _set_aside(
                    path,
                    table,
                    f"{reason}; the table reads as of {back} again, and {then}",
                    table=True,
                )
        last_commit = _join(commits_dir, str(newest))
        if (
            replays
            and newest is not None
            and newest not in bad_offsets
            and str(newest) in commits_listing
            and last_commit not in {s.path for s in steps}
        ):
            steps += _set_aside(
                last_commit,
                checkpoint,
                f"batch {newest} runs again (a table lost its commit of it)",
                table=False,
            )
    return RepairPlan(damage=tuple(damage), steps=tuple(steps), unrepairable=tuple(unrepairable))


@dataclass(frozen=True, slots=True)
class _Commit:
    """What a commit of a table says about itself, as far as it can be read."""

    version: int
    batch: int | None  # the pipeline's batch it holds (its transaction, else its metadata)
    operation: str | None
    damaged: bool
    mtime_ns: int | None


def _commits(table: str, pipeline_id: str) -> list[_Commit]:
    """The commits Delta reads to load ``table`` (after its newest checkpoint), ascending."""
    commits, _ = _read_commits(table)
    out = []
    for version, info in sorted(commits.items()):
        data = _read(_commit_path(table, version))
        batch, operation = _commit_batch(data, pipeline_id)
        out.append(
            _Commit(version, batch, operation, _commit_problem(data) is not None, _mtime_ns(info))
        )
    return out


def _roll_back(
    tables: Sequence[str],
    damaged_from: dict[str, int],
    pipeline_id: str,
    newest: int | None,
    started: pafs.FileInfo | None,
) -> tuple[dict[str, list[_Commit]], list[str]]:
    """Which commits to set aside so that every table reads as before batch ``newest`` wrote
    it, where one of them must: each damaged table from its first damaged commit on, and,
    once a table loses its commit of the newest batch, every table the batch writes after it
    from its commit of that batch on (a replay skips a table that holds the batch, and the
    job reads a later table's commit as proof that the earlier ones hold it too).

    Every commit set aside must be one the newest batch's replay writes again: of that batch,
    or (unreadable) written after the batch started, or one that changed no rows. Returns the
    commits per table, and why a rollback is refused (then nothing is rolled back)."""
    planned = _mtime_ns(started) if started is not None else None
    rolled: dict[str, list[_Commit]] = {}
    problems: list[str] = []
    cascading = False
    for table in tables:  # in the order a batch writes them
        commits = _commits(table, pipeline_id)
        first = damaged_from.get(table)
        if cascading and newest is not None:
            of_newest = [c.version for c in commits if c.batch == newest]
            if of_newest:
                first = min(first, of_newest[0]) if first is not None else of_newest[0]
        if first is None:
            continue
        chosen = [c for c in commits if c.version >= first]
        for c in chosen:
            why = _not_replayed(c, newest, planned)
            if why is not None:
                problems.append(
                    f"{_commit_path(table, c.version)} {why}; restore the damaged file from a "
                    "backup"
                )
        rolled[table] = chosen
        cascading = cascading or any(
            c.batch == newest or (c.batch is None and c.operation not in _NO_ROWS_OPERATIONS)
            for c in chosen
        )
    return ({} if problems else rolled), problems


def _not_replayed(c: _Commit, newest: int | None, planned_ns: int | None) -> str | None:
    """Why setting commit ``c`` aside would lose what a replay of batch ``newest`` does not
    write again (None when it does not)."""
    if c.batch is not None:
        if newest is not None and c.batch < newest:
            return (
                f"holds batch {c.batch}, and the checkpoint has moved on to batch {newest} "
                "(Spark replays only its newest batch)"
            )
        return None
    if c.operation in _NO_ROWS_OPERATIONS:
        return None
    if newest is None:
        return None
    if c.damaged and c.mtime_ns is not None and planned_ns is not None:
        if c.mtime_ns >= planned_ns:
            # written while the newest batch ran, or after it (told by its time alone: a
            # file copied back later has its copy's time, which the docs warn about)
            return None
        return f"was written before batch {newest} started and does not say which batch it held"
    if not c.damaged:
        return f"is a {c.operation or 'commit'} of another writer, which a replay does not redo"
    return "does not say which batch it held"


def apply(plan: RepairPlan) -> None:
    """Carry out ``plan``'s steps in order.

    Raises:
        DamagedStateError: the plan holds damage lakehouse does not repair (nothing is done).
    """
    if plan.unrepairable:
        raise DamagedStateError(
            "not repaired: " + "; ".join(plan.unrepairable), path=plan.damage[0].path
        )
    for step in plan.steps:
        fs, inner = filesystem(step.path)
        if step.action == "set_aside":
            assert step.target is not None
            target_fs, target = filesystem(step.target)
            target_fs.create_dir(target.rpartition("/")[0], recursive=True)
            fs.move(inner, target)
        else:
            assert step.text is not None
            with fs.open_output_stream(inner) as f:
                f.write(step.text.encode("utf-8"))


def check(
    checkpoint: str | None, tables: Sequence[str], read_tables: Sequence[str], *, repair: str
) -> None:
    """Refuse to start a job whose checkpoint or tables hold damage (one line: the file, what
    is wrong, and ``repair``, the command that repairs it).

    Raises:
        DamagedStateError: on the first damage found.
    """
    damage = inspect(checkpoint, [*tables, *read_tables])
    if damage:
        d = damage[0]
        more = f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""
        raise DamagedStateError(
            f"{d.kind} file {d.path} of {d.owner} is damaged: {d.problem}{more}. See what "
            f"`{repair}` would do, then run it with --apply (docs/operations/recovery.md)",
            path=d.path,
        )
