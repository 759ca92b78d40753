"""Route handlers: credentials by guard, payloads by msgspec type, work delegated to the domain and
storage layers. No SQL here."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Controller, HttpMethod, Request, delete, patch, post, route
from litestar.datastructures import State
from litestar.exceptions import NotFoundException
from litestar.openapi.spec import Example
from litestar.params import JSONBody, QueryParameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_202_ACCEPTED, HTTP_204_NO_CONTENT

from ..domain.ids import OBJECT_ID_PATTERN, iso, key_preview
from ..domain.projects import DEFAULT_TIMEZONE
from ..storage import dashboard as dashboard_queries
from ..storage.client import StorageUnavailable, together
from ..storage.ingestlog import LogRefused
from ..storage.projects import UNTITLED_LABEL, ProjectStore
from . import compare
from . import schemas as s
from .access import (
    PROJECT_NOT_FOUND,
    ProjectIdParam,
    asking_user,
    error_responses,
    get_head,
    owned_project,
    project_route,
)
from .auth import SESSION_SECURITY, api_key_guard, session_guard
from .collect_fast import accept
from .decoding import StructDTO
from .gone import while_connected
from .project_settings import clean_label, clean_name, clean_timezone, listed
from .ratelimit import client_ip
from .views import build_dashboard

KeyIdParam = Annotated[
    str,
    QueryParameter(name="keyId", pattern=OBJECT_ID_PATTERN, description="id of the key to revoke"),
]


# How long a project's deletion waits for the ingest log to load before answering 503.
DELETE_LOAD_TIMEOUT = 30.0


async def loaded_before_purge(state: State) -> None:
    """Wait until the events acknowledged with the keys just revoked are loaded, so that the
    purge that follows removes them too: a 202 means "in the ingest log", loaded about a second
    later, and those of a site still sending traffic would otherwise be stored after the purge.
    This process's appends under way are written first (a later one finds its key revoked);
    with several workers (a ClickHouse server) the others refuse the keys within the key
    refresh, so their log is waited for until then, and one second more for what they were
    writing. Every worker of this data folder counts (the log's ``data_through_ms``); another
    host's is not seen."""
    settings = state.settings
    try:
        async with asyncio.timeout(DELETE_LOAD_TIMEOUT):
            await state.ingest.settled()
            cut_ms = time.time_ns() // 1_000_000
            if not settings.embedded:
                cut_ms += int((settings.key_refresh_seconds + 1.0) * 1000)
            await state.loader.loaded_through(cut_ms)
    except TimeoutError:
        raise StorageUnavailable("the ingest log is not loaded yet") from None


async def purge(state: State, project_id: str, *, only_if_keys: bool = False) -> None:
    """Revoke the project's live keys, wait for what was acknowledged with them to be loaded,
    then delete its rows from every table. ``only_if_keys``: nothing when no key was live."""
    store: ProjectStore = state.store
    revoked = await state.storage.run(store.revoke_project_keys, project_id)
    for record in revoked:
        state.registry.apply(record)
    if revoked or not only_if_keys:
        await loaded_before_purge(state)
        await state.storage.run(store.purge_project_rows, project_id)


class ProjectController(Controller):
    path = "/api/projects"
    guards = [session_guard]  # noqa: RUF012 - Litestar's declaration style
    tags = ["projects"]  # noqa: RUF012
    security = SESSION_SECURITY

    @get_head(
        "/", responses=error_responses(401, 429, 503), summary="List the signed-in user's projects"
    )
    async def list_projects(self, request: Request[Any, Any, Any], state: State) -> s.ProjectList:
        user = asking_user(request)
        rows = await state.storage.run(state.store.list_projects, user)
        return s.ProjectList(projects=[listed(r) for r in rows])

    @post(
        "/",
        status_code=HTTP_201_CREATED,
        responses=error_responses(400, 401, 429, 503),
        summary="Create a project and its Default API key",
        dto=StructDTO[s.CreateProject],
        return_dto=None,
    )
    async def create_project(
        self, request: Request[Any, Any, Any], state: State, data: JSONBody[s.CreateProject]
    ) -> s.ProjectCreated:
        user = asking_user(request)
        name = clean_name(data.name)
        timezone = await clean_timezone(
            state, DEFAULT_TIMEZONE if data.timezone is None else data.timezone
        )
        project, key, record = await state.storage.run(
            state.store.create_project, user, name, timezone
        )
        state.registry.apply(record)
        return s.ProjectCreated(project_id=project.id, api_key=key, key_id=record.id)

    @patch(
        "/",
        responses=error_responses(400, 401, 404, 429, 503),
        summary="Rename a project, or change its time zone or bot rule",
        description="Only the fields given change. 200 with the project as listed.",
        dto=StructDTO[s.UpdateProject],
        return_dto=None,
    )
    async def update_project(
        self, request: Request[Any, Any, Any], state: State, data: JSONBody[s.UpdateProject]
    ) -> s.Project:
        user = asking_user(request)
        name = None if data.name is None else clean_name(data.name)
        timezone = None if data.timezone is None else await clean_timezone(state, data.timezone)
        async with state.project_locks.hold(data.project_id):  # not inside a deletion
            row = await state.storage.run(
                state.store.update_project,
                user,
                data.project_id,
                name=name,
                timezone=timezone,
                exclude_bots=data.exclude_bots,
            )
        if row is None:
            raise NotFoundException(detail=PROJECT_NOT_FOUND)
        return listed(row)

    @delete(
        "/",
        status_code=HTTP_204_NO_CONTENT,
        responses=error_responses(400, 401, 404, 429, 503),
        summary="Delete a project, its keys, events and rollup rows",
        description="Its keys stop working at once; 204 once its rows are deleted everywhere.",
    )
    async def delete_project(
        self, request: Request[Any, Any, Any], state: State, project_id: ProjectIdParam
    ) -> None:
        user = asking_user(request)
        store: ProjectStore = state.store
        async with state.project_locks.hold(project_id):  # no PATCH or new key meanwhile
            project = await state.storage.run(store.get_project, user, project_id)
            if project is None:
                raise NotFoundException(detail=PROJECT_NOT_FOUND)
            # Keys first (this process refuses them from now on, others within the key
            # refresh), then the rows, then the marker: a failure part-way leaves the project
            # listed, so the owner can simply delete it again.
            await purge(state, project_id)
            await state.storage.run(store.mark_deleted, user, project)
            # A key another process created meanwhile (it had checked the project before the
            # marker): revoked now, and what was sent with it purged too.
            await purge(state, project_id, only_if_keys=True)

    @get_head(
        "/keys",
        responses=error_responses(400, 401, 404, 429, 503),
        summary="List a project's API keys",
    )
    async def list_keys(
        self, request: Request[Any, Any, Any], state: State, project_id: ProjectIdParam
    ) -> s.KeyList:
        user = asking_user(request)
        await owned_project(state, user, project_id)
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
        responses=error_responses(400, 401, 404, 429, 503),
        summary="Create another API key for a project (shown once)",
        dto=StructDTO[s.CreateKey],
        return_dto=None,
    )
    async def create_key(
        self, request: Request[Any, Any, Any], state: State, data: JSONBody[s.CreateKey]
    ) -> s.KeyCreated:
        user = asking_user(request)
        label = clean_label(data.label)
        store: ProjectStore = state.store
        async with state.project_locks.hold(data.project_id):  # not inside a deletion
            await owned_project(state, user, data.project_id)
            key, record = await state.storage.run(store.create_key, data.project_id, label)
            if await state.storage.run(store.get_project, user, data.project_id) is None:
                # deleted by another process since the check: the key must not outlive it
                record = await state.storage.run(store.revoke_key, data.project_id, record.id)
                if record is not None:
                    state.registry.apply(record)
                raise NotFoundException(detail=PROJECT_NOT_FOUND)
            state.registry.apply(record)
        return s.KeyCreated(
            api_key=key,
            id=record.id,
            label=label or UNTITLED_LABEL,
            key_preview=key_preview(key),
            created_at=iso(record.updated_at),  # a new key's creation is its last change
        )

    @delete(
        "/keys",
        status_code=HTTP_204_NO_CONTENT,
        responses=error_responses(400, 401, 404, 429, 503),
        summary="Revoke an API key",
    )
    async def revoke_key(
        self,
        request: Request[Any, Any, Any],
        state: State,
        project_id: ProjectIdParam,
        key_id: KeyIdParam,
    ) -> None:
        user = asking_user(request)
        await owned_project(state, user, project_id)
        record = await state.storage.run(state.store.revoke_key, project_id, key_id)
        if record is None:
            raise NotFoundException(detail="Key not found")
        state.registry.apply(record)


@get_head(
    "/api/dashboard",
    **project_route("dashboard"),
    summary="Aggregated analytics of a project",
    description="The window is days (default 14) or from/to (local dates, inclusive, at most "
    "366 days). filters (JSON array of [operator, dimension, [values...]]) narrows every number "
    "but liveVisitors; compare=previous_period|previous_year adds comparison. README: 'Filters, "
    "ranges and comparison'.",
)
async def dashboard(
    request: Request[Any, Any, Any],
    state: State,
    project_id: ProjectIdParam,
    days: compare.OptionalDaysParam = None,
    from_: compare.FromParam = None,
    to: compare.ToParam = None,
    filters: compare.FiltersParam = None,
    compare_: compare.CompareParam = None,
) -> compare.ComparedDashboard:
    query, against = await compare.asked_query(
        request,
        state,
        project_id,
        days=days,
        from_=from_,
        to=to,
        filters=filters,
        compare=compare_,
    )
    # Taken before the queries: whatever it promises is loaded by the time they read.
    through = datetime.fromtimestamp(state.ingest.data_through_ms() / 1000, UTC)
    if against is None:
        rows = await while_connected(request, dashboard_queries.fetch(state.storage, query))
        result = build_dashboard(rows, query)
        result.data_through = iso(through)
        return compare.compared_dashboard(result, None, None)
    # The other range's summary does not depend on this one's: both are asked at once.
    earlier_query = compare.earlier_query(query, against)
    rows, earlier_rows = await while_connected(
        request,
        together(
            dashboard_queries.fetch(state.storage, query),
            dashboard_queries.fetch_summary(state.storage, earlier_query),
        ),
    )
    result = build_dashboard(rows, query)
    result.data_through = iso(through)
    earlier = build_dashboard(earlier_rows, earlier_query)
    return compare.compared_dashboard(result, earlier, earlier_query)


COLLECT_EXAMPLE = Example(
    value={"events": [{"name": "pageview", "path": "/pricing", "visitorId": "v1"}]}
)


@post(
    "/api/collect",
    status_code=HTTP_202_ACCEPTED,
    guards=[api_key_guard],
    responses=error_responses(400, 401, 413, 429, 503),
    tags=["collect"],
    security=[{"apiKey": []}, {"apiKeyQuery": []}],
    summary="Ingest 1 to 100 events",
    description="202 is sent once the events are durably written (fsynced) to the ingest log, "
    "from which they are loaded into ClickHouse within about a second. JSON or text/plain bodies.",
    dto=StructDTO[s.CollectBody],
    return_dto=None,
)
async def collect(
    request: Request[Any, Any, Any], state: State, data: JSONBody[s.CollectBody]
) -> s.Accepted:
    # Most requests are answered by http/collect_fast.py, which shares this step.
    accepted = await accept(
        state,
        request.state.api_key,
        data.events,
        client_ip(request),
        request.headers.get("user-agent", ""),
    )
    return s.Accepted(accepted=accepted)


@route(
    "/api/health/live",
    http_method=[HttpMethod.GET, HttpMethod.HEAD],
    tags=["health"],
    summary="200 while this worker serves requests, whether ClickHouse answers or not",
    description="For a liveness probe: restarting Tally does not bring back ClickHouse, and while "
    "it is away collect keeps acknowledging to the ingest log. The log's backlog as in "
    "/api/health, which says whether ClickHouse answers (and answers 503 while it does not).",
)
async def alive(state: State) -> s.Alive:
    return s.Alive(status="ok", backlog=ingest_backlog(state))


def ingest_backlog(state: State) -> s.IngestBacklog:
    """This worker's ingest log and loader, from memory (no storage is asked)."""
    backlog = state.ingest.backlog()
    loader = state.loader
    return s.IngestBacklog(
        segments=backlog.segments,
        events=backlog.events,
        bytes=backlog.bytes,
        # By the monotonic clock (the wall clock may be set back while the event waits).
        oldest_age_seconds=backlog.oldest_age_seconds,
        acknowledged_events=state.ingest.acknowledged,
        inserts=loader.inserts,
        loaded_events=loader.loaded_events,
        failed_loads=loader.failures,
        refused_events=state.ingest.refused,
    )


@route(
    "/api/health",
    # HEAD answers as GET does, with the same headers and no body (uptime checks and load
    # balancers probe with HEAD; the server leaves the body out).
    http_method=[HttpMethod.GET, HttpMethod.HEAD],
    tags=["health"],
    summary="200 once Tally can reach its storage (503 while it cannot, or while this worker's "
    "ingest log cannot be written)",
    responses=error_responses(503),
)
async def health(state: State) -> s.Health:
    if state.ingest.write_error is not None:
        await state.ingest.recheck_async()  # the disk may take writes again
    if state.ingest.write_error is not None:
        # Collect answers 503 now, whatever ClickHouse says: so does the health check.
        raise LogRefused(f"the ingest log cannot be written: {state.ingest.write_error}")
    # A read of the table every report reads, not ``SELECT 1``: a server whose schema is not
    # there yet (a pod started before the migrate Job of a first install) or is not readable
    # (a table gone, a user without the grant) fails every report, so it is not ready either.
    await state.storage.aquery(f"SELECT 1 FROM {state.storage.database}.events LIMIT 0")
    return s.Health(
        status="ok",
        storage="embedded" if state.storage.target.kind == "chdb" else "server",
        backlog=ingest_backlog(state),
        reports=s.ReportLane(
            threads=state.storage.report_threads,
            memory_mb=state.storage.report_memory // 2**20,
            **state.storage.reports,
        ),
    )
