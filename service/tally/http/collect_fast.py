"""``POST /api/collect`` without the framework's per-request machinery, same answers.

A collect request through Litestar passes two exception-handling layers, three middlewares (body
cap, body deadline, strict query), a guard, the signature model and the DTO extractor before the
handler, and the response back through them: profiled under load (benchmarks/README.md), that
was most of the no-op ceiling's time per single-event request, the handler itself 2%.
:class:`CollectFastPath` sits inside Litestar's CORS middleware and before_send hook (so CORS and
security headers are Litestar's own) and answers the request itself, doing every check the
Litestar route does, in the same order and with the same code:

1. a declared ``Content-Length`` over the cap: 413 before reading (``http/limits.py``);
2. the API key from ``x-api-key`` (absent or empty: 401 ``Missing API key``);
3. the body, cut off past the cap (413) or past the read deadline (408, ``http/timeouts.py``);
4. ``check_body`` (``http/decoding.py``): content type, BOM, UTF-8, schema, duplicate keys, long
   numbers (400);
5. the rate limits (429), ``to_rows`` (400 for an impossible date), the ingest log (503), 202.

Errors are rendered by Tally's own exception handlers (``http/errors.py``). What it does not
handle it leaves to the Litestar route untouched, before reading a byte: any other path or
method, a query string (``apiKey`` in the query, and the strict query check), and a key this
worker does not know yet (the route's guard waits for the registry's refresh and answers 401
``Invalid API key`` if it is still unknown). ``tests/test_collect_fast.py`` sends the same
requests through both and compares status, headers and body.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msgspec
from litestar import Response
from litestar.middleware._internal.cors import CORSMiddleware  # http/cors.py says why internal
from litestar.types import ASGIApp, Receive, Scope, Send

from ..domain import events as event_rules
from ..domain.ids import hash_key
from .auth import Unauthorized
from .decoding import _KEY_COUNTERS, StructDTO, check_body
from .errors import EXCEPTION_HANDLERS, error_response
from .limits import PayloadTooLarge, cap_for
from .ratelimit import canonical_address, forwarded_address
from .schemas import Accepted, CollectBody
from .timeouts import BodyCutShort, BodyTimeout

log = logging.getLogger("tally.http")

PATH = "/api/collect"
_decoder = StructDTO._decoders.get(CollectBody) or msgspec.json.Decoder(CollectBody)
_count_strings = _KEY_COUNTERS[CollectBody]
_encode = msgspec.json.Encoder().encode
_JSON = b"application/json"
# Answers to one to a hundred events: the same bytes Litestar renders for ``Accepted``.
_ACCEPTED = [_encode(Accepted(accepted=n)) for n in range(101)]


class _Declined(Exception):
    """The request is the Litestar route's to answer (nothing was read)."""


def _headers(scope: Scope, name: bytes) -> list[str]:
    """Every value of the header ``name`` (lower case), in order."""
    return [bytes(value).decode("latin-1") for key, value in scope["headers"] if key == name]


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


class CollectFastPath:
    """ASGI wrapper: ``POST /api/collect`` answered here, everything else passed to ``app``."""

    def __init__(self, litestar: Any, app: ASGIApp) -> None:
        self.litestar = litestar
        self.app = app
        self.enabled = True
        self.answered = 0  # requests answered here (tests)
        settings = litestar.state.settings
        self.cap = cap_for(PATH, settings.max_body_bytes) if settings.max_body_bytes > 0 else 0
        self.deadline = settings.body_timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            not self.enabled
            or scope["type"] != "http"
            or scope["path"] != PATH
            or scope.get("method") != "POST"
            or scope.get("query_string")
        ):
            await self.app(scope, receive, send)
            return
        try:
            status, body, headers = await self._collect(scope, receive)
        except _Declined:
            await self.app(scope, receive, send)
            return
        except Exception as exc:
            status, body, headers = self._error(exc)
        self.answered += 1
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", _JSON),
                    (b"content-length", str(len(body)).encode()),
                    *headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _collect(self, scope: Scope, receive: Receive) -> tuple[int, bytes, list[Any]]:
        state = self.litestar.state
        # 1. the body cap's declared length (before anything else, as its middleware).
        declared = _header(scope, b"content-length")
        if self.cap and declared is not None:
            try:
                if int(declared) > self.cap:
                    raise PayloadTooLarge
            except ValueError:
                pass
        # 2. the key (the guard): a key this worker does not know goes to the route's guard.
        if sum(name == b"x-api-key" for name, _ in scope["headers"]) > 1:
            raise _Declined  # two keys: the route's guard refuses them
        key = _header(scope, b"x-api-key")
        if not key:
            raise Unauthorized("Missing API key")
        record = state.registry.cached(hash_key(key.decode("latin-1")))
        if record is None:
            raise _Declined
        # 3. the body, within the cap and the read deadline.
        body = await self._read(receive)
        # 4. decoding and every check of the bytes.
        data = check_body(
            _decoder,
            body,
            _headers(scope, b"content-type"),
            _count_strings,
            _headers(scope, b"content-encoding"),
        )
        # 5. what the route's handler does too (http/controllers.py's collect).
        user_agent = (_header(scope, b"user-agent") or b"").decode("latin-1")
        accepted = await accept(state, record, data.events, _client_ip(scope), user_agent)
        if accepted < len(_ACCEPTED):
            return 202, _ACCEPTED[accepted], []
        return 202, _encode(Accepted(accepted=accepted)), []

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        received = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deadline if self.deadline > 0 else None
        while True:
            try:
                if deadline is None:
                    message: Any = await receive()
                else:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
            except TimeoutError:
                raise BodyTimeout from None
            if message["type"] != "http.request":  # gone, or a malformed chunked body
                raise BodyCutShort
            chunk = message.get("body", b"")
            if chunk:
                received += len(chunk)
                if self.cap and received > self.cap:
                    raise PayloadTooLarge
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _error(self, exc: Exception) -> tuple[int, bytes, list[Any]]:
        """The answer Tally's exception handlers give (http/errors.py)."""
        handler = None
        for kind in type(exc).__mro__:
            handler = EXCEPTION_HANDLERS.get(kind)
            if handler is not None:
                break
        if handler is None or kind is Exception:
            log.exception("unhandled error on POST %s", PATH, exc_info=exc)
            response: Response[Any] = error_response(500, "Internal server error")
        else:
            response = handler(None, exc)
        body = response.render(response.content, "application/json")
        headers = [
            (name.lower().encode("latin-1"), str(value).encode("latin-1"))
            for name, value in response.headers.items()
            if name.lower() not in ("content-type", "content-length")
        ]
        return response.status_code or 500, body, headers


def _client_ip(scope: Scope) -> str:
    """http/ratelimit.client_ip on the raw scope: first address of x-forwarded-for when it is
    one, else the socket peer."""
    forwarded = _header(scope, b"x-forwarded-for")
    if forwarded:
        address = forwarded_address(forwarded.decode("latin-1"))
        if address is not None:
            return address
    client = scope.get("client")
    return canonical_address(str(client[0])) if client else ""


def header_text(value: str) -> str:
    """A header's text as its sender wrote it. ASGI gives header bytes, read as Latin-1 (each
    byte a character); a User-Agent with non-ASCII text is sent in UTF-8 (browsers on some
    systems, apps naming themselves) and was stored garbled (``CafÃ©``). Bytes that are not
    UTF-8 stay read as Latin-1."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


async def accept(state: Any, record: Any, events: Any, ip: str, user_agent: str) -> int:
    """Collect's work once the request is read and decoded, for both paths: the rate limits,
    enrichment into rows, the ingest log (returns once fsynced), the key's last use. Returns
    the number of events accepted."""
    limits = state.limits
    limits.check(limits.per_key, "key", record.id)
    limits.check(limits.per_ip, "ip", ip)
    rows = event_rules.to_rows(
        events,
        project_id=record.project_id,
        key_id=record.id,
        received_ms=time.time_ns() // 1_000_000,
        ip=state.hash_ip(ip),
        user_agent=header_text(user_agent),
        country=state.geo.country(ip),  # from the raw address, before hash_ip drops it
        keep_days=state.settings.retention_days,
    )
    if state.registry.cached(record.key_hash) is None:
        # Revoked while the body was read (a project's deletion waits for appends under way,
        # not for bodies still arriving): refused as it would be now.
        raise Unauthorized("Invalid API key")
    await state.ingest.append(rows)
    state.registry.touch(record)
    return len(rows)


class _AroundCors:
    """Litestar's CORS middleware parses every request's headers to find an ``Origin``; a collect
    request without one (servers, wrk, same-origin pages) goes to the fast path directly, exactly
    where the middleware would have passed it unchanged. With an ``Origin`` it goes through the
    middleware, which adds its headers and hands it to the same fast path."""

    def __init__(self, cors: ASGIApp, fast: CollectFastPath) -> None:
        self.cors, self.fast = cors, fast

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == PATH:
            for name, _ in scope["headers"]:
                if name == b"origin":
                    break
            else:
                await self.fast(scope, receive, send)
                return
        await self.cors(scope, receive, send)


def install(litestar: Any) -> CollectFastPath:
    """Put the fast path inside the app's CORS middleware (or at the top of its handler)."""
    handler = litestar.asgi_handler
    inner = getattr(handler, "app", None)
    if inner is not None and isinstance(handler, CORSMiddleware):
        fast = CollectFastPath(litestar, inner)
        handler.app = fast
        litestar.asgi_handler = _AroundCors(handler, fast)
    else:
        fast = CollectFastPath(litestar, handler)
        litestar.asgi_handler = fast
    return fast
