"""Query strings read strictly: a parameter that is not UTF-8, holds a NUL, or is given twice is
refused (400 ``Invalid query``) before any handler reads it, instead of being replaced by U+FFFD
or silently read as its first value."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_to_bytes

from litestar.exceptions import ValidationException
from litestar.types import ASGIApp, Receive, Scope, Send

from .messages import NOT_UTF8


def _refuse(name: str, message: str) -> ValidationException:
    return ValidationException(
        detail="Invalid query",
        extra=[{"message": message, "key": f"$.{name}" if name else "$", "source": "query"}],
    )


# Credentials in the query: a key that is not UTF-8 or holds a NUL is no key of any project, so it
# gets the guard's 401 ``Invalid API key`` (seed: an invalid key is a 401), not a 400.
CREDENTIALS = frozenset({"apiKey"})


def check_query(raw: bytes) -> None:
    """Raise the 400 for the first thing wrong with the raw query string ``raw``."""
    seen: set[str] = set()
    for part in raw.split(b"&"):
        if not part:
            continue
        name_raw, _, value_raw = part.partition(b"=")
        try:
            name = unquote_to_bytes(name_raw.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            raise _refuse("", f"a parameter name {NOT_UTF8}") from None
        if name in seen:
            raise _refuse(name, "is given more than once")
        seen.add(name)
        if name in CREDENTIALS:
            continue
        try:
            value = unquote_to_bytes(value_raw.replace(b"+", b" ")).decode("utf-8")
        except UnicodeDecodeError:
            raise _refuse(name, NOT_UTF8) from None
        if "\x00" in value or "\x00" in name:
            raise _refuse(name, "must not contain NUL characters")


def strict_query(app: ASGIApp) -> ASGIApp:
    """Litestar middleware: ``middleware=[strict_query]``."""

    async def handle(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("query_string"):
            check_query(scope["query_string"])
        await app(scope, receive, send)

    return handle


__all__: list[Any] = ["check_query", "strict_query"]
