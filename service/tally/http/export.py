"""``GET /api/export``: a project's raw events for a range of UTC days, streamed as CSV, NDJSON or
Parquet. The SQL and the formats are storage's (storage/export.py); this module checks the
session, the owner, the rate limit and the query, and moves chunks from a worker thread to the
response. A client that goes away stops the query."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from functools import lru_cache
from typing import Annotated, Any

from limits import RateLimitItem, parse
from litestar import Request
from litestar.datastructures import State
from litestar.exceptions import ValidationException
from litestar.params import QueryParameter
from litestar.response import Stream

from ..domain.ids import OBJECT_ID_PATTERN
from ..storage import export as export_storage
from ..storage.export import FORMATS, ExportSpec
from .access import asking_user, get_head, owned_project, project_route
from .compression import NO_COMPRESSION, accepts_gzip, gzip_stream
from .gone import disconnected, why_the_watch_ended
from .messages import DATE_MESSAGE, OBJECT_ID
from .ratelimit import RateLimits

log = logging.getLogger("tally.export")

DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

ExportProjectId = Annotated[
    str | None,
    QueryParameter(
        name="projectId",
        description="the project's id: 24 lowercase hex characters",
        required=True,
        schema_extra={"oneOf": None, "type": "string", "pattern": OBJECT_ID_PATTERN},
    ),
]
FromParam = Annotated[
    str | None,
    QueryParameter(
        name="from",
        description="first UTC day of the range, YYYY-MM-DD (inclusive)",
        required=True,
        schema_extra={"oneOf": None, "type": "string", "format": "date", "pattern": DATE.pattern},
    ),
]
ToParam = Annotated[
    str | None,
    QueryParameter(
        name="to",
        description="last UTC day of the range, YYYY-MM-DD (inclusive; not before `from`)",
        required=True,
        schema_extra={"oneOf": None, "type": "string", "format": "date", "pattern": DATE.pattern},
    ),
]
FormatParam = Annotated[
    str | None,
    QueryParameter(
        name="format",
        description="csv (with a header row), ndjson (one JSON object per line) or parquet; "
        "default csv",
        schema_extra={"oneOf": None, "type": "string", "enum": list(FORMATS)},
    ),
]


def _invalid(details: list[tuple[str, str]]) -> ValidationException:
    return ValidationException(
        detail="Invalid query",
        extra=[{"key": key, "message": message, "source": "query"} for key, message in details],
    )


def _day(value: str | None, name: str, problems: list[tuple[str, str]]) -> date | None:
    if value is None:  # given empty (``from=``), it is not a date: said so below
        problems.append((name, "is required"))
        return None
    try:
        if not DATE.match(value):
            raise ValueError
        day = date.fromisoformat(value)
    except ValueError:
        problems.append((name, DATE_MESSAGE))
        return None
    return day


def parse_query(
    project_id: str | None, first: str | None, last: str | None, fmt: str | None, hide_ip: bool
) -> ExportSpec:
    """The export the query asks for; ValidationException (400 Invalid query) naming each rule
    that failed."""
    problems: list[tuple[str, str]] = []
    if project_id is None:  # given empty, it is not an id: said so as on every endpoint
        problems.append(("projectId", "is required"))
    elif not re.match(OBJECT_ID_PATTERN, project_id):
        problems.append(("projectId", OBJECT_ID))
    start = _day(first, "from", problems)
    end = _day(last, "to", problems)
    if start and end and end < start:
        problems.append(("to", "must not be before from"))
    fmt = "csv" if fmt is None else fmt  # ``format=`` is no format (it was read as csv)
    if fmt not in FORMATS:
        problems.append(("format", "must be one of csv, ndjson, parquet"))
    if problems:
        raise _invalid(problems)
    assert project_id and start and end
    # Any dates: a range reaching past the days anything is stored on reads what is inside, and
    # one wholly outside them reads nothing (ExportSpec.start and .end).
    return ExportSpec(project_id=project_id, first=start, last=end, fmt=fmt, hide_ip=hide_ip)


@lru_cache(maxsize=8)
def _limit(value: str) -> RateLimitItem | None:
    return parse(value) if value.strip() else None


async def _stream(
    request: Request[Any, Any, Any], state: State, spec: ExportSpec, gzipped: bool = False
) -> AsyncIterator[bytes]:
    """The export's chunks. The first is read before the response starts, so that a storage
    failure is still a 503 rather than a cut-off 200; a client that leaves meanwhile (a Parquet
    file takes a while to write) stops the query as one that leaves later does."""
    storage = state.storage
    # One thread per export: the embedded engine's stream belongs to the thread that opened it.
    executor = ThreadPoolExecutor(1, thread_name_prefix="tally-export")
    loop = asyncio.get_running_loop()
    source: Iterator[bytes] = export_storage.chunks(storage, spec)
    if gzipped:  # compressed on the export's thread, as it is read
        source = gzip_stream(source)
    reading: asyncio.Future[Any] = loop.run_in_executor(executor, next, source, None)
    watching: asyncio.Future[Any] = asyncio.ensure_future(disconnected(request))
    try:
        await asyncio.wait([reading, watching], return_when=asyncio.FIRST_COMPLETED)
        if not reading.done():
            raise why_the_watch_ended(watching)
        first = reading.result()
    except BaseException:
        _stop(loop, executor, source, storage, spec)
        raise
    finally:
        watching.cancel()

    async def body() -> AsyncIterator[bytes]:
        finished = False
        sent = 0
        try:
            chunk = first
            while chunk is not None:
                yield chunk
                sent += len(chunk)
                chunk = await loop.run_in_executor(executor, next, source, None)
            finished = True
        except Exception as exc:
            # The 200 and part of the file are out: the client gets a body cut off short of
            # its end, and the operator this line.
            log.warning("export %s cut off after %d bytes: %s", spec.marker, sent, exc)
            raise
        finally:
            if not finished:
                _stop(loop, executor, source, storage, spec)
            else:
                executor.shutdown(wait=False)

    return body()


def _stop(
    loop: asyncio.AbstractEventLoop,
    executor: ThreadPoolExecutor,
    source: Iterator[bytes],
    storage: Any,
    spec: ExportSpec,
) -> None:
    # Nothing here waits: the response may be torn down by a client that went away. The KILL
    # reaches a query that is still computing (a Parquet file being written); closing the
    # iterator, on its own thread after any read in flight, closes the engine's stream.
    loop.run_in_executor(None, export_storage.cancel, storage, spec)
    executor.submit(getattr(source, "close", lambda: None))
    executor.shutdown(wait=False)


@get_head(
    "/api/export",
    **project_route("export"),
    opt=NO_COMPRESSION,
    summary="Download a project's raw events for a range of days",
    description="Streams every stored column of the project's events whose occurredAt falls on "
    "the UTC days `from` to `to` (inclusive), oldest first, as CSV with a header row, NDJSON "
    "(one JSON object per line) or Parquet, each written by ClickHouse. `ip` is left out when "
    "the server hashes IPs (TALLY_IP_PRIVACY=hash). The file name comes in Content-Disposition. "
    "Rate-limited per user (TALLY_EXPORT_LIMIT_PER_USER).",
    response_description="the events, as a file (text/csv, application/x-ndjson or "
    "application/vnd.apache.parquet)",
)
async def export_events(
    request: Request[Any, Any, Any],
    state: State,
    project_id: ExportProjectId = None,
    first: FromParam = None,
    last: ToParam = None,
    fmt: FormatParam = None,
) -> Stream:
    user = asking_user(request)
    limits: RateLimits = state.limits
    # A HEAD (the page's check before its download) says whether the GET would pass the limit,
    # and is not counted: the download it checks is (each page download counted twice, and a
    # HEAD that took the last of the budget passed while its GET was refused).
    limit = _limit(state.settings.export_limit_per_user)
    limits.check(limit, "export", user, count=request.method != "HEAD")
    spec = parse_query(project_id, first, last, fmt, state.settings.ip_privacy == "hash")
    await owned_project(state, user, spec.project_id)
    # CSV and NDJSON gzipped for a client that takes it (http/compression.py); Parquet is
    # compressed inside the file.
    gzipped = spec.fmt != "parquet" and accepts_gzip(request.headers.get("accept-encoding", ""))
    headers = {"content-disposition": f'attachment; filename="{spec.filename}"'}
    headers["vary"] = "accept-encoding"
    if gzipped:
        headers["content-encoding"] = "gzip"
    # HEAD: the answer's status and headers, and no query (a body nobody reads is not made).
    if request.method == "HEAD":
        content: Any = iter(())
    else:
        content = await _stream(request, state, spec, gzipped)
    return Stream(content, media_type=FORMATS[spec.fmt][1], headers=headers)


EXPORT_HANDLERS = [export_events]
