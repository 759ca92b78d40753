"""``POST /api/v2/query``: the body in the shape of Plausible's Stats API v2, validated into a
frozen ``V2Query`` the query layer runs, and the response Structs.

A documented subset (README "A query API for scripts"): what Tally does not answer is refused
with ``InvalidQuery`` naming it (error ``Invalid payload``, a JSON body), never answered with a
number that means something else.

- ``metrics``: ``visitors``, ``visits`` (sessions), ``pageviews``, ``events``, ``bounce_rate``
  (percent, 2 decimals), ``visit_duration`` (milliseconds; Plausible's is seconds).
- ``date_range``: ``"day"`` (today), ``"Nd"`` (the N days ending yesterday, N 1-366; Plausible
  documents 7d, 28d, 30d, 91d), ``"month"`` / ``"year"`` (the whole current calendar month /
  year), ``"Nmo"`` (the N whole months before this one, N 1-12; Plausible documents 6mo, 12mo),
  or ``["YYYY-MM-DD", "YYYY-MM-DD"]`` (inclusive), all local dates of the project's zone, at most
  366 days. Not supported: ``"all"``, ``"realtime"``, ``"30m"``, date-time pairs.
- ``dimensions``: Tally's names (``path``, ``source``, ...), ``time:day``, ``time:hour``, and
  Plausible's spellings of the same (``event:page``, ``visit:source``, ...).
- ``filters``: as the ``filters`` parameter (``domain.filters``), Plausible spellings accepted.
- ``order_by``: ``[[metric or dimension, "asc" | "desc"], ...]``, each a queried one.
- ``pagination``: ``{limit 1-10000 (default 10000), offset 0-1000000 (default 0)}``.
- ``include``: only with every option false/absent (none is supported).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from .filters import DIMENSIONS, Dimension, Filters, validate_filters
from .ids import OBJECT_ID_PATTERN
from .query_errors import (
    INVALID_PAYLOAD,
    LONE_SURROGATE,
    NO_SURROGATES,
    TOO_DEEP,
    InvalidQuery,
    member,
)
from .ranges import MAX_RANGE_DAYS, DateRange, date_span, parse_date

Metric = Literal["visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration"]
METRICS: tuple[Metric, ...] = (
    "visitors",
    "visits",
    "pageviews",
    "events",
    "bounce_rate",
    "visit_duration",
)
# Metrics of whole sessions: with an event dimension (one session has many paths) they have no
# single value per row, so Tally refuses the pair rather than answer something else.
SESSION_METRICS: frozenset[str] = frozenset({"bounce_rate", "visit_duration"})
TIME_DIMENSIONS: tuple[str, ...] = ("time:day", "time:hour")
Direction = Literal["asc", "desc"]
MAX_LIMIT = 10_000  # Plausible's default page size
MAX_OFFSET = 1_000_000
MAX_DIMENSIONS = 4

# Plausible's names of the dimensions Tally has, where the meaning is the same (README).
PLAUSIBLE_DIMENSIONS: Mapping[str, str] = {
    "event:page": "path",
    "event:name": "event",
    "visit:entry_page": "entryPage",
    "visit:exit_page": "exitPage",
    "visit:source": "source",
    "visit:channel": "channel",
    "visit:utm_source": "utmSource",
    "visit:utm_medium": "utmMedium",
    "visit:utm_campaign": "utmCampaign",
    "visit:utm_content": "utmContent",
    "visit:utm_term": "utmTerm",
    "visit:country": "country",
    "visit:browser": "browser",
    "visit:os": "os",
    "visit:device": "deviceType",
}
# Plausible's logical and behavioural filters, which Tally's flat list of filters does not take.
_LOGICAL = {
    "and": "list the filters side by side; they combine with AND",
    "or": "give one filter several values; they combine with OR (across dimensions, ask twice)",
    "not": "use the is_not or contains_not operator",
    "has_done": "behavioural filters (visitors who did an event) are not offered",
    "has_not_done": "behavioural filters (visitors who did an event) are not offered",
}
# Plausible names that look like a Tally dimension but mean something else: refused with why.
_NOT_THE_SAME = {
    "visit:referrer": "Tally's referrer is per event; use referrer",
}


# --- request body -------------------------------------------------------------------------------
class Pagination(Struct, forbid_unknown_fields=True):
    limit: Annotated[int, Meta(ge=1, le=MAX_LIMIT)] = MAX_LIMIT
    offset: Annotated[int, Meta(ge=0, le=MAX_OFFSET)] = 0


class QueryBody(Struct, forbid_unknown_fields=True):
    """The request body; its shape only. ``validate_query`` checks the rest."""

    site_id: Annotated[str, Meta(pattern=OBJECT_ID_PATTERN, description="the projectId")]
    metrics: Annotated[list[str], Meta(min_length=1, max_length=len(METRICS))]
    date_range: str | list[str]
    dimensions: Annotated[list[str], Meta(max_length=MAX_DIMENSIONS)] = []
    filters: list[Any] = []
    order_by: list[list[str]] | None = None
    pagination: Pagination | None = None
    include: dict[str, Any] | None = None


# --- the validated query ------------------------------------------------------------------------
@dataclass(frozen=True)
class RangeRequest:
    """A ``date_range`` validated but not yet placed in a zone."""

    kind: Literal["day", "days", "month", "months", "year", "dates"]
    n: int = 0  # for "days" / "months"
    first: date | None = None  # for "dates"
    last: date | None = None

    def resolve(self, zone: tzinfo, now: datetime) -> DateRange:
        today = now.astimezone(zone).date()
        if self.kind == "dates":
            assert self.first is not None and self.last is not None
            return DateRange.of(self.first, self.last, zone)
        if self.kind == "day":
            return DateRange.of(today, today, zone)
        if self.kind == "days":  # Plausible: the N days before today
            return DateRange.of(today - timedelta(days=self.n), today - timedelta(days=1), zone)
        if self.kind == "month":
            return DateRange.of(today.replace(day=1), _month_end(today), zone)
        if self.kind == "year":
            return DateRange.of(date(today.year, 1, 1), date(today.year, 12, 31), zone)
        # "months": the N whole months before this one
        this_month = today.replace(day=1)
        first = _add_months(this_month, -self.n)
        return DateRange.of(first, this_month - timedelta(days=1), zone)


def _add_months(first_of_month: date, months: int) -> date:
    index = first_of_month.year * 12 + first_of_month.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _month_end(day: date) -> date:
    return _add_months(day.replace(day=1), 1) - timedelta(days=1)


@dataclass(frozen=True)
class V2Query:
    """A validated v2 query in Tally's names. ``order_by`` is complete (the default applied)."""

    project_id: str
    metrics: tuple[Metric, ...]
    date_range: RangeRequest
    dimensions: tuple[str, ...]  # Tally names and "time:day" / "time:hour", in request order
    filters: Filters
    order_by: tuple[tuple[str, Direction], ...]
    limit: int
    offset: int

    def resolve_range(self, zone: tzinfo, now: datetime) -> DateRange:
        try:
            return self.date_range.resolve(zone, now)
        except InvalidQuery as exc:  # a date off the rollups' grid, said of the body
            raise InvalidQuery("$.date_range", exc.message, INVALID_PAYLOAD) from None

    @property
    def time_dimension(self) -> str | None:
        return next((d for d in self.dimensions if d in TIME_DIMENSIONS), None)

    @property
    def breakdown_dimensions(self) -> tuple[Dimension, ...]:
        return tuple(DIMENSIONS[d] for d in self.dimensions if d in DIMENSIONS)


def _bad(path: str, message: str) -> InvalidQuery:
    return InvalidQuery(path, message, INVALID_PAYLOAD)


_SHORTHAND = re.compile(r"([1-9][0-9]{0,3})(d|mo)")
_DATE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]")


# Plausible's include options; none is supported, each may be sent false (or null).
INCLUDE_OPTIONS = ("imports", "imports_meta", "time_labels", "total_rows", "comparisons")

# Every form date_range takes, in words (any N in its bounds, not only the common ones).
_RANGE_WORDS = (
    "day, Nd (N from 1 to 366, as 7d or 30d), month, Nmo (N from 1 to 12, as 6mo), year, "
    "or two dates [from, to]"
)


def _date_range(value: str | list[str]) -> RangeRequest:
    path = "$.date_range"
    if isinstance(value, list):
        if len(value) != 2:
            raise _bad(path, f"must be one of {_RANGE_WORDS}")
        try:
            first = parse_date(value[0], f"{path}[0]")
            last = parse_date(value[1], f"{path}[1]")
            span = date_span(first, last, first_path=f"{path}[0]", last_path=f"{path}[1]")
        except InvalidQuery as exc:
            if any(_DATE_TIME.match(v) for v in value):
                raise _bad(
                    path,
                    "date-time ranges are not supported; give two dates "
                    "YYYY-MM-DD (local dates of the project)",
                ) from None
            raise exc.as_payload() from None
        return RangeRequest("dates", first=span.first, last=span.last)
    if value in ("day", "month", "year"):
        return RangeRequest(value)  # type: ignore[arg-type]
    match = _SHORTHAND.fullmatch(value)
    if match:
        n, unit = int(match[1]), match[2]
        if unit == "d" and n <= MAX_RANGE_DAYS:
            return RangeRequest("days", n=n)
        if unit == "mo" and n <= 12:
            return RangeRequest("months", n=n)
        raise _bad(path, f"{value!r} is longer than {MAX_RANGE_DAYS} days, which is not supported")
    raise _bad(
        path,
        f"{value!r} is not supported; use {_RANGE_WORDS}",
    )


def _dimension(name: str, path: str) -> str:
    if name in TIME_DIMENSIONS or name in DIMENSIONS:
        return name
    if name in PLAUSIBLE_DIMENSIONS:
        return PLAUSIBLE_DIMENSIONS[name]
    if name in _NOT_THE_SAME:
        raise _bad(path, f"{name!r} is not supported: {_NOT_THE_SAME[name]}")
    raise _bad(
        path,
        f"{name!r} is not supported; use one of "
        + ", ".join((*DIMENSIONS, *TIME_DIMENSIONS))
        + " (or Plausible's event:page, visit:source, ... for the same)",
    )


def validate_query(body: QueryBody) -> V2Query:
    """Checks what the body's types cannot say; every refusal names the part refused."""
    metrics: list[Metric] = []
    for i, name in enumerate(body.metrics):
        if name not in METRICS:
            raise _bad(
                f"$.metrics[{i}]", f"{name!r} is not supported; use one of " + ", ".join(METRICS)
            )
        if name in metrics:
            raise _bad(f"$.metrics[{i}]", f"{name!r} is given twice")
        metrics.append(name)  # type: ignore[arg-type]

    dimensions: list[str] = []
    for i, name in enumerate(body.dimensions):
        dim = _dimension(name, f"$.dimensions[{i}]")
        if dim in dimensions:
            raise _bad(f"$.dimensions[{i}]", f"{name!r} is given twice")
        if dim in TIME_DIMENSIONS and any(d in TIME_DIMENSIONS for d in dimensions):
            raise _bad(f"$.dimensions[{i}]", "only one time dimension is supported")
        dimensions.append(dim)
    event_dims = [d for d in dimensions if d in DIMENSIONS and not DIMENSIONS[d].is_session]
    for i, name in enumerate(metrics):
        if name in SESSION_METRICS and event_dims:
            raise _bad(
                f"$.metrics[{i}]",
                f"{name!r} cannot be broken down by the event dimension {event_dims[0]!r} "
                "(a session has many); filter by it instead",
            )

    try:
        filters = validate_filters(body.filters, aliases=PLAUSIBLE_DIMENSIONS)
    except InvalidQuery as exc:
        for i, item in enumerate(body.filters):
            first = item[0] if isinstance(item, list) and item else None
            if isinstance(first, str) and first in _LOGICAL:
                raise _bad(
                    f"$.filters[{i}][0]", f"{first!r} is not supported: {_LOGICAL[first]}"
                ) from None
            given = item[1] if isinstance(item, list) and len(item) > 1 else None
            if isinstance(given, str) and given in _NOT_THE_SAME:
                raise _bad(
                    f"$.filters[{i}][1]", f"{given!r} is not supported: " + _NOT_THE_SAME[given]
                ) from None
        raise exc.as_payload() from None

    queried = set(metrics) | set(dimensions)
    order: list[tuple[str, Direction]] = []
    for i, entry in enumerate(body.order_by or []):
        if len(entry) != 2 or entry[1] not in ("asc", "desc"):
            raise _bad(f"$.order_by[{i}]", 'must be [metric or dimension, "asc" | "desc"]')
        name = PLAUSIBLE_DIMENSIONS.get(entry[0], entry[0])
        if name not in queried:
            raise _bad(f"$.order_by[{i}][0]", f"{entry[0]!r} is not a queried metric or dimension")
        if any(name == named for named, _ in order):
            raise _bad(f"$.order_by[{i}][0]", f"{entry[0]!r} is given twice")
        order.append((name, entry[1]))  # type: ignore[arg-type]
    order = _complete_order(order, metrics, dimensions)

    for key, value in (body.include or {}).items():
        if key not in INCLUDE_OPTIONS:  # a misspelt option is refused, whatever its value
            raise _bad(
                "$.include" + member(key),
                f"is not an include option (Plausible's: {', '.join(INCLUDE_OPTIONS)})",
            )
        if value is not False and value is not None:  # 0 is no "false"
            raise _bad("$.include" + member(key), "is not supported")

    pagination = body.pagination or Pagination()
    return V2Query(
        project_id=body.site_id,
        metrics=tuple(metrics),
        date_range=_date_range(body.date_range),
        dimensions=tuple(dimensions),
        filters=filters,
        order_by=tuple(order),
        limit=pagination.limit,
        offset=pagination.offset,
    )


def _complete_order(
    given: list[tuple[str, Direction]], metrics: list[Metric], dimensions: list[str]
) -> list[tuple[str, Direction]]:
    """Plausible's default: time ascending when queried, else the first metric descending; then
    every dimension not yet named ascending, so that pages are stable."""
    order = list(given)
    if not order:
        time_dim = next((d for d in dimensions if d in TIME_DIMENSIONS), None)
        order.append((time_dim, "asc") if time_dim else (metrics[0], "desc"))
    named = {name for name, _ in order}
    order.extend((d, "asc") for d in dimensions if d not in named)
    return order


_decoder = msgspec.json.Decoder(QueryBody)


def parse_query(body: bytes) -> V2Query:
    """Decodes and validates a request body; ``InvalidQuery`` (``Invalid payload``) if wrong."""
    try:
        decoded = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        message, _, where = str(exc).partition(" - at `")
        where = where.rstrip("`") or "$"
        unknown = re.fullmatch(r"Object contains unknown field `(.*)`", message)
        if unknown:  # name the part Tally does not support, as the issue asks
            raise _bad(where + member(unknown[1]), "is not supported") from None
        raise _bad(where, message) from None
    except msgspec.DecodeError as exc:
        if LONE_SURROGATE.search(body):  # an escape such as \ud800, alone
            raise _bad("$", NO_SURROGATES) from None
        if "Invalid UTF-8" in str(exc):  # msgspec 0.23's word for bytes in a string
            raise _bad("$", "must be UTF-8 text") from None
        raise _bad("$", f"must be a JSON object ({exc})") from None
    except UnicodeDecodeError:
        raise _bad("$", "must be UTF-8 text") from None
    except RecursionError:
        raise _bad("$", TOO_DEEP) from None
    return validate_query(decoded)


# --- response -----------------------------------------------------------------------------------
class V2Row(Struct):
    dimensions: list[str]
    # float, not int | float: the schema says "number or null" (an integer is a number; a oneOf
    # of integer and number would call every integer invalid). Values encode as they are.
    metrics: list[float | None]


class V2Meta(Struct, omit_defaults=True):
    timezone: str
    notes: list[str] = []


class V2Echo(Struct):
    """The query as Tally ran it: Tally's names, the range as local date-times, order complete."""

    site_id: str
    metrics: list[str]
    date_range: list[str]
    dimensions: list[str]
    filters: list[Any]
    order_by: list[list[str]]
    pagination: dict[str, int]


class V2Response(Struct):
    results: list[V2Row]
    meta: V2Meta
    query: V2Echo


def echo(query: V2Query, resolved: DateRange, zone: tzinfo) -> V2Echo:
    """``query`` of the response: the range from its first to its last local second."""
    last_second = resolved.end_utc - timedelta(seconds=1)
    return V2Echo(
        site_id=query.project_id,
        metrics=list(query.metrics),
        date_range=[
            resolved.start_utc.astimezone(zone).isoformat(),
            last_second.astimezone(zone).isoformat(),
        ],
        dimensions=list(query.dimensions),
        filters=[f.to_json() for f in query.filters],
        order_by=[[name, direction] for name, direction in query.order_by],
        pagination={"limit": query.limit, "offset": query.offset},
    )


def time_label(dimension: str, local: datetime) -> str:
    """A ``time:day`` / ``time:hour`` value as Plausible writes it: ``2024-01-01`` /
    ``2024-01-01 10:00:00`` (local to the project's zone)."""
    if dimension == "time:day":
        return local.date().isoformat()
    return local.replace(minute=0, second=0, microsecond=0).strftime("%Y-%m-%d %H:%M:%S")
