"""Message text -> (wrapped?, schema handle, payload), parsing each byte once.

Numbers with a fraction or exponent are parsed as :class:`~decimal.Decimal` (never through
``float``), so decimal columns keep their digits; integers are Python ints. ``NaN``,
``Infinity`` and ``-Infinity`` literals are not JSON (RFC 8259) and are rejected with kind
``malformed_json``. Duplicate object keys keep the last value, as :func:`json.loads` does.

Schema cache: a Kafka Connect ``JsonConverter`` message is ``{"schema": S, "payload": P}``
with ``S`` first and ``S`` identical for every message of a table until its structure
changes. The text of ``S`` is the cache key: when a message starts with a cached schema text
the schema is neither parsed nor compiled again, only the payload is parsed. Messages in
another layout (payload first, extra keys) are parsed in full and their schema compiled
without caching. The cache is per process (one per Spark Python worker), bounded in entries
and in the size of each schema text it keeps.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import OrderedDict
from decimal import Decimal
from typing import Any, NoReturn

from lakehouse.cdc.schema import SchemaHandle
from lakehouse.errors import CdcDecodeError

__all__ = ["SchemaCache", "parse_message", "parse_schema", "schema_prefix", "to_text"]


class _NonFiniteLiteral(ValueError):
    pass


def _reject_constant(name: str) -> NoReturn:
    raise _NonFiniteLiteral(name)


_DECODER = json.JSONDecoder(parse_float=Decimal, parse_constant=_reject_constant)
_raw_decode = _DECODER.raw_decode

_WS = "[ \\t\\n\\r]*"
_SCHEMA_HEAD = re.compile(_WS + r"\{" + _WS + r'"schema"' + _WS + ":" + _WS)
_PAYLOAD_HEAD = re.compile(_WS + "," + _WS + r'"payload"' + _WS + ":" + _WS)
_TAIL = re.compile(_WS + r"\}" + _WS + r"\Z")


def to_text(value: bytes | bytearray | memoryview | str, max_bytes: int, what: str) -> str:
    """Check the size of a Kafka value or key and decode it as UTF-8.

    A leading UTF-8 byte order mark is dropped. For ``str`` input the size is its length in
    characters.

    Raises:
        CdcDecodeError: ``too_large`` above ``max_bytes``; ``encoding`` for invalid UTF-8 or
            a value that is neither bytes nor str.
    """
    if isinstance(value, str):
        if len(value) > max_bytes:
            raise CdcDecodeError(
                f"{what} of {len(value)} characters exceeds the limit of {max_bytes} bytes "
                "(ingest.max_record_bytes); raise it if such records are expected",
                kind="too_large",
            )
        text = value
    elif isinstance(value, bytes | bytearray | memoryview):
        size = value.nbytes if isinstance(value, memoryview) else len(value)
        if size > max_bytes:
            raise CdcDecodeError(
                f"{what} of {size} bytes exceeds the limit of {max_bytes} bytes "
                "(ingest.max_record_bytes); raise it if such records are expected",
                kind="too_large",
            )
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CdcDecodeError(
                f"{what} is not valid UTF-8 ({e.reason} at byte {e.start}); Debezium JSON "
                "is always UTF-8, so check the producer's converter",
                kind="encoding",
            ) from None
    else:
        raise CdcDecodeError(
            f"{what} must be bytes, str or None, got {type(value).__name__}", kind="encoding"
        )
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


def _malformed(e: ValueError | ArithmeticError, what: str) -> CdcDecodeError:
    if isinstance(e, _NonFiniteLiteral):
        return CdcDecodeError(
            f"{what} contains the literal {e.args[0]}, which is not JSON; non-finite numbers "
            'must be sent as strings (JsonConverter writes "NaN")',
            kind="malformed_json",
        )
    if isinstance(e, json.JSONDecodeError):
        return CdcDecodeError(
            f"{what} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno} (char {e.pos})",
            kind="malformed_json",
        )
    # int() refuses integer literals with more than sys.get_int_max_str_digits() digits;
    # Decimal() refuses exponents beyond decimal.MAX_EMAX.
    return CdcDecodeError(
        f"{what} holds a number literal out of range ({type(e).__name__}: {e})",
        kind="invalid_value",
    )


class SchemaCache:
    """Schema text -> :class:`SchemaHandle`, most recently used first, bounded.

    Args:
        max_entries: schemas kept (a worker usually sees one or two per table).
        max_text: longest schema text kept, in characters; longer ones are compiled per
            message.
    """

    def __init__(self, max_entries: int = 32, max_text: int = 1 << 20) -> None:
        self._entries: OrderedDict[str, SchemaHandle] = OrderedDict()
        self.max_entries = max_entries
        self.max_text = max_text

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every schema."""
        self._entries.clear()

    def match(self, text: str, start: int) -> tuple[SchemaHandle, int] | None:
        """The cached schema whose text starts at ``text[start]``, and the index after it.

        A JSON object's extent is fixed by its own text, so a cached schema text found at
        ``start`` is exactly the value there.
        """
        # Iterate over a snapshot: another thread may reorder the dict meanwhile.
        for schema_text in reversed(tuple(self._entries)):
            if text.startswith(schema_text, start):
                handle = self._entries.get(schema_text)
                if handle is None:  # evicted by another thread
                    return None
                with contextlib.suppress(KeyError):
                    self._entries.move_to_end(schema_text)
                return handle, start + len(schema_text)
        return None

    def add(self, schema_text: str, schema: Any) -> SchemaHandle:
        """Validate ``schema`` and keep it under its text (if not too long)."""
        handle = SchemaHandle(schema)
        if len(schema_text) <= self.max_text:
            self._entries[schema_text] = handle
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return handle


DEFAULT_CACHE = SchemaCache()


def parse_message(
    text: str, what: str, cache: SchemaCache = DEFAULT_CACHE
) -> tuple[bool, SchemaHandle | None, Any]:
    """Parse one message.

    Returns:
        ``(wrapped, handle, payload)``: whether the ``{"schema","payload"}`` wrapper was
        there, a handle for its non-null schema, and the payload (the whole document when not
        wrapped).

    Raises:
        CdcDecodeError: ``malformed_json``, ``invalid_envelope`` (schema not a valid Connect
            schema), ``invalid_value``; ``RecursionError`` passes through for the caller to
            turn into ``too_deep``.
    """
    try:
        result = None
        head = _SCHEMA_HEAD.match(text)
        if head is not None:
            result = _parse_wrapped(text, head.end(), what, cache)
        if result is None:
            document = _DECODER.decode(text)
            if (
                type(document) is dict
                and "payload" in document
                and document.keys() <= {"schema", "payload"}
            ):
                schema = document.get("schema")
                handle = None if schema is None else SchemaHandle(schema)
                result = (True, handle, document["payload"])
            else:
                result = (False, None, document)
    except (ValueError, ArithmeticError) as e:
        raise _malformed(e, what) from None
    if "\\ud" in text or "\\uD" in text:
        # A \uD800-\uDFFF escape may leave a lone surrogate, which no UTF-8 writer (Arrow,
        # Delta, Spark) accepts. Rare, so only then are the payload's strings checked.
        _check_surrogates(result[2], what)
    return result


def _check_surrogates(value: Any, what: str) -> None:
    kind = type(value)
    if kind is str:
        _check_string(value, what)
    elif kind is dict:
        for key, item in value.items():
            _check_string(key, what)
            _check_surrogates(item, what)
    elif kind is list:
        for item in value:
            _check_surrogates(item, what)


def _check_string(s: str, what: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise CdcDecodeError(
            f"{what} holds a \\u escape of a lone UTF-16 surrogate ({s!r:.60}), which is not "
            "valid Unicode text",
            kind="encoding",
        ) from None


def _parse_wrapped(
    text: str, start: int, what: str, cache: SchemaCache
) -> tuple[bool, SchemaHandle | None, Any] | None:
    # {"schema": S, "payload": P} in JsonConverter's key order; None -> caller parses in full.
    handle: SchemaHandle | None
    hit = cache.match(text, start)
    if hit is not None:
        handle, end = hit
    else:
        schema, end = _raw_decode(text, start)
        handle = None if schema is None else cache.add(text[start:end], schema)
    sep = _PAYLOAD_HEAD.match(text, end)
    if sep is None:
        return None
    payload, end = _raw_decode(text, sep.end())
    if _TAIL.match(text, end) is None:
        return None
    return True, handle, payload


def parse_schema(text: str) -> SchemaHandle:
    """A Connect schema kept as text (:attr:`SchemaHandle.text`), parsed as a message's is
    (numbers exact).

    Raises:
        CdcDecodeError: ``malformed_json`` or ``invalid_envelope``.
    """
    try:
        schema = _DECODER.decode(text)
    except (ValueError, ArithmeticError) as e:
        raise _malformed(e, "schema") from None
    return SchemaHandle(schema)


def schema_prefix(text: str) -> tuple[str, str] | None:
    """``(prefix, schema text)`` of a wrapped record in ``JsonConverter``'s compact form:
    the text up to its payload (``{"schema":S,"payload":``) and ``S``; None otherwise.

    >>> schema_prefix('{"schema":{"type":"int32"},"payload":5}')
    ('{"schema":{"type":"int32"},"payload":', '{"type":"int32"}')
    >>> schema_prefix('{"schema": {"type":"int32"}, "payload": 5}') is None
    True
    """
    head = _SCHEMA_HEAD.match(text)
    if head is None:
        return None
    try:
        _, end = _raw_decode(text, head.end())
    except (ValueError, RecursionError):
        return None
    sep = _PAYLOAD_HEAD.match(text, end)
    if sep is None:
        return None
    prefix, schema = text[: sep.end()], text[head.end() : end]
    if prefix != f'{{"schema":{schema},"payload":':
        return None
    return prefix, schema
