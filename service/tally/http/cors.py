"""CORS preflights refused in Tally's error shape.

Litestar answers a preflight itself, in its CORS middleware, before any route or exception
handler: a refused one (a request header or method the API does not allow) came back as
``text/plain`` "Disallowed CORS headers". :class:`JsonCors` is that middleware with the refusal
rendered as every other error is, ``{"error": "Disallowed CORS headers"}`` (same status, 400);
what it allows and the headers of an allowed preflight are Litestar's own.
"""

from __future__ import annotations

from typing import Any

# Not exported by Litestar (2.9 made it internal); the app builds it from ``cors_config`` and
# :func:`install` swaps in this subclass, so that the config stays the one place CORS is set.
from litestar.middleware._internal.cors import CORSMiddleware

from .errors import error_response


class JsonCors(CORSMiddleware):
    """Litestar's CORS middleware; a refused preflight answers in the contract's JSON shape."""

    def _create_preflight_response(self, origin: str, request_headers: Any) -> Any:
        response = super()._create_preflight_response(
            origin=origin, request_headers=request_headers
        )
        status = response.status_code or 400
        if status < 400:
            return response
        return error_response(status, str(response.content))


def install(litestar: Any) -> None:
    """Replace the app's CORS middleware (built from its ``cors_config``) with :class:`JsonCors`."""
    handler = litestar.asgi_handler
    if type(handler) is CORSMiddleware:
        litestar.asgi_handler = JsonCors(app=handler.app, config=handler.config)
