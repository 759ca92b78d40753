"""An answer sent before the request's body was read leaves the connection usable.

Some answers come before the application reads the body: a refused API key (collect's guard), a
missing or bad session, a declared length over the cap. The client has sent, or is still
sending, the body. When it arrived just after the answer started, granian sent the answer as
one to keep the connection open (no ``Connection: close``) and then closed it: the client's next
request on it got no answer at all (httpx's "Server disconnected without sending a response"; a
raw-socket probe of revoked-key collects saw it after most answers whose body came 1-10 ms after
the headers).

:class:`DrainUnread`, around the whole application, reads the rest of such a body before the
answer starts, up to the body cap and within the body deadline, so the connection stays open
for the next request. When the body cannot be read that way (over the cap, too slow, cut short,
or the answer is a 413 or a 408, which say the body is not wanted), the answer says
``Connection: close``, and the client opens a new connection for its next request.
"""

from __future__ import annotations

import asyncio
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from .timeouts import declares_body

# Answers that refuse the body itself: it is not read, the connection closes.
_REFUSING = frozenset({408, 413})


class DrainUnread:
    """ASGI wrapper: before an HTTP answer starts, the request's unread body is read and
    dropped (at most ``cap`` bytes, 0 for no cap, within ``seconds``), or the answer says
    ``Connection: close``."""

    def __init__(self, app: ASGIApp, cap: int, seconds: float) -> None:
        self.app, self.cap, self.seconds = app, cap, seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not declares_body(scope):
            await self.app(scope, receive, send)
            return
        whole = False  # the body's last message was received, or the client left

        async def receive_noting_the_end() -> Message:
            nonlocal whole
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body"):
                whole = True
            return message

        async def drained() -> bool:
            """Whether the rest of the body was read (it arrived, within the cap and time)."""
            read = 0
            try:
                async with asyncio.timeout(self.seconds if self.seconds > 0 else None):
                    while not whole:
                        message = await receive_noting_the_end()
                        if message["type"] != "http.request":
                            return False
                        read += len(message.get("body", b""))
                        if self.cap and read > self.cap:
                            return False
            except TimeoutError:
                return False
            return True

        async def send_after_the_body(message: Message) -> None:
            starts = message["type"] == "http.response.start"
            if starts and not whole and (message.get("status") in _REFUSING or not await drained()):
                headers: list[Any] = list(message.get("headers", []))
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive_noting_the_end, send_after_the_body)
