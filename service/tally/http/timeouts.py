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


def body_deadline(seconds: float) -> Any:
    """Litestar middleware factory: ``middleware=[body_deadline(10)]``."""

    def middleware(app: ASGIApp) -> ASGIApp:
        async def handle(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or seconds <= 0:
                await app(scope, receive, send)
                return
            deadline: float | None = None  # set when the application first asks for the body
            arrived = False  # the whole body: its last http.request message was received

            async def receive_in_time() -> Any:
                nonlocal deadline, arrived
                if arrived:
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
                arrived = message["type"] != "http.request" or not message.get("more_body")
                return message

            await app(scope, receive_in_time, send)

        return handle

    return middleware
