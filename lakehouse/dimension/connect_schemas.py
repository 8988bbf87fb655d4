"""The Connect schemas a build table's records carried: kept, so that a record without one is
read with its table's.

In a stream with Connect schemas (``schemas.enable=true``) one record can come without its
schema: a producer, an SMT or a replay tool that drops the wrapper. Its values are JSON without
types (a decimal is base64 text, a timestamp a number of microseconds), and typed from the
values alone they would contradict the table (``decimal(10,2) -> string``) and block it. They
are exactly what the table's schema says they are, so they are read with it: the Connect
envelope schema of the newest record of the same source table that had one.

Where the schemas are kept: each distinct schema text once, content-addressed, in
``<table>/_lakehouse/connect-schemas/<sha256>.json`` (Delta ignores ``_``-prefixed folders), and
in the table property :data:`~lakehouse.dimension.layout.PROP_CONNECT_SCHEMAS` which of them
is the newest per source table: ``{"batchId": B, "before": {table: hash}, "after": {table:
hash}}``. Batch ``B`` wrote it, *before* its data commit; so a batch decodes starting from
``after``, except batch ``B`` itself on replay, which starts from ``before``: the records of a
batch are decoded with the same schemas however often it runs. Within a batch, each Spark
partition moves on to a newer schema as soon as one of its records carries it (stream order).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from lakehouse.dimension.layout import PROP_CONNECT_SCHEMAS
from lakehouse.storage import filesystem

#: Folder, under the table, of the schema files.
SCHEMA_DIR: Final = "_lakehouse/connect-schemas"


def schema_hash(text: str) -> str:
    """The name a schema text is kept under.

    >>> schema_hash('{"type":"struct"}')[:12]
    'f81fd2a263f6'
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Recorded:
    """The table property's value: which schema is the newest per source table."""

    batch_id: int | None = None
    before: Mapping[str, str] = field(default_factory=dict)
    after: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> Recorded:
        """The property's value (empty when unset or unreadable: records are then typed from
        their values, as before schemas were kept)."""
        try:
            value = json.loads(text or "{}")
            batch = value.get("batchId")
            return cls(
                batch_id=int(batch) if batch is not None else None,
                before={str(k): str(v) for k, v in (value.get("before") or {}).items()},
                after={str(k): str(v) for k, v in (value.get("after") or {}).items()},
            )
        except (ValueError, TypeError, AttributeError):
            return cls()

    def start(self, batch_id: int) -> Mapping[str, str]:
        """The schemas batch ``batch_id`` decodes with at its start (module docstring)."""
        return self.before if self.batch_id == batch_id else self.after

    def to_json(self) -> str:
        return json.dumps(
            {"batchId": self.batch_id, "before": dict(self.before), "after": dict(self.after)},
            sort_keys=True,
        )


def decide(recorded: Recorded, batch_id: int, newest: Mapping[str, str]) -> str | None:
    """The property batch ``batch_id`` sets before its data commit, or None when it changes
    nothing: ``newest`` are the hashes of the batch's newest schema per source table.

    >>> r = Recorded(3, {}, {"public.t": "a"})
    >>> decide(r, 4, {"public.t": "a"}) is None
    True
    >>> Recorded.parse(decide(r, 4, {"public.t": "b"})).after
    {'public.t': 'b'}
    >>> decide(Recorded(4, {"public.t": "a"}, {"public.t": "b"}), 4, {"public.t": "b"}) is None
    True
    """
    start = recorded.start(batch_id)
    after = {**start, **newest}
    if after == dict(recorded.after):  # nothing new; or a replay whose first attempt set it
        return None
    return Recorded(batch_id, dict(start), after).to_json()


def _path(uri: str, digest: str) -> str:
    return f"{uri.rstrip('/')}/{SCHEMA_DIR}/{digest}.json"


#: Schema texts already read, by hash: a hash names one text wherever it is kept, so a batch
#: reads a table's schema file only the first time (bounded: a few schemas per table).
_READ: dict[str, str] = {}
_READ_MAX: Final = 256


def load(uri: str, hashes: Mapping[str, str]) -> dict[str, str]:
    """The schema texts of ``hashes`` (source table -> hash), read from the table's folder
    (once per process and hash); a missing or unreadable file leaves its table out (its
    records are typed from values)."""
    out: dict[str, str] = {}
    for table, digest in hashes.items():
        if digest in _READ:
            out[table] = _READ[digest]
            continue
        try:
            fs, inner = filesystem(_path(uri, digest))
            with fs.open_input_stream(inner) as f:
                text = f.read().decode("utf-8")
        except (OSError, ValueError):
            continue
        if schema_hash(text) == digest:  # a torn file is not a schema
            out[table] = text
            if len(_READ) >= _READ_MAX:
                _READ.clear()
            _READ[digest] = text
    return out


def store(uri: str, texts: Mapping[str, str]) -> dict[str, str]:
    """Write the schema texts not yet kept (idempotent); returns source table -> hash."""
    import pyarrow.fs as pafs

    out = {}
    for table, text in texts.items():
        digest = schema_hash(text)
        fs, inner = filesystem(_path(uri, digest))
        if fs.get_file_info(inner).type != pafs.FileType.File:
            fs.create_dir(inner.rpartition("/")[0], recursive=True)
            with fs.open_output_stream(inner) as f:
                f.write(text.encode("utf-8"))
        out[table] = digest
    return out


def newest_in_batch(
    summary: list[dict[str, Any]],
    start: Mapping[str, str] | None = None,
    marks: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The newest schema text per source table among the batch's records that carried one
    (:func:`lakehouse.dimension.summary.summarise`'s ``schema`` of each group: by connector
    position, then offset). A record the JVM decoded says ``''`` for its table's schema at the
    start of the batch (``start``) and a mark for another (``marks``, see
    :func:`lakehouse.dimension.jvm_decode.schema_mark`).

    >>> newest_in_batch([{"_source_table": "t", "schema": ("1", 0, 5, "")}], {"t": "S"})
    {'t': 'S'}
    >>> newest_in_batch([{"_source_table": "t", "schema": ("1", 0, 5, "#a")}], {}, {"#a": "T"})
    {'t': 'T'}
    """
    best: dict[str, tuple[Any, ...]] = {}
    for entry in summary:
        found = entry.get("schema")
        table = entry.get("_source_table")
        if found is None or table is None:
            continue
        if table not in best or tuple(found[:-1]) > best[table][:-1]:
            best[table] = tuple(found)
    out = {}
    for table, found in best.items():
        text = str(found[-1])
        if not text:
            text = (start or {}).get(table, "")
        elif text.startswith("#"):  # a schema text never starts with '#'
            text = (marks or {}).get(text, "")
        if text:
            out[table] = text
    return out


def recorded(props: Mapping[str, str]) -> Recorded:
    """The table's recorded schemas (see :class:`Recorded`)."""
    return Recorded.parse(props.get(PROP_CONNECT_SCHEMAS))
