"""A cap on request bodies, enforced before they are read whole, on every endpoint.

A declared ``Content-Length`` above the cap is answered 413 before a byte of the body is read, and
before the credentials are checked (the number alone decides, so it costs nothing whoever sends it);
a chunked body (or one that lies about its length) is read only once the credentials are good, and
cut off as soon as the bytes received pass the cap. The default admits the largest batch
``/api/collect`` accepts (100 events at every field's maximum, metadata included, in compact ASCII
JSON: 6,737,612 bytes) with room for whitespace; ``TALLY_MAX_BODY_BYTES`` changes it. The other
endpoints take a few hundred bytes of JSON and are capped at ``SMALL_BODY_BYTES``, or at
``TALLY_MAX_BODY_BYTES`` when that is lower. ``TALLY_MAX_BODY_BYTES=0`` turns off collect's cap
only: the other endpoints keep ``SMALL_BODY_BYTES``.

Filters have a cap of their own, ``MAX_FILTERS_BYTES`` of JSON text in all, because the URL that
carries them has one: granian (hyper, through the ``http`` crate's ``Uri``) answers a request
target (path and query string) over ``MAX_TARGET_BYTES`` with 414 and an empty body, a fixed
limit no setting raises (``HTTP1Settings.max_buffer_size`` bounds the headers, not the target).
20 filters of 100 values of 2048 characters could be 12 MB percent-encoded; 16 KiB percent-encoded
byte by byte is 49,152 bytes, so every ``filters`` Tally takes fits in a URL with the other
parameters, and is refused with a 400 that says why before the URL grows past the target's limit.
A ``POST /api/v2/query`` body's filters count the same way (written as compact JSON,
``filters_bytes``): at the cap they are at most 48 KiB with any encoder's escapes (``\u00e9``
for a 2-byte character), within the 64 KiB body cap.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_to_bytes

import msgspec
from litestar.exceptions import HTTPException
from litestar.types import ASGIApp, Receive, Scope, Send

from ..domain.query_errors import INVALID_PAYLOAD, InvalidQuery

# Project and key bodies are a name or a label of at most 60 characters.
SMALL_BODY_BYTES = 64 * 1024
# Paths whose bodies may reach the full cap.
LARGE_BODY_PATHS = frozenset({"/api/collect"})
# The routes that take a ``filters`` parameter; the others ignore it, as any unknown one.
FILTERS_PATHS = frozenset({"/api/dashboard", "/api/breakdown"})
# The longest request target granian takes (the ``http`` crate's ``Uri``: u16::MAX - 1); 414 with
# an empty body beyond, before Tally sees the request.
MAX_TARGET_BYTES = 65_534
# The JSON text of all filters together, in UTF-8 bytes (README "Limits and defaults").
MAX_FILTERS_BYTES = 16 * 1024


class PayloadTooLarge(HTTPException):
    status_code = 413
    detail = "Payload too large"


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _too_many_bytes(size: int) -> str:
    return (
        f"must be at most {MAX_FILTERS_BYTES:,} bytes of JSON text in all (UTF-8), got {size:,}; "
        "use fewer or shorter values (a URL holds at most 65,534 bytes)"
    )


def check_filters_param(query_string: bytes) -> None:
    """400 ``Invalid query`` (``$.filters``) when the ``filters`` parameter, URL-decoded, is over
    ``MAX_FILTERS_BYTES`` bytes."""
    if b"filters" not in query_string:
        return
    for part in query_string.split(b"&"):
        name, _, value = part.partition(b"=")
        if unquote_to_bytes(name.replace(b"+", b" ")) != b"filters":
            continue
        if len(value) <= MAX_FILTERS_BYTES:  # decoding only shortens it
            continue
        size = len(unquote_to_bytes(value.replace(b"+", b" ")))
        if size > MAX_FILTERS_BYTES:
            raise InvalidQuery("$.filters", _too_many_bytes(size))


def filters_bytes(filters: Any) -> int:
    """The size of a v2 body's ``filters`` as compact JSON in UTF-8."""
    return len(msgspec.json.encode(filters))


def check_body_filters(filters: Any) -> None:
    """400 ``Invalid payload`` (``$.filters``) when a v2 body's filters are over the cap."""
    size = filters_bytes(filters)
    if size > MAX_FILTERS_BYTES:
        raise InvalidQuery("$.filters", _too_many_bytes(size), INVALID_PAYLOAD)


def small_cap(max_bytes: int) -> int:
    """The cap of every endpoint but collect: 64 KiB, or ``max_bytes`` when lower (0: 64 KiB)."""
    return min(max_bytes, SMALL_BODY_BYTES) if max_bytes > 0 else SMALL_BODY_BYTES


def cap_for(path: str, max_bytes: int) -> int:
    """The body cap of ``path``: ``max_bytes`` on collect (0: none), :func:`small_cap`
    elsewhere."""
    if path.rstrip("/") in LARGE_BODY_PATHS:
        return max(max_bytes, 0)
    return small_cap(max_bytes)


def body_cap(max_bytes: int) -> Any:
    """Litestar middleware factory: ``middleware=[body_cap(7 * 2**20)]``; 0 lifts collect's cap
    (the other endpoints keep theirs)."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def handle(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            path = scope.get("path", "")
            if path.rstrip("/") in FILTERS_PATHS:
                check_filters_param(scope.get("query_string", b""))
            limit = cap_for(path, max_bytes)
            if not limit:  # collect with TALLY_MAX_BODY_BYTES=0
                await app(scope, receive, send)
                return
            declared = _declared_length(scope)
            if declared is not None and declared > limit:
                raise PayloadTooLarge
            received = 0

            async def receive_capped() -> Any:
                nonlocal received
                message: Any = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > limit:
                        raise PayloadTooLarge
                return message

            await app(scope, receive_capped, send)

        return handle

    return middleware
