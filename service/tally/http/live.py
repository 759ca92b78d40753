"""``GET /api/live``: a project's live visitors, for the dashboard page to poll. No SQL here."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.datastructures import State
from msgspec import Struct

from ..domain.ids import utcnow
from ..domain.metrics import LIVE_WINDOW
from ..storage.live import live_visitors
from .access import ProjectIdParam, asking_user, get_head, project_route, project_settings

WINDOW_SECONDS = int(LIVE_WINDOW.total_seconds())


class Live(Struct, rename="camel"):
    live_visitors: int  # distinct visitors with an event in the last window_seconds
    window_seconds: int


@get_head(
    "/api/live",
    **project_route("dashboard"),
    summary="A project's live visitors (the last 5 minutes)",
    description="The dashboard's liveVisitors on its own: distinct visitor ids with an event in "
    "the last 5 minutes (bots left out when the project excludes them; filters do not apply). "
    "It reads only those minutes, so a page may poll it every few seconds.",
)
async def live(request: Request[Any, Any, Any], state: State, project_id: ProjectIdParam) -> Live:
    user = asking_user(request)
    _, exclude_bots = await project_settings(state, user, project_id)
    count = await live_visitors(state.storage, project_id, utcnow(), exclude_bots=exclude_bots)
    return Live(live_visitors=count, window_seconds=WINDOW_SECONDS)
