"""Every error leaves Tally as ``{"error": "...", "details"?: [...]}``, with the contract's
status."""

from __future__ import annotations

import errno
import logging
import re
from datetime import date
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import (
    HTTP_400_BAD_REQUEST,
    HTTP_500_INTERNAL_SERVER_ERROR,
    HTTP_503_SERVICE_UNAVAILABLE,
)

from ..domain.events import InvalidEvent
from ..domain.query_errors import InvalidQuery
from ..storage.client import ReportTooLarge
from ..storage.ingestlog import LogFull, LogRefused
from ..storage.writer import StorageUnavailable
from .limits_doc import DEFAULT_DAYS
from .messages import plain
from .schemas import Error, ErrorDetail

log = logging.getLogger("tally.http")

INVALID_PAYLOAD = "Invalid payload"
INVALID_QUERY = "Invalid query"

# Errors whose text the contract fixes, by status, when the raiser did not choose one.
_DEFAULT_ERRORS = {
    400: INVALID_PAYLOAD,
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    408: "Request timeout",
    413: "Payload too large",
    415: "Unsupported media type",
    429: "Too many requests",
    503: "Storage unavailable",
}
# Errors raised by Tally itself carry their contract text as ``detail``.
_OWN_ERRORS = {
    "Unauthorized",
    "Missing API key",
    "Invalid API key",
    "Project not found",
    "Key not found",
    "Too many requests",
    "Storage unavailable",
}


def error_response(
    status: int,
    error: str,
    details: list[ErrorDetail] | None = None,
    headers: dict[str, str] | None = None,
) -> Response[Error]:
    return Response(
        Error(error=error, details=details),
        status_code=status,
        media_type=MediaType.JSON,
        headers=headers,
    )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _path(key: Any, in_query: bool = False) -> str:
    if not key or key == "data":
        return "$"
    if str(key).startswith("$"):
        return str(key)  # already a path (http/decoding.py)
    key = _camel(str(key)) if in_query else str(key)
    return "$" + ("" if key.startswith("[") else ".") + key


def validation_handler(
    request: Request[Any, Any, Any], exc: ValidationException
) -> Response[Error]:
    extra = exc.extra if isinstance(exc.extra, list) else []
    in_query = any(isinstance(i, dict) and i.get("source") != "body" for i in extra) or (
        "query parameter" in (exc.detail or "")
    )
    details = [
        ErrorDetail(
            *plain(str(item.get("message", "")), _path(item.get("key"), in_query), in_query)
        )
        for item in extra
        if isinstance(item, dict)
    ]
    if not details:
        details = [ErrorDetail(*plain(_clean(exc.detail), "$", in_query))]
    if in_query and request is not None:
        details = [_leading_zeros(request, detail) for detail in details]
    return error_response(
        HTTP_400_BAD_REQUEST, INVALID_QUERY if in_query else INVALID_PAYLOAD, details
    )


def _leading_zeros(request: Request[Any, Any, Any], detail: ErrorDetail) -> ErrorDetail:
    """The parameter parser reads numbers as JSON does, where 07 is not one: a whole number
    written with leading zeros is refused with the rule, which then says why."""
    name = detail.path.removeprefix("$.")
    raw = request.query_params.get(name) if name in ("days", "limit") else None
    if raw is not None and _LEADING_ZEROS.fullmatch(raw):
        return ErrorDetail(detail.path, f"{detail.message}, written without leading zeros")
    return detail


_LEADING_ZEROS = re.compile(r"0[0-9]+")


def _clean(detail: str | None) -> str:
    if not detail:
        return "invalid request"
    if detail == "'data'":
        return "a JSON body is required"
    return detail


def http_handler(_: Request[Any, Any, Any], exc: HTTPException) -> Response[Error]:
    status = exc.status_code
    detail = exc.detail or ""
    error = detail if detail in _OWN_ERRORS else _DEFAULT_ERRORS.get(status, detail or "Error")
    details = None
    if status == HTTP_400_BAD_REQUEST:
        # Malformed JSON and other body errors Litestar raises before validation.
        details = [ErrorDetail(*plain(_clean(detail), "$"))]
    return error_response(status, error, details, headers=dict(exc.headers or {}))


def invalid_event_handler(_: Request[Any, Any, Any], exc: InvalidEvent) -> Response[Error]:
    return error_response(
        HTTP_400_BAD_REQUEST, INVALID_PAYLOAD, [ErrorDetail(path=exc.path, message=exc.message)]
    )


def invalid_query_handler(_: Request[Any, Any, Any], exc: InvalidQuery) -> Response[Error]:
    """Filters, ranges, compare and v2 query bodies (domain parsers): 400 naming the part."""
    return error_response(
        HTTP_400_BAD_REQUEST, exc.error, [ErrorDetail(path=exc.path, message=exc.message)]
    )


def report_too_large_handler(
    request: Request[Any, Any, Any], exc: ReportTooLarge
) -> Response[Error]:
    """A report over the memory one report may use: asking again would fail again, so 400 (the
    query string's or the JSON body's), saying what to change: only what this request can
    change (a one-day range is not made shorter, an unfiltered request has no filter to narrow).
    ``POST /api/v2/query`` sets ``exc.hints`` (http/v2.py); the GET views' come from their query
    string."""
    log.warning("%s %s: %s", request.method, request.url.path, exc)
    hints = getattr(exc, "hints", None)
    if hints is None:
        hints = _view_hints(request)
    message = (
        f"needs more memory than one report may use ({exc.limit_mib} MiB, "
        "TALLY_REPORT_MEMORY_MB); "
        + (f"ask for {_either(hints)}, or have" if hints else "have")
        + " the server's TALLY_REPORT_MEMORY_MB raised"
    )
    error = INVALID_PAYLOAD if request.method == "POST" else INVALID_QUERY
    return error_response(HTTP_400_BAD_REQUEST, error, [ErrorDetail(path="$", message=message)])


def _either(hints: list[str]) -> str:
    return hints[0] if len(hints) == 1 else ", ".join(hints[:-1]) + " or " + hints[-1]


def _range_days(params: Any) -> int:
    """The days a dashboard or breakdown request covers (validated before any report ran)."""
    try:
        if params.get("from") and params.get("to"):
            first, last = date.fromisoformat(params["from"]), date.fromisoformat(params["to"])
            return (last - first).days + 1
        return int(params.get("days") or DEFAULT_DAYS)
    except (ValueError, TypeError):
        return DEFAULT_DAYS


def _filtered(raw: str | None) -> bool:
    return bool(raw and raw.strip() not in ("", "[]"))


def _view_hints(request: Request[Any, Any, Any]) -> list[str]:
    """What a ``GET /api/dashboard`` or ``/api/breakdown`` request can ask for instead."""
    params = request.query_params
    hints = []
    days = _range_days(params)
    if days > 1:
        hints.append(f"a shorter range (this one has {days} days)")
    filtered = _filtered(params.get("filters"))
    if filtered:
        hints.append("narrower filters")
    elif request.url.path.rstrip("/") == "/api/breakdown":
        by = params.get("by") or "value"
        hints.append(f"a filter that leaves fewer {by} values")
    return hints


def report_hints(
    dimensions: tuple[str, ...], metrics: tuple[str, ...], days: int, filtered: bool
) -> list[str]:
    """What a ``POST /api/v2/query`` over the memory cap can ask for instead."""
    hints = []
    if len(dimensions) > 1:
        hints.append(f"fewer dimensions (this query has {len(dimensions)})")
    if "time:hour" in dimensions:
        hints.append("time:day instead of time:hour")
    if days > 1:
        hints.append(f"a shorter date_range (this one has {days} days)")
    visit_metrics = [m for m in metrics if m in ("visits", "bounce_rate", "visit_duration")]
    if visit_metrics:
        hints.append("no " + _either(visit_metrics) + " (these read every visit whole)")
    if filtered:
        hints.append("narrower filters")
    elif dimensions:
        hints.append("a filter that leaves fewer rows")
    return hints


def storage_handler(request: Request[Any, Any, Any] | None, exc: Exception) -> Response[Error]:
    """503 with ``Retry-After``. A storage failure is logged with the engine's reason (its first
    line, without the statement it quotes); the ingest log's refusals are not: it logs why
    itself (collect's own handler passes no request)."""
    # At the log's cap the backlog drains only as fast as ClickHouse comes back: retry later.
    retry = "10" if isinstance(exc, LogFull) else "2"
    if request is not None and not isinstance(exc, LogRefused):
        text = str(exc).strip()
        reason = text.splitlines()[0][:300] if text else type(exc).__name__
        log.warning("storage unavailable on %s %s: %s", request.method, request.url.path, reason)
    return error_response(
        HTTP_503_SERVICE_UNAVAILABLE, "Storage unavailable", headers={"Retry-After": retry}
    )


def internal_handler(request: Request[Any, Any, Any] | None, exc: Exception) -> Response[Error]:
    where = "" if request is None else f" on {request.method} {request.url.path}"
    log.exception("unhandled error%s", where, exc_info=exc)
    return error_response(HTTP_500_INTERNAL_SERVER_ERROR, "Internal server error")


def _exhausted(exc: BaseException) -> bool:
    """Whether ``exc`` says the process ran out of memory, threads or file descriptors."""
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOMEM, errno.EMFILE, errno.ENFILE)
    return isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)


def resource_handler(request: Request[Any, Any, Any] | None, exc: Exception) -> Response[Error]:
    """503 with ``Retry-After`` when the process is out of memory, threads or file descriptors
    (a page read from disk, a thread for a query; the embedded engine, in this process, is out
    of them too), with the cause logged; any other such error is a 500 as before. Found by a
    review that made the worker's mmap and openat fail under strace: 500s before."""
    if not _exhausted(exc):
        return internal_handler(request, exc)
    where = "" if request is None else f" on {request.method} {request.url.path}"
    log.error("out of resources%s: %s: %s", where, type(exc).__name__, exc)
    return error_response(
        HTTP_503_SERVICE_UNAVAILABLE, "Storage unavailable", headers={"Retry-After": "2"}
    )


EXCEPTION_HANDLERS: dict[Any, Any] = {
    ValidationException: validation_handler,
    HTTPException: http_handler,
    InvalidEvent: invalid_event_handler,
    InvalidQuery: invalid_query_handler,
    StorageUnavailable: storage_handler,
    ReportTooLarge: report_too_large_handler,
    MemoryError: resource_handler,
    OSError: resource_handler,
    RuntimeError: resource_handler,
    Exception: internal_handler,
}
