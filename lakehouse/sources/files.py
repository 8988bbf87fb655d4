"""A JSON-lines directory streaming source with the raw Kafka schema.

The directory is an append-only log of files. Usage (after
:func:`lakehouse.sources.register_sources`)::

    df = (spark.readStream.format("lakehouse-files")
          .option("topic", "dbserver1.inventory.customers")   # default: directory name
          .load("/data/landing/customers"))

The log:

* Files whose names end in ``.jsonl``, ``.json``, ``.jsonl.gz`` or ``.json.gz`` are read,
  in name order (Python string order). Names starting with ``.`` or ``_`` are ignored.
* A file is complete when it appears: write it under an ignored name (``.part-0007.jsonl``
  or ``part-0007.jsonl.tmp``) and rename it into place, which is atomic on one filesystem.
* A new file must sort after every file already consumed. A file that sorts before the
  consumed prefix fails the query with a :class:`SourceError` naming it; it is never
  skipped or read out of order. Consumed files must not be changed, removed or renamed.
* Each non-blank line of a file is one record. Every process reads the same path, so on a
  cluster use a filesystem all nodes mount (e.g. ``/dbfs/...``).

Two formats (option ``format``), one schema (:data:`~lakehouse.sources.schema.RAW_SCHEMA`):

``lines`` (default)
    ``value`` is the line's bytes without the line break; ``key`` is null; ``partition`` is
    the file's position in the sorted listing (0 for the first file ever consumed, so each
    file is its own ordered partition and ``(partition, offset)`` orders all records);
    ``offset`` is the 0-based line number in the file (blank lines are skipped, leaving a
    gap); ``timestamp`` is the file's modification time with ``timestampType`` 1 (log
    append time). A tombstone is the text ``null``: the line is kept as bytes and the CDC
    decoder reads ``null`` as a tombstone.
``envelope``
    Each line is ``{"key": str|null, "value": str|object|null, "partition": int,
    "offset": int, "timestamp": ms|null}`` (optional ``"timestampType"``, default 0;
    other keys are ignored). Key and partition, offset and timestamp come from the line, so
    a captured partitioned topic replays faithfully; a string ``value`` is used as is
    (UTF-8), an object or array is re-serialised as compact JSON, null is a tombstone.

The stream's offset is ``{"files": N, "lastFile": name}``: the first ``N`` files in name
order have been consumed, the last of them being ``name`` (absent when ``N`` is 0). The
name lets the source detect a file inserted before the consumed prefix. Option
``maxFilesPerTrigger`` caps the files per micro-batch.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final, Literal, cast

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

try:  # pyspark 4.1+: admission control and Trigger.AvailableNow for Python streaming sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxFiles,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # pyspark 4.0: latestOffset() takes no arguments, caps cannot be asked for
    ADMISSION_CONTROL = False
    ReadLimit = ReadAllAvailable = ReadMaxFiles = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Spark 4.0 has no such interface: an available-now run wraps the source and takes
        the offset :meth:`FilesStreamReader.latestOffset` gives at its start as its end."""


from lakehouse.errors import ConfigError, SourceError
from lakehouse.sources._batches import RawBatchBuilder
from lakehouse.sources.schema import (
    RAW_SCHEMA,
    TIMESTAMP_TYPE_CREATE_TIME,
    TIMESTAMP_TYPE_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_NONE,
    check_raw_schema,
)

if TYPE_CHECKING:
    import pyarrow as pa

#: The format name to use with ``spark.readStream.format(...)``.
FILES_SOURCE_NAME: Final = "lakehouse-files"

#: File name endings the source reads.
LOG_FILE_SUFFIXES: Final = (".jsonl", ".json", ".jsonl.gz", ".json.gz")

FileFormat = Literal["lines", "envelope"]

_OPTIONS: Final = frozenset({"path", "topic", "format", "maxfilespertrigger"})


@dataclass(frozen=True, kw_only=True)
class FilesSourceOptions:
    """Validated options of one files stream; plain data, picklable.

    ``path`` is absolute; ``topic`` defaults to the directory's base name.
    """

    path: str
    topic: str
    format: FileFormat = "lines"
    max_files_per_trigger: int | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> FilesSourceOptions:
        """Validate Spark source options (case-insensitive keys); touches no file.

        Raises:
            ConfigError: ``path`` is missing or not a local path, an option is unknown,
                ``format`` is not ``lines``/``envelope``, or ``maxFilesPerTrigger`` is not
                a positive integer.
        """
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        for key in opts:
            if key not in _OPTIONS:
                raise ConfigError(
                    f"unknown option {key!r} for the {FILES_SOURCE_NAME} source; supported: "
                    "path (or load(path)), topic, format, maxFilesPerTrigger.",
                    setting=key,
                )
        raw_path = opts.get("path", "").strip()
        if not raw_path:
            raise ConfigError(
                f"the {FILES_SOURCE_NAME} source needs a directory: .load('/path/to/dir').",
                setting="path",
            )
        local = raw_path.removeprefix("file://") if raw_path.startswith("file://") else raw_path
        if "://" in local or local.startswith(("dbfs:", "s3:", "abfss:", "gs:")):
            raise ConfigError(
                f"{FILES_SOURCE_NAME} reads local or mounted directories only, got "
                f"{raw_path!r}; use a path every node mounts (e.g. /dbfs/...).",
                setting="path",
            )
        path = os.path.abspath(local)
        fmt = opts.get("format", "lines").strip().lower()
        if fmt not in ("lines", "envelope"):
            raise ConfigError(
                f"option 'format' must be 'lines' or 'envelope', got {opts['format']!r}.",
                setting="format",
            )
        max_files: int | None = None
        if "maxfilespertrigger" in opts:
            raw = opts["maxfilespertrigger"]
            max_files = int(raw) if raw.strip().isdigit() else 0
            if max_files <= 0:
                raise ConfigError(
                    f"option 'maxFilesPerTrigger' must be a positive integer, got {raw!r}.",
                    setting="maxFilesPerTrigger",
                )
            if not ADMISSION_CONTROL:
                raise ConfigError(
                    "option 'maxFilesPerTrigger' (max_records_per_trigger of a files source) "
                    "needs pyspark 4.1 or newer, whose Python sources can cap a micro-batch; "
                    "remove it, or run on Spark 4.1+",
                    setting="maxFilesPerTrigger",
                )
        topic = opts.get("topic") or os.path.basename(path.rstrip(os.sep))
        return cls(
            path=path,
            topic=topic,
            format="envelope" if fmt == "envelope" else "lines",
            max_files_per_trigger=max_files,
        )


def is_log_file(name: str) -> bool:
    """Whether a directory entry name belongs to the log (by suffix; not hidden).

    >>> [is_log_file(n) for n in ("a.jsonl", "b.json.gz", ".a.jsonl", "_tmp.json", "c.jsonl.tmp")]
    [True, True, False, False, False]
    """
    return name.endswith(LOG_FILE_SUFFIXES) and not name.startswith((".", "_"))


def list_log_files(directory: str) -> list[str]:
    """Return the names of the log files in ``directory``, sorted.

    Raises:
        SourceError: the directory does not exist or cannot be listed.
    """
    try:
        with os.scandir(directory) as entries:
            names = [e.name for e in entries if is_log_file(e.name) and e.is_file()]
    except FileNotFoundError as e:
        raise SourceError(
            f"directory {directory!r} (option 'path') does not exist; create it (it may be "
            "empty) or fix the path."
        ) from e
    except OSError as e:
        raise SourceError(f"cannot list directory {directory!r} (option 'path'): {e}") from e
    return sorted(names)


def _offset(names: list[str], count: int) -> dict[str, Any]:
    if count == 0:
        return {"files": 0}
    return {"files": count, "lastFile": names[count - 1]}


def _parse_offset(offset: Mapping[str, Any]) -> tuple[int, str | None]:
    count = offset.get("files")
    last = offset.get("lastFile")
    if not isinstance(count, int) or count < 0 or (count > 0 and not isinstance(last, str)):
        raise SourceError(
            f"stream offset {json.dumps(offset)} was not written by {FILES_SOURCE_NAME} "
            '(expected {"files": N, "lastFile": name}); is the checkpoint location shared '
            "with another query?"
        )
    return count, last


@dataclass(frozen=True)
class FileInputPartition(InputPartition):
    """One read task: one file of the log, with its index in the sorted listing."""

    index: int
    path: str


class FilesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans and reads micro-batches of a directory of JSON-lines files.

    Spark creates this reader in the planner (pickled into each read task; executors call
    :meth:`read`) and in the stream runner (offset methods, for the query's lifetime).
    The runner's instance remembers the file names it has listed, which lets it name a
    file inserted before the consumed prefix exactly; after a restart it names the most
    recently modified candidates instead. Everything needed for correctness is in the
    offsets Spark checkpoints.
    """

    def __init__(self, options: FilesSourceOptions) -> None:
        self._options = options
        self._known: set[str] = set()
        self._target: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_known"] = set()  # driver-only memory; keep read tasks small
        return state

    def _check_consumed(self, names: list[str], count: int, last: str | None) -> None:
        """Check that the first ``count`` names of the listing end with ``last``.

        Raises:
            SourceError: a file was inserted before ``last``, or a consumed file is gone.
        """
        if count == 0:
            return
        assert last is not None
        directory = self._options.path
        at_or_before = bisect.bisect_right(names, last)
        if at_or_before == count and names[count - 1] == last:
            return
        if at_or_before == 0 or names[at_or_before - 1] != last:
            raise SourceError(
                f"file {last!r}, the last file this query consumed from {directory!r}, is gone. "
                "Consumed files must not be removed or renamed while a query reads the "
                "directory (the stream's offsets count files in name order)."
            )
        if at_or_before < count:
            raise SourceError(
                f"{count - at_or_before} of the {count} files this query consumed from "
                f"{directory!r} (up to {last!r}) are gone. Consumed files must not be removed "
                "or renamed while a query reads the directory."
            )
        before = names[:at_or_before]
        inserted = [n for n in before if n not in self._known] if self._known else []
        qualifier = ""
        if not inserted:
            # No memory of earlier listings (e.g. right after a restart): name the most
            # recently modified candidates.
            by_mtime = sorted(before, key=lambda n: os.stat(os.path.join(directory, n)).st_mtime_ns)
            inserted = sorted(by_mtime[-(at_or_before - count) :])
            qualifier = " (most recently modified candidate)"
        raise SourceError(
            f"file {inserted[0]!r}{qualifier} appeared in {directory!r} but sorts before "
            f"{last!r}, the last file this query has consumed"
            + (f"; also {inserted[1:]}" if len(inserted) > 1 else "")
            + ". The directory is an append-only log read in name order: a new file must "
            "sort after every consumed file, or it would never be read. Rename it so it "
            f"sorts after {last!r} (e.g. with a larger sequence number or timestamp prefix), "
            "or move it out of the directory."
        )

    def initialOffset(self) -> dict[str, Any]:
        """``{"files": 0}``: a new query starts with the first file.

        Runs on the driver (stream runner) once, when a query starts without a
        checkpoint.

        Raises:
            SourceError: the directory does not exist.
        """
        list_log_files(self._options.path)
        return {"files": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        """``ReadMaxFiles(maxFilesPerTrigger)`` when set, else read all. Driver."""
        if self._options.max_files_per_trigger is not None:
            return ReadMaxFiles(self._options.max_files_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the current number of files as the end of an ``availableNow`` run.

        Runs on the driver (stream runner), once per run with ``trigger(availableNow=True)``.
        """
        self._target = len(list_log_files(self._options.path))

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, Any]:
        """Return the end of the next batch: all files listed now (capped by ``limit``).

        Runs on the driver (stream runner) once per trigger; not for a replayed batch.
        pyspark 4.0 calls it without arguments (no start, no cap): the consumed prefix is
        then checked when the batch is planned (:meth:`partitions`).

        Raises:
            SourceError: the directory is gone, a new file sorts before the consumed
                prefix, or a consumed file was removed.
        """
        count, last = _parse_offset(start) if start is not None else (0, None)
        names = list_log_files(self._options.path)
        self._check_consumed(names, count, last)
        self._known.update(names)
        available = len(names) if self._target is None else min(len(names), self._target)
        end = max(count, available)
        if ADMISSION_CONTROL and isinstance(limit, ReadMaxFiles):
            end = min(end, count + limit.max_files)
        return _offset(names, end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[FileInputPartition]:
        """One read task per file in ``[start, end)`` of the sorted listing.

        Runs on the driver (stream runner) for every batch, replays included. It lists the
        directory again and checks that both offsets still match it, so a replay reads the
        same files or fails.
        """
        start_count, start_last = _parse_offset(start)
        end_count, end_last = _parse_offset(end)
        names = list_log_files(self._options.path)
        self._check_consumed(names, end_count, end_last)
        self._check_consumed(names, start_count, start_last)
        return [
            FileInputPartition(i, os.path.join(self._options.path, names[i]))
            for i in range(start_count, end_count)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield one file's records as Arrow batches of the raw schema.

        Runs on an executor's Python worker, on the unpickled reader; again for a retried
        task or replayed batch, with the same result as long as the file is unchanged.

        Raises:
            SourceError: the file is gone or unreadable, or (envelope format) a line is not
                a valid envelope.
        """
        assert isinstance(partition, FileInputPartition)
        return _read_file(
            partition.path, partition.index, self._options.topic, self._options.format
        )

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the files are left in place. Runs on the driver after a batch."""


def _open(path: str) -> IO[bytes]:
    if path.endswith(".gz"):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


def _read_file(path: str, index: int, topic: str, fmt: FileFormat) -> Iterator[pa.RecordBatch]:
    builder = RawBatchBuilder(topic)
    try:
        mtime_us = os.stat(path).st_mtime_ns // 1000
        with _open(path) as fh:
            for number, raw in enumerate(fh):
                line = raw.rstrip(b"\r\n")
                if not line.strip():
                    continue
                if fmt == "lines":
                    batch = builder.append(
                        None, line, index, number, mtime_us, TIMESTAMP_TYPE_LOG_APPEND_TIME
                    )
                else:
                    batch = builder.append(*_parse_envelope(line, path, number))
                if batch is not None:
                    yield batch
    except FileNotFoundError as e:
        raise SourceError(
            f"file {path!r} of the log disappeared before it was read; consumed and planned "
            "files must not be removed or renamed."
        ) from e
    except (OSError, EOFError) as e:
        raise SourceError(f"cannot read file {path!r} of the log: {e}") from e
    last = builder.flush()
    if last is not None:
        yield last


def _parse_envelope(
    line: bytes, path: str, number: int
) -> tuple[bytes | None, bytes | None, int, int, int | None, int]:
    """Decode one envelope line into ``(key, value, partition, offset, ts_us, ts_type)``."""
    where = f"file {path!r} line {number + 1}"
    try:
        envelope = json.loads(line)
    except ValueError as e:
        raise SourceError(f"{where} is not a JSON envelope: {e}") from e
    if not isinstance(envelope, dict):
        raise SourceError(f"{where}: an envelope must be a JSON object, got {line[:80]!r}")

    def integer(name: str, *, required: bool) -> int | None:
        value = envelope.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise SourceError(f"{where}: envelope field {name!r} must be an integer, got {value!r}")
        return value

    partition = integer("partition", required=True)
    offset = integer("offset", required=True)
    assert partition is not None and offset is not None
    if partition < 0 or offset < 0:
        raise SourceError(f"{where}: envelope 'partition' and 'offset' must be >= 0")
    if "value" not in envelope:
        raise SourceError(f"{where}: envelope has no 'value' (use null for a tombstone)")
    key = envelope.get("key")
    if key is not None and not isinstance(key, str):
        raise SourceError(f"{where}: envelope 'key' must be a string or null, got {key!r}")
    value = envelope["value"]
    if value is None:
        value_bytes = None
    elif isinstance(value, str):
        value_bytes = value.encode("utf-8")
    else:
        value_bytes = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    timestamp_ms = integer("timestamp", required=False)
    ts_type = integer("timestampType", required=False)
    if ts_type is None:
        ts_type = TIMESTAMP_TYPE_CREATE_TIME if timestamp_ms is not None else TIMESTAMP_TYPE_NONE
    return (
        key.encode("utf-8") if key is not None else None,
        value_bytes,
        partition,
        offset,
        timestamp_ms * 1000 if timestamp_ms is not None else None,
        ts_type,
    )


class FilesDataSource(DataSource):
    """Spark Python data source ``lakehouse-files``: a JSON-lines directory as a stream.

    Register with :func:`lakehouse.sources.register_sources`; semantics and options are
    documented in :mod:`lakehouse.sources.files`. Pickled by reference.
    """

    @classmethod
    def name(cls) -> str:
        """The format name, ``lakehouse-files``."""
        return FILES_SOURCE_NAME

    def schema(self) -> StructType:
        """The raw schema. Runs on the driver (a Python worker) when ``load()`` is called."""
        return RAW_SCHEMA

    def streamReader(self, schema: StructType) -> FilesStreamReader:
        """Validate the options and return the reader; touches no file.

        Runs on the driver (a Python worker) when a query starts.

        Raises:
            ConfigError: invalid options, or a user schema other than the raw schema.
        """
        check_raw_schema(FILES_SOURCE_NAME, schema)
        _quiet_when_stopped()
        return FilesStreamReader(FilesSourceOptions.from_options(self.options))


def _quiet_when_stopped() -> None:
    """In the Python process that serves the reader (PySpark's stream runner): no traceback
    when the query stops it.

    A query's stop closes the runner's socket while the runner waits for the next call: its
    ``read_int`` meets the end of the stream, it tries to send that error to the JVM over the
    closed socket, and the write fails. The runner's stderr is the Spark application's, so a
    user who stopped a job (Ctrl-C, SIGTERM) saw two tracebacks of a stop that went as it
    should. Only that ending is silenced: a socket write that failed while an ``EOFError``
    was being handled; every other uncaught error is printed as before."""
    import sys

    previous = sys.excepthook
    if getattr(previous, "_lakehouse_quiet_stop", False):
        return

    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if _stopped_by_the_jvm(value):
            return
        previous(kind, value, tb)

    hook._lakehouse_quiet_stop = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _stopped_by_the_jvm(error: BaseException) -> bool:
    """``error`` is a failed socket write of the runner handling the end of its input.

    >>> try:
    ...     try:
    ...         raise EOFError
    ...     except EOFError:
    ...         raise BrokenPipeError(32, "Broken pipe")
    ... except BrokenPipeError as e:
    ...     _stopped_by_the_jvm(e)
    True
    >>> _stopped_by_the_jvm(BrokenPipeError(32, "Broken pipe"))
    False
    >>> try:
    ...     try:
    ...         raise EOFError
    ...     except EOFError:
    ...         raise ValueError("bad offset")
    ... except ValueError as e:
    ...     _stopped_by_the_jvm(e)
    False
    """
    if not isinstance(error, OSError):  # a broken pipe or a reset, as the JVM closed it
        return False
    cause: BaseException | None = error.__context__
    while cause is not None:
        if isinstance(cause, EOFError):
            return True
        cause = cause.__context__
    return False
