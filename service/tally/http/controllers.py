"""Route handlers: credentials by guard, payloads by msgspec type, work delegated to the domain and
storage layers. No SQL here."""

from __future__ import annotations

import time
from typing import Annotated, Any

from litestar import Controller, Request, delete, get, post
from litestar.datastructures import State
from litestar.exceptions import NotFoundException
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Example
from litestar.params import JSONBody, QueryParameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_202_ACCEPTED, HTTP_204_NO_CONTENT

from ..domain import events as event_rules
from ..domain.ids import OBJECT_ID_PATTERN, iso, utcnow
from ..domain.metrics import MAX_DAYS
from ..query import Query
from ..storage import dashboard as dashboard_queries
from ..storage.projects import ProjectStore
from . import schemas as s
from .auth import api_key_guard, session_guard
from .decoding import StructDTO
from .ratelimit import RateLimits, client_ip
from .views import build_dashboard

MAX_BODY_BYTES = 1024 * 1024

ProjectIdParam = Annotated[
    str,
    QueryParameter(
        name="projectId", pattern=OBJECT_ID_PATTERN, description="24-character object id"
    ),
]
DaysParam = Annotated[
    int,
    QueryParameter(
        ge=1,
        le=MAX_DAYS,
        description=f"lookback window in calendar days of the project's time zone, 1 to {MAX_DAYS}",
    ),
]
KeyIdParam = Annotated[
    str,
    QueryParameter(name="keyId", pattern=OBJECT_ID_PATTERN, description="id of the key to revoke"),
]


def _errors(*statuses: int) -> dict[int, ResponseSpec]:
    descriptions = {
        400: "invalid payload or query",
        401: "missing or invalid credentials",
        404: "project (or key) not found, or owned by another user",
        413: "body over 1 MiB",
        429: "rate limit exceeded (see Retry-After)",
        503: "storage unavailable; retry (see Retry-After)",
    }
    return {
        code: ResponseSpec(
            data_container=s.Error, description=descriptions[code], generate_examples=False
        )
        for code in statuses
    }


def _user(request: Request[Any, Any, Any]) -> str:
    user: str = request.state.user_id
    limits: RateLimits = request.app.state.limits
    limits.check(limits.per_user, "user", user)
    return user


async def _owned_project(state: State, user: str, project_id: str) -> None:
    store: ProjectStore = state.store
    if not await state.storage.run(store.owns, user, project_id):
        raise NotFoundException(detail="Project not found")


async def _project_settings(state: State, user: str, project_id: str) -> tuple[str, bool]:
    """The project's time zone and whether bots are left out. Until projects carry them
    (ProjectStore.owned_settings), every project is UTC and leaves bots out."""
    return "UTC", True


class ProjectController(Controller):
    path = "/api/projects"
    guards = [session_guard]  # noqa: RUF012 - Litestar's declaration style
    tags = ["projects"]  # noqa: RUF012
    security = [{"session": []}]  # noqa: RUF012

    @get("/", responses=_errors(401, 429, 503), summary="List the signed-in user's projects")
    async def list_projects(self, request: Request[Any, Any, Any], state: State) -> s.ProjectList:
        user = _user(request)
        rows = await state.storage.run(state.store.list_projects, user)
        return s.ProjectList(
            projects=[s.Project(id=r.id, name=r.name, created_at=iso(r.created_at)) for r in rows]
        )

    @post(
        "/",
        status_code=HTTP_201_CREATED,
        responses=_errors(400, 401, 429, 503),
        summary="Create a project and its Default API key",
        dto=StructDTO[s.CreateProject],
        return_dto=None,
    )
    async def create_project(
        self, request: Request[Any, Any, Any], state: State, data: JSONBody[s.CreateProject]
    ) -> s.ProjectCreated:
        user = _user(request)
        project, key, record = await state.storage.run(state.store.create_project, user, data.name)
        state.registry.apply(record)
        return s.ProjectCreated(project_id=project.id, api_key=key)

    @get("/keys", responses=_errors(400, 401, 404, 429, 503), summary="List a project's API keys")
    async def list_keys(
        self, request: Request[Any, Any, Any], state: State, project_id: ProjectIdParam
    ) -> s.KeyList:
        user = _user(request)
        await _owned_project(state, user, project_id)
        rows = await state.storage.run(state.store.list_keys, project_id)
        keys = []
        for r in rows:
            pending = state.registry.pending_usage(r.id)
            last = max(filter(None, (r.last_used_at, pending)), default=None)
            keys.append(
                s.ApiKey(
                    id=r.id,
                    label=r.label,
                    key_preview=r.key_preview,
                    created_at=iso(r.created_at),
                    last_used_at=iso(last) if last else None,
                )
            )
        return s.KeyList(keys=keys)

    @post(
        "/keys",
        status_code=HTTP_201_CREATED,
        responses=_errors(400, 401, 404, 429, 503),
        summary="Create another API key for a project (shown once)",
        dto=StructDTO[s.CreateKey],
        return_dto=None,
    )
    async def create_key(
        self, request: Request[Any, Any, Any], state: State, data: JSONBody[s.CreateKey]
    ) -> s.KeyCreated:
        user = _user(request)
        await _owned_project(state, user, data.project_id)
        key, record = await state.storage.run(state.store.create_key, data.project_id, data.label)
        state.registry.apply(record)
        return s.KeyCreated(api_key=key)

    @delete(
        "/keys",
        status_code=HTTP_204_NO_CONTENT,
        responses=_errors(400, 401, 404, 429, 503),
        summary="Revoke an API key",
    )
    async def revoke_key(
        self,
        request: Request[Any, Any, Any],
        state: State,
        project_id: ProjectIdParam,
        key_id: KeyIdParam,
    ) -> None:
        user = _user(request)
        await _owned_project(state, user, project_id)
        record = await state.storage.run(state.store.revoke_key, project_id, key_id)
        if record is None:
            raise NotFoundException(detail="Key not found")
        state.registry.apply(record)


@get(
    "/api/dashboard",
    guards=[session_guard],
    responses=_errors(400, 401, 404, 429, 503),
    tags=["dashboard"],
    security=[{"session": []}],
    summary="Aggregated analytics of a project",
)
async def dashboard(
    request: Request[Any, Any, Any], state: State, project_id: ProjectIdParam, days: DaysParam = 14
) -> s.Dashboard:
    user = _user(request)
    await _owned_project(state, user, project_id)
    tz, exclude_bots = await _project_settings(state, user, project_id)
    query = Query(project_id, days, utcnow(), tz=tz, exclude_bots=exclude_bots)
    rows = await dashboard_queries.fetch(state.storage, query)
    return build_dashboard(rows, query)


COLLECT_EXAMPLE = Example(
    value={"events": [{"name": "pageview", "path": "/pricing", "visitorId": "v1"}]}
)


@post(
    "/api/collect",
    status_code=HTTP_202_ACCEPTED,
    guards=[api_key_guard],
    request_max_body_size=MAX_BODY_BYTES,
    responses=_errors(400, 401, 413, 429, 503),
    tags=["collect"],
    security=[{"apiKey": []}, {"apiKeyQuery": []}],
    summary="Ingest 1 to 100 events",
    description="202 is sent once the events are durably stored. JSON or text/plain bodies.",
    dto=StructDTO[s.CollectBody],
    return_dto=None,
)
async def collect(
    request: Request[Any, Any, Any], state: State, data: JSONBody[s.CollectBody]
) -> s.Accepted:
    record = request.state.api_key
    limits: RateLimits = state.limits
    ip = client_ip(request)
    limits.check(limits.per_key, "key", record.id)
    limits.check(limits.per_ip, "ip", ip)
    rows = event_rules.to_rows(
        data.events,
        project_id=record.project_id,
        key_id=record.id,
        received_ms=time.time_ns() // 1_000_000,
        ip=state.hash_ip(ip),
        user_agent=request.headers.get("user-agent", ""),
    )
    await state.writer.write(rows, size=len(await request.body()))
    state.registry.touch(record)
    return s.Accepted(accepted=len(rows))


@get(
    "/api/health",
    tags=["health"],
    summary="200 once Tally can reach its storage",
    responses=_errors(503),
)
async def health(state: State) -> s.Health:
    await state.storage.aquery("SELECT 1")
    return s.Health(
        status="ok", storage="embedded" if state.storage.target.kind == "chdb" else "server"
    )
