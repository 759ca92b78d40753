"""Request and response payloads. Constraints live in the types; Litestar validates with them and
documents them in the OpenAPI schema."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta, Struct

from ..domain.ids import OBJECT_ID_PATTERN
from ..domain.metrics import MAX_DAYS

ObjectId = Annotated[
    str,
    Meta(pattern=OBJECT_ID_PATTERN, description="24-character object identifier (lowercase hex)"),
]
# Names are trimmed, then must be 2-60 characters (domain/projects.py says so in plain words);
# the OpenAPI document states the same as a pattern (http/project_settings.py).
ProjectName = Annotated[
    str,
    Meta(max_length=200, description="2 to 60 characters once surrounding whitespace is trimmed"),
]
Timezone = Annotated[
    str, Meta(max_length=64, description="IANA time zone, e.g. Europe/Berlin (default UTC)")
]
# Labels the same way: trimmed, then 1-60 characters (domain/projects.py).
KeyLabel = Annotated[
    str,
    Meta(max_length=200, description="1 to 60 characters once surrounding whitespace is trimmed"),
]
Days = Annotated[int, Meta(ge=1, le=MAX_DAYS, description="lookback window in UTC calendar days")]

EventName = Annotated[str, Meta(min_length=1, max_length=100)]
MetadataKey = Annotated[str, Meta(min_length=1, max_length=100)]
MetadataValue = Annotated[str, Meta(max_length=1024)] | int | float | bool | None
# ISO 8601 and RFC 3339: a date, optionally a time (seconds and fraction optional, up to nine
# fractional digits as Go's RFC3339Nano and Java's Instant write them, a leap second :60) and an
# offset (Z, +HH, +HHMM or +HH:MM, under 24 hours); ``t`` and ``z`` in either case; no offset
# means UTC.
# Calendar-impossible dates (February 30) match and are refused when parsed, dates before 1970
# after it (domain/events.py says which).
ISO_DATETIME = (
    r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
    r"([Tt ]([01]\d|2[0-3]):[0-5]\d(:([0-5]\d|60)([.,]\d{1,9})?)?"
    r"([Zz]|[+-]([01]\d|2[0-3])(:?[0-5]\d)?)?)?"
    r"$(?!\n)"  # $ alone would match before a final newline
)
OccurredAt = Annotated[
    str,
    Meta(
        pattern=ISO_DATETIME,
        description=(
            "ISO 8601 datetime; without an offset it is UTC; not before 1970-01-01T00:00:00Z"
        ),
        extra_json_schema={"format": "date-time"},
    ),
]

# Request bodies whose unknown fields are refused (documented as additionalProperties: false).
CLOSED_BODIES = ("CollectBody", "Event", "CreateProject", "CreateKey", "UpdateProject")
Metadata = Annotated[
    dict[MetadataKey, MetadataValue],
    Meta(
        max_length=50, description="at most 50 keys; values are strings, numbers, booleans or null"
    ),
]


class Event(Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=True):
    """One event as an application sends it."""

    name: EventName
    path: Annotated[str, Meta(max_length=2048)] | None = None
    url: Annotated[str, Meta(max_length=4096)] | None = None
    referrer: Annotated[str, Meta(max_length=4096)] | None = None
    session_id: Annotated[str, Meta(max_length=200)] | None = None
    visitor_id: Annotated[str, Meta(max_length=200)] | None = None
    occurred_at: OccurredAt | None = None
    metadata: Metadata | None = None


class CollectBody(Struct, forbid_unknown_fields=True):
    events: Annotated[list[Event], Meta(min_length=1, max_length=100)]


class Accepted(Struct):
    accepted: int


class CreateProject(Struct, forbid_unknown_fields=True):
    name: ProjectName
    timezone: Timezone | None = None


class UpdateProject(Struct, rename="camel", forbid_unknown_fields=True):
    """The fields given change; the others stay."""

    project_id: ObjectId
    name: ProjectName | None = None
    timezone: Timezone | None = None
    exclude_bots: bool | None = None


class ProjectCreated(Struct, rename="camel"):
    project_id: str
    api_key: str
    key_id: str  # the Default key's id (to revoke it without matching previews)


class Project(Struct, rename="camel"):
    id: str
    name: str
    created_at: str
    timezone: str
    exclude_bots: bool


class ProjectList(Struct):
    projects: list[Project]


class CreateKey(Struct, rename="camel", forbid_unknown_fields=True):
    project_id: ObjectId
    label: KeyLabel | None = None


class KeyCreated(Struct, rename="camel"):
    """The new key, shown once, and the same fields the key list shows for it."""

    api_key: str
    id: str
    label: str
    key_preview: str
    created_at: str


class ApiKey(Struct, rename="camel"):
    id: str
    label: str
    key_preview: str
    created_at: str
    last_used_at: str | None


class KeyList(Struct):
    keys: list[ApiKey]


class ErrorDetail(Struct):
    path: str
    message: str


class Error(Struct, omit_defaults=True):
    error: str
    details: list[ErrorDetail] | None = None


class IngestBacklog(Struct, rename="camel"):
    """This worker's ingest log: acknowledged events not yet loaded into ClickHouse."""

    segments: int
    events: int
    bytes: int
    oldest_age_seconds: float | None  # age of the oldest unloaded event; null when none
    # Since start: events this worker appended to its ingest log and acknowledged (fsynced, and
    # answered 202 unless the client had gone away).
    acknowledged_events: int
    inserts: int  # INSERTs made by the loader since start
    loaded_events: int
    failed_loads: int
    # Since start: events the log refused (answered 503: its disk full or unwritable, its cap,
    # its commit queue full, or the worker stopping).
    refused_events: int


class ReportLane(Struct, rename="camel"):
    """This worker's report queries (dashboards, breakdowns, the query API)."""

    threads: int  # how many run at once
    waiting: int  # waiting for a thread now
    running: int
    stopped: int  # since start: their client went away, so never run or killed while running
    memory_mb: int  # memory one report may use (TALLY_REPORT_MEMORY_MB); 0: no cap


class Health(Struct):
    status: str
    storage: str
    backlog: IngestBacklog | None = None
    reports: ReportLane | None = None


class Alive(Struct):
    status: str  # "ok"
    backlog: IngestBacklog  # this worker's ingest log: also during a ClickHouse outage


# --- dashboard --------------------------------------------------------------------------------
class Summary(Struct, rename="camel"):
    total_events: int
    pageviews: int
    unique_visitors: int
    unique_sessions: int
    avg_session_duration_ms: int
    bounce_rate: float
    bot_events: int = 0  # events flagged as bots left out of the window (0 when bots count)


class DayPoint(Struct):
    day: str
    events: int
    pageviews: int
    visitors: int = 0  # distinct visitors of that local day


class PathCount(Struct):
    path: str
    views: int


class ReferrerCount(Struct):
    referrer: str
    count: int


class BrowserCount(Struct):
    browser: str
    count: int


class DeviceCount(Struct, rename="camel"):
    device_type: str
    count: int


class NameCount(Struct):
    name: str
    count: int


class HourCount(Struct):
    hour: int
    count: int


class RecentEvent(Struct, rename="camel"):
    id: str
    name: str
    path: str
    visitor_id: str
    occurred_at: str


class Dashboard(Struct, rename="camel"):
    summary: Summary
    timeline: list[DayPoint]
    top_paths: list[PathCount]
    top_referrers: list[ReferrerCount]
    browser_breakdown: list[BrowserCount]
    device_breakdown: list[DeviceCount]
    event_breakdown: list[NameCount]
    hourly_heatmap: list[HourCount]
    recent_events: list[RecentEvent]
    live_visitors: int
    # Every event acknowledged (202) before this instant is included (ISO 8601 UTC).
    data_through: str | None = None


collect_decoder = msgspec.json.Decoder(CollectBody)
