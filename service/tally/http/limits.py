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
"""

from __future__ import annotations

from typing import Any

from litestar.exceptions import HTTPException
from litestar.types import ASGIApp, Receive, Scope, Send

# Project and key bodies are a name or a label of at most 60 characters.
SMALL_BODY_BYTES = 64 * 1024
# Paths whose bodies may reach the full cap.
LARGE_BODY_PATHS = frozenset({"/api/collect"})


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
            limit = cap_for(scope.get("path", ""), max_bytes)
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
