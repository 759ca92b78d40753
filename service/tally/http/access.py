"""Who is asking and what they may see, shared by every session handler: the signed-in user (rate
limited per user), the projects they own (404 ``Project not found`` otherwise, so that another
user's project looks like none), and the error responses each route documents in OpenAPI."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from litestar import HttpMethod, Request, route
from litestar.datastructures import State
from litestar.exceptions import NotFoundException
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import QueryParameter

from ..domain.ids import OBJECT_ID_PATTERN
from ..storage.projects import ProjectStore
from . import schemas as s
from .auth import SESSION_SECURITY, session_guard
from .ratelimit import RateLimits

PROJECT_NOT_FOUND = "Project not found"

ProjectIdParam = Annotated[
    str,
    QueryParameter(
        name="projectId", pattern=OBJECT_ID_PATTERN, description="24-character object id"
    ),
]

ERROR_DESCRIPTIONS = {
    400: "invalid payload or query",
    401: "missing or invalid credentials",
    404: "project (or key) not found, or owned by another user",
    408: "the body did not arrive in time (TALLY_BODY_TIMEOUT_SECONDS, default 10 s)",
    413: "body over the cap: TALLY_MAX_BODY_BYTES (default 7 MiB) on collect, 64 KiB on the "
    "other endpoints; refused before it is read",
    429: "rate limit exceeded (see Retry-After)",
    503: "storage unavailable; retry (see Retry-After)",
}


def error_responses(*statuses: int) -> dict[int, ResponseSpec]:
    """The OpenAPI ``responses`` of a route that may answer with these error statuses."""
    return {
        code: ResponseSpec(
            data_container=s.Error, description=ERROR_DESCRIPTIONS[code], generate_examples=False
        )
        for code in statuses
    }


def project_route(tag: str) -> dict[str, Any]:
    """The options of a session route about one project (``@get(path, **project_route(tag),
    ...)``): the session guard and its OpenAPI security scheme, the tag, and the error statuses
    it may answer."""
    return {
        "guards": [session_guard],
        "responses": error_responses(400, 401, 404, 429, 503),
        "tags": [tag],
        "security": SESSION_SECURITY,
    }


def asking_user(request: Request[Any, Any, Any]) -> str:
    """The signed-in user's id (set by the session guard), counted against the per-user limit."""
    user: str = request.state.user_id
    limits: RateLimits = request.app.state.limits
    limits.check(limits.per_user, "user", user)
    return user


class ProjectLocks:
    """One lock per project, kept while a request holds or waits for it: this process changes a
    project (PATCH, a new key, DELETE) one request at a time, so that a PATCH or a new key cannot
    land in the middle of a deletion and outlive it. (Another process's writes are ordered by
    the rows themselves: storage/projects.py.)"""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, project_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(project_id, (asyncio.Lock(), 0))
        self._locks[project_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[project_id]
            if users == 1:
                del self._locks[project_id]
            else:
                self._locks[project_id] = (lock, users - 1)


async def owned_project(state: State, user: str, project_id: str) -> None:
    """Nothing when ``user`` owns the project; 404 otherwise."""
    store: ProjectStore = state.store
    if not await state.storage.run(store.owns, user, project_id):
        raise NotFoundException(detail=PROJECT_NOT_FOUND)


async def project_settings(state: State, user: str, project_id: str) -> tuple[str, bool]:
    """The project's time zone and whether bots are left out; 404 unless ``user`` owns it (one
    cached lookup answers both)."""
    store: ProjectStore = state.store
    settings = await state.storage.run(store.owned_settings, user, project_id)
    if settings is None:
        raise NotFoundException(detail=PROJECT_NOT_FOUND)
    return settings.timezone, settings.exclude_bots


async def true_allow(message: Any, scope: Any) -> None:
    """``before_send``: a plain OPTIONS answer's ``Allow`` lists every method of its path.
    Litestar's own OPTIONS handler keeps the methods of the handlers its path had when it was
    made: on /api/projects and /api/projects/keys, whose handlers come from a controller, it
    listed OPTIONS and POST alone."""
    if message["type"] != "http.response.start" or scope.get("method") != "OPTIONS":
        return
    headers = message.get("headers", [])
    if not any(name.lower() == b"allow" for name, _ in headers):
        return  # a CORS preflight's answer
    path = scope["path"].rstrip("/") or "/"
    for known in scope["litestar_app"].routes:
        if known.path == path:
            methods = ", ".join(sorted(known.methods)).encode()
            message["headers"] = [
                (name, methods if name.lower() == b"allow" else value) for name, value in headers
            ]
            return


def get_head(path: str, **options: Any) -> Any:
    """``@get`` that answers HEAD too (RFC 9110 9.3.2: HEAD wherever GET is; uptime checks and
    scripts probe with it): the same status and headers, no body."""
    return route(path, http_method=[HttpMethod.GET, HttpMethod.HEAD], **options)
