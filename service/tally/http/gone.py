"""A client that goes away before its answer: what it asked for stops.

A site owner clicking through filters leaves each view before it is answered; every view asks
several report queries (storage/client.py's report lane). Left running, the views clicked past
hold up the one clicked to: on the 10M-event tenant, five abandoned source-filtered dashboards
made the sixth take 9.6 s instead of 2.2-2.5 s (scripts/lanes_load.py ... abandon 5; 5.2 s now).
:func:`while_connected` cancels the handler's work when the client disconnects: the report
queries still waiting for a thread never run, those running are killed, and the answer is 499
(nobody is left to read it).

A watch that stops (its handler's work is done) cancels its pending ``receive()``. granian
answers the next ``receive()`` after such a cancellation with ``http.disconnect`` though the
client is still there, when the cancelled one had not been answered yet: a streamed export,
whose response listens for the client going away, was then cut off after its first chunk
(under load, when the first chunk was read before granian handed over the GET's empty body).
:func:`shielded_receive` keeps the server's ``receive()`` running through a caller's
cancellation, for the next caller to take its answer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextlib import suppress
from typing import Any, TypeVar

from litestar import Request
from litestar.exceptions import HTTPException
from litestar.types import ASGIApp, Message, Receive, Scope, Send

T = TypeVar("T")


class ClientGone(HTTPException):
    status_code = 499  # nginx's "client closed request": nobody is left to read it


async def disconnected(request: Request[Any, Any, Any]) -> None:
    """Returns once the client has disconnected (the body, if any, is read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def while_connected(request: Request[Any, Any, Any], work: Awaitable[T]) -> T:
    """``work``'s result; if the client disconnects first, ``work`` is cancelled and
    :class:`ClientGone` raised."""
    task = asyncio.ensure_future(work)
    watching = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait([task, watching], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the handler itself is cancelled (a shutdown)
        task.cancel()
        raise
    finally:
        watching.cancel()
    if not task.done():
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        raise why_the_watch_ended(watching)
    return task.result()


def why_the_watch_ended(watching: asyncio.Future[Any]) -> BaseException:
    """What to raise when the watch for the client going away ended before the work: its own
    error (a body declared and not sent in time, http/timeouts.py: 408) or the client gone."""
    error = watching.exception() if watching.done() and not watching.cancelled() else None
    return error or ClientGone(detail="Client closed request")


def shielded_receive(app: ASGIApp) -> ASGIApp:
    """Litestar middleware, the outermost: an HTTP request's ``receive()`` whose caller is
    cancelled goes on waiting for the server's answer, and the next call takes it; it is never
    cancelled itself while the request is handled (see the module's docstring)."""

    async def handle(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        pending: asyncio.Future[Message] | None = None

        async def answer() -> Message:
            return await receive()

        async def receive_shielded() -> Message:
            nonlocal pending
            if pending is None:
                pending = asyncio.ensure_future(answer())
            waiting = pending
            # A cancelled caller leaves ``waiting`` running (shield retrieves its outcome).
            message = await asyncio.shield(waiting)
            if pending is waiting:
                pending = None
            return message

        try:
            await app(scope, receive_shielded, send)
        finally:
            if pending is not None:
                pending.cancel()  # the request is over: nobody asks for its answer

    return handle
