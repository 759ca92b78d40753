"""A deadline for reading a request body, against slow-loris clients that trickle bytes.

granian bounds the time to read the headers; this bounds the body: once the application first
asks for it, the whole body must arrive within ``seconds`` or the request is answered 408. Once
it has arrived, what the application receives next is the client going away: a streamed
response (the export) listens for that for as long as it streams, with no deadline, or every
response streaming for longer than ``seconds`` would be cut off mid-body.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar.exceptions import HTTPException
from litestar.types import ASGIApp, Receive, Scope, Send


class BodyTimeout(HTTPException):
    status_code = 408
    detail = "Request timeout"


class BodyCutShort(HTTPException):
    """The server said the client left before its body was whole. granian says so too when the
    client is still there, waiting for an answer: a chunked body whose framing is malformed (a
    size that is not hex, a chunk longer than its size). That was a 500 ("client disconnected
    prematurely", or granian's own when nothing was sent); it is the body's fault: 400. A client
    that did leave reads no answer either way."""

    status_code = 400
    detail = "did not arrive whole: it ended early or its chunked encoding is malformed"


def body_deadline(seconds: float) -> Any:
    """Litestar middleware factory: ``middleware=[body_deadline(10)]``."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def handle(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or seconds <= 0:
                await app(scope, receive, send)
                return
            deadline: float | None = None  # set when the application first asks for the body
            # The whole body: its last http.request message was received, or there is none (an
            # HTTP/1 request without Content-Length or Transfer-Encoding has no body, RFC 9112
            # 6.3). A GET's empty body is handed over by the server in its own time: under load
            # granian had not when the export's first chunk was read and the disconnect watch
            # that asked for it was stopped; the deadline then cut the export off mid-body.
            arrived = scope.get("http_version") in ("1.0", "1.1") and not declares_body(scope)
            answering = False  # the response has started: a 408 can no longer be sent

            async def receive_in_time() -> Any:
                nonlocal deadline, arrived
                if arrived or answering:
                    return await receive()
                if deadline is None:
                    deadline = asyncio.get_running_loop().time() + seconds
                # asyncio.timeout_at cancels the awaited receive itself (one timer, no extra
                # task); the server's receive answers a cancellation at once.
                try:
                    async with asyncio.timeout_at(deadline):
                        message = await receive()
                except TimeoutError:
                    raise BodyTimeout from None
                if message["type"] != "http.request":
                    raise BodyCutShort
                arrived = not message.get("more_body")
                return message

            async def send_noting_the_start(message: Any) -> None:
                nonlocal answering
                answering = True
                await send(message)

            await app(scope, receive_in_time, send_noting_the_start)

        return handle

    return middleware


def declares_body(scope: Scope) -> bool:
    """Whether an HTTP/1 request has a body (RFC 9112 6.3: a Content-Length other than 0, or a
    Transfer-Encoding)."""
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False
