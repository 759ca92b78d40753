"""Request bodies decoded straight from bytes into their msgspec Struct, in one pass.

Litestar's default path for a ``data`` parameter decodes the JSON into dicts and lists and then
converts those into the Struct: twice the work, and on ``/api/collect`` that was a third of the
server's time. ``StructDTO`` plugs into Litestar's DTO seam instead: one
``msgspec.json.Decoder(Type)`` per type, made once, does parsing and validation together, and
its errors leave through the same ``ValidationException`` (so the same 400 body). The OpenAPI
document is generated from the Struct exactly as before.

Every byte sequence ends as a body or as a 400 with plain words (http/messages.py): a missing or
foreign content type, a byte order mark, bytes that are not UTF-8 (lone surrogates included),
a raw NUL byte, duplicate keys, numbers out of range, nesting of any depth.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Generator, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import msgspec
from litestar.dto import AbstractDTO, DTOConfig, DTOFieldDefinition
from litestar.exceptions import ValidationException
from litestar.typing import FieldDefinition

from ..domain.query_errors import LONE_SURROGATE, TOO_DEEP, member
from .messages import NOT_UTF8, plain
from .schemas import CollectBody, MetadataValue

T = TypeVar("T")

__all__ = ["StructDTO", "check_body"]

# Media types a body may be declared as (the contract: JSON, and text/plain for beacons).
JSON_TYPES = ("application/json", "text/plain")
_BOM = b"\xef\xbb\xbf"


class StructDTO(AbstractDTO[T], Generic[T]):
    """``dto=StructDTO[Body]`` on a handler whose ``data`` is ``Body`` (a msgspec Struct)."""

    config: ClassVar[DTOConfig] = DTOConfig()
    _decoders: ClassVar[dict[type, msgspec.json.Decoder[Any]]] = {}

    @classmethod
    def generate_field_definitions(
        cls, model_type: type[Any]
    ) -> Generator[DTOFieldDefinition, None, None]:
        yield from ()  # no transfer model: the Struct itself is decoded

    @classmethod
    def detect_nested_field(cls, field_definition: FieldDefinition) -> bool:
        return False

    @classmethod
    def create_for_field_definition(
        cls, field_definition: FieldDefinition, handler_id: str, backend_cls: Any = None
    ) -> None:
        if cls.model_type not in cls._decoders:
            cls._decoders[cls.model_type] = msgspec.json.Decoder(cls.model_type)

    @classmethod
    def create_openapi_schema(
        cls, field_definition: FieldDefinition, handler_id: str, schema_creator: Any
    ) -> Any:
        return schema_creator.for_field_definition(
            FieldDefinition.from_annotation(
                cls.model_type, kwarg_definition=field_definition.kwarg_definition
            )
        )

    def decode_bytes(self, value: bytes) -> Any:
        headers = self.asgi_connection.headers
        return check_body(
            self._decoders[self.model_type],
            value,
            headers.getall("content-type", []),
            _KEY_COUNTERS.get(self.model_type),
            headers.getall("content-encoding", []),
        )

    def decode_builtins(self, value: Any) -> Any:
        try:
            return msgspec.convert(value, self.model_type)
        except msgspec.ValidationError as exc:
            raise _invalid(str(exc)) from None


def check_body(
    decoder: msgspec.json.Decoder[Any],
    value: bytes,
    content_type: Sequence[str],
    count_keys: Callable[[Any], int] | None = None,
    content_encoding: Sequence[str] = (),
) -> Any:
    """Decode ``value`` with ``decoder``, or raise the 400 that says why not. ``content_type``
    and ``content_encoding`` are the values of every such header line of the request (none, one
    or more); ``count_keys`` counts the keys of a decoded body (a fast path for the
    duplicate-key check)."""
    # Several Content-Encoding lines are one list (RFC 9110, 5.3): identity, gzip is gzip. Only
    # the first was read, so a gzip body after an "identity" line was "not valid UTF-8".
    codings = [c.strip().lower() for line in content_encoding for c in line.split(",")]
    coding = ", ".join(c for c in codings if c not in ("", "identity"))
    if coding:
        # Bodies are read as sent: a gzip body was refused as "not valid UTF-8", and plain JSON
        # labelled gzip was accepted.
        raise _refuse("$", f"must be sent uncompressed; Content-Encoding {coding} is not accepted")
    media = (content_type[0] if content_type else "").split(";", 1)[0].strip().lower()
    if len(content_type) > 1 or "," in media:
        # One body has one type (a comma joins two lines' values; a media type has none). The
        # first line was read: application/json, then text/html was accepted, the other way
        # round refused.
        raise _refuse("$", "the Content-Type header is given more than once; send one")
    if media not in JSON_TYPES:
        raise _refuse(
            "$",
            "the content type must be application/json (or text/plain)"
            + (f", not {media}" if media else "; none was given"),
        )
    if not value.strip():
        raise _refuse("$", "a JSON body is required")
    if value.startswith(_BOM):
        raise _refuse("$", "starts with a byte order mark (BOM); send UTF-8 JSON without one")
    try:
        decoded = decoder.decode(value)
    except UnicodeDecodeError:
        raise _refuse("$", NOT_UTF8) from None
    except RecursionError:  # only a body without a shape of its own (``Any``) gets this deep
        raise _refuse("$", TOO_DEEP) from None
    except msgspec.ValidationError as exc:
        raise _invalid(str(exc), value) from None
    except msgspec.DecodeError as exc:
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            raise _refuse("$", NOT_UTF8) from None
        if LONE_SURROGATE.search(value):
            words = f"{NOT_UTF8}: it contains a lone surrogate (\\ud800-\\udfff)"
            raise _refuse("$", words) from None
        at = _MALFORMED_AT.search(str(exc))
        if at is not None and value.startswith((b"NaN", b"Infinity"), int(at.group(1))):
            # What Python's json.dumps writes for a float that is not a number.
            raise _refuse(
                "$",
                f"is not valid JSON (at byte {at.group(1)}): NaN and Infinity are not numbers "
                "in JSON; send null or leave the field out",
            ) from None
        raise _invalid(str(exc)) from None
    long_number = _LONG_DIGITS.search(value) is not None
    if long_number or count_keys is None or not _no_duplicates_fast(value, count_keys(decoded)):
        _check_keys_and_numbers(value)
    return decoded


def _no_duplicates_fast(value: bytes, decoded_strings: int) -> bool:
    """True when ``value`` provably has no duplicate keys. Without a backslash, every ``"`` in
    the text opens or closes a string, so the text holds ``count('"') / 2`` strings (keys and
    string values); a duplicate key adds at least its own string to what was decoded. Equal
    counts prove there was none; anything else (an escape, a ``null`` field, a duplicate) leaves
    it to the full check. Two byte scans: microseconds for a 100-event batch."""
    if b"\\" in value:
        return False
    return value.count(b'"') == 2 * decoded_strings


def _collect_strings(body: CollectBody) -> int:
    """JSON strings of a decoded collect body: its keys (``events``, each event's fields present,
    metadata keys) and its string values."""
    strings = 1
    for event in body.events:
        fields = msgspec.structs.astuple(event)
        present = len(fields) - fields.count(None)
        strings += 2 * present  # each field present: its key, and its value if a string
        if event.metadata is not None:
            strings -= 1  # metadata's value is an object, not a string
            for item in event.metadata.values():
                strings += 2 if isinstance(item, str) else 1
    return strings


_KEY_COUNTERS: dict[type, Callable[[Any], int]] = {CollectBody: _collect_strings}


class _DuplicateKey(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


# Numbers are 64-bit integers or doubles: none needs more than a few dozen characters. A body
# with a longer run of digits is parsed again to tell a number (refused) from a string.
MAX_NUMBER_CHARS = 64
_LONG_DIGITS = re.compile(rb"[0-9]{%d}" % (MAX_NUMBER_CHARS + 1))


class _LongNumber(Exception):
    pass


def _short_number(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise _LongNumber(text)
    return text


def _check_keys_and_numbers(value: bytes) -> None:
    """JSON leaves duplicate keys to the reader (msgspec keeps the last one); Tally refuses them,
    so that what is stored is never one of two readings of the body. It refuses numbers written
    with more than MAX_NUMBER_CHARS characters too (msgspec would round a 10,000-digit fraction
    to a double and keep it)."""
    try:
        json.loads(
            value,
            object_pairs_hook=_unique,
            parse_int=_short_number,
            parse_float=_short_number,
        )
    except _DuplicateKey as exc:
        raise _refuse("$", f"has the key {str(exc)!r} twice in one object") from None
    except _LongNumber:
        raise _refuse(
            "$",
            f"holds a number written with more than {MAX_NUMBER_CHARS} characters; numbers "
            "must be 64-bit integers or doubles",
        ) from None
    except (ValueError, RecursionError):
        # Already decoded by msgspec; the standard parser's own limits are not the contract's.
        return


def _refuse(path: str, message: str) -> ValidationException:
    return ValidationException(
        detail="Validation failed", extra=[{"message": message, "key": path, "source": "body"}]
    )


_MALFORMED_AT = re.compile(r"^JSON is malformed: invalid character \(byte (\d+)\)$")
_AT = re.compile(r"`\$\.?(.*)`$")


# msgspec's words for a number no double holds, and for an integer too long to read at all.
_OUT_OF_RANGE = ("Number out of range", "Integer value out of range")


def _invalid(message: str, body: bytes | None = None) -> ValidationException:
    """msgspec's "<message> - at `$.a.b`" (or "- at `key` in `$.a`") as a validation error for
    the body, in plain words (http/messages.py), naming the path. msgspec names a value of an
    object with keys of any name as ``[...]``; a metadata value is named by its key, found in
    ``body`` (the metadata itself when the key cannot be told)."""
    text, _, where = message.partition(" - ")
    match = _AT.search(where)
    key = match.group(1) if match and match.group(1) else ""
    path = "$" + ("" if not key or key.startswith("[") else ".") + key
    path, words = plain(text, path, in_key=where.startswith("at `key` in"))
    if body is not None and (value_of := _METADATA_VALUE.match(path)):
        name = _bad_metadata_key(body, int(value_of.group(1)))
        path = path.removesuffix("[...]") + ("" if name is None else member(name))
    elif body is not None and "[...]" in path and text in _OUT_OF_RANGE:
        # A body decoded without a shape (v2's first checks) names every key ``[...]``.
        path = _infinite_number_path(body) or path
    return ValidationException(
        detail="Validation failed", extra=[{"message": words, "key": path, "source": "body"}]
    )


# msgspec's path of a metadata value, ``$.events[3].metadata[...]``.
_METADATA_VALUE = re.compile(r"^\$\.events\[(\d+)\]\.metadata\[\.\.\.\]$")
_metadata_value = msgspec.json.Decoder(MetadataValue)


class _Events(msgspec.Struct):
    events: list[msgspec.Raw]


class _EventMetadata(msgspec.Struct):
    metadata: msgspec.Raw = msgspec.Raw(b"null")


def _infinite_number_path(body: bytes) -> str | None:
    """The path of the first number of ``body`` too large for a double (Python's parser reads
    it as infinity), or None."""
    try:
        # Integers read as doubles: one too long for Python's int parser (over 4,300 digits)
        # is infinity too, rather than a ValueError and no path.
        document = json.loads(body, parse_int=float)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, str]] = [(document, "$")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, float) and math.isinf(node):
            return path
        if isinstance(node, dict):
            stack.extend((v, path + member(k)) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(node))))
    return None


def _bad_metadata_key(body: bytes, index: int) -> str | None:
    """The key of the first value of event ``index``'s metadata that breaks the metadata value
    rule, as msgspec met it (keys in the order sent); None if it cannot be told (a key sent
    twice, whose first value was the bad one, or a value nested deeper than the decoder
    follows: msgspec refused it at its first bracket, but reading past it to find the key
    recurses once per level)."""
    try:
        event = msgspec.json.decode(body, type=_Events).events[index]
        metadata = msgspec.json.decode(event, type=_EventMetadata).metadata
        values = msgspec.json.decode(metadata, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, IndexError, RecursionError):
        return None
    for name, value in values.items():
        try:
            _metadata_value.decode(value)
        except (msgspec.ValidationError, RecursionError):
            return name
    return None
