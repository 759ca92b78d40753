"""The OpenAPI document (``/api/schema/openapi.json``): Litestar writes it from the routes' types;
:func:`complete` then says what the types cannot, so that a client generated from the document,
or Swagger UI's "Try it out", sends what Tally accepts and reads what Tally answers:

- the rules msgspec enforces that Litestar does not translate (closed bodies, metadata's shape,
  the name and label patterns, the zone list);
- the body of ``POST /api/v2/query``, which its handler decodes itself (domain/stats_v2.py);
- every content type a route really takes or answers (collect's ``text/plain`` body, the export's
  CSV, NDJSON and Parquet files);
- the statuses every body-reading route may answer (408 for a slow body, 413 for a large one) and
  the ``Retry-After`` header of each 429 and 503;
- a working example for every request body (Swagger UI's own samples, drawn from the patterns,
  are refused: a name of 130 characters, the date 9179-02-30).
"""

from __future__ import annotations

from dataclasses import replace
from importlib import metadata
from typing import Any

import msgspec
from litestar import Litestar
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import (
    Components,
    Example,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    Operation,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
)
from litestar.openapi.spec.enums import OpenAPIType

from ..domain.filters import DIMENSIONS, MAX_FILTERS, MAX_VALUES, OPERATORS
from ..domain.stats_v2 import METRICS, PLAUSIBLE_DIMENSIONS, TIME_DIMENSIONS, QueryBody
from .access import ERROR_DESCRIPTIONS
from .auth import SESSION_COOKIE
from .docs import docs_router, render_plugins
from .project_settings import document_project_fields
from .schemas import CLOSED_BODIES


def _version() -> str:
    try:
        return metadata.version("tally")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "0.0.0"


DESCRIPTION = (
    "Web analytics on ClickHouse: collect events, manage projects and keys, read dashboards."
)


def openapi_config(description: str = DESCRIPTION) -> OpenAPIConfig:
    """The document's configuration, made anew for each app: ``dataclasses.replace`` of one
    config ran Litestar's ``__post_init__`` again on the deprecated fields it fills in itself
    (``root_schema_site``, ``enabled_endpoints``), a deprecation warning per app built."""
    return OpenAPIConfig(
        title="Tally",
        version=_version(),
        description=description,
        path="/api/schema",
        # Swagger UI from Tally's own files (http/docs.py): the docs open offline, under a
        # strict CSP.
        render_plugins=render_plugins(),
        openapi_router=docs_router("/api/schema"),
        components=Components(
            security_schemes={
                "session": SecurityScheme(type="http", scheme="bearer", bearer_format="JWT"),
                "sessionCookie": SecurityScheme(
                    type="apiKey",
                    name=SESSION_COOKIE,
                    security_scheme_in="cookie",
                    description="the same JWT as a cookie (the dashboard page's sign-in); a "
                    "POST with it must declare Content-Type: application/json. Not for this page's "
                    "Try it out: a browser does not let a page set a Cookie header, so the request "
                    "goes without it (401); authorize with `session` (the bearer token) here",
                ),
                "apiKey": SecurityScheme(
                    type="apiKey", name="x-api-key", security_scheme_in="header"
                ),
                "apiKeyQuery": SecurityScheme(
                    type="apiKey", name="apiKey", security_scheme_in="query"
                ),
            }
        ),
    )


# Working request bodies, by path and method (the projectId is an example's: 404 as it stands).
_PROJECT_ID = "6b0316208f1c4a2e9d5b7c11"
EXAMPLES: dict[tuple[str, str], Any] = {
    ("/api/collect", "post"): {
        "events": [
            {
                "name": "pageview",
                "path": "/pricing",
                "url": "https://example.com/pricing?utm_source=newsletter",
                "referrer": "https://www.google.com/",
                "sessionId": "s-81f2",
                "visitorId": "v-1c9a",
                "occurredAt": "2026-11-23T10:00:00Z",
            },
            {"name": "signup", "path": "/pricing", "metadata": {"plan": "pro", "seats": 3}},
        ]
    },
    ("/api/projects", "post"): {"name": "My site", "timezone": "Europe/Berlin"},
    ("/api/projects", "patch"): {
        "projectId": _PROJECT_ID,
        "name": "My site",
        "timezone": "America/New_York",
        "excludeBots": True,
    },
    ("/api/projects/keys", "post"): {"projectId": _PROJECT_ID, "label": "web"},
    ("/api/v2/query", "post"): {
        "site_id": _PROJECT_ID,
        "metrics": ["visitors", "pageviews", "bounce_rate"],
        "date_range": "7d",
        "dimensions": ["source"],
        "filters": [["is", "country", ["DE", "AT"]]],
        "order_by": [["visitors", "desc"]],
        "pagination": {"limit": 10, "offset": 0},
    },
}

_RETRY_AFTER = OpenAPIHeader(
    schema=Schema(type=OpenAPIType.INTEGER, minimum=1),
    description="seconds to wait before trying again",
)
_EXPORT_TYPES = {
    "text/csv": Schema(type=OpenAPIType.STRING, description="CSV with a header row"),
    "application/x-ndjson": Schema(type=OpenAPIType.STRING, description="one JSON object per line"),
    "application/vnd.apache.parquet": Schema(
        type=OpenAPIType.STRING, format="binary", description="a Parquet file"
    ),
}


def complete(app: Litestar) -> None:
    """Amend ``app``'s OpenAPI document in place (once, when the app is built)."""
    document = app.openapi_schema
    components = document.components.schemas or {}
    document.components.schemas = components
    _document_rules(components)
    v2_body = _v2_body_schema(components)
    for path, item in (document.paths or {}).items():
        for method in ("get", "head", "post", "put", "patch", "delete"):
            operation: Operation | None = getattr(item, method, None)
            if operation is None:
                continue
            if (path, method) == ("/api/v2/query", "post"):
                operation.request_body = RequestBody(
                    required=True,
                    content={"application/json": OpenAPIMediaType(schema=v2_body)},
                )
            if path == "/api/export":
                _export_content(operation)
            _amend(path, method, operation)
        if item.head is not None:
            item.head = _bodiless(item.head)


def _amend(path: str, method: str, operation: Operation) -> None:
    responses = operation.responses or {}
    body = operation.request_body
    if isinstance(body, RequestBody) and body.content:
        json_body = body.content.get("application/json")
        example = EXAMPLES.get((path, method))
        if json_body is not None and example is not None:
            json_body.examples = {"example": Example(summary="a working body", value=example)}
        if path == "/api/collect" and json_body is not None:
            # The tracker sends text/plain (a "simple" request: no CORS preflight).
            body.content["text/plain"] = json_body
        error = responses.get("400")  # the same Error body
        for code in (408, 413):  # a slow body, a large one: any route that reads one
            if str(code) not in responses and isinstance(error, OpenAPIResponse):
                responses[str(code)] = OpenAPIResponse(
                    description=ERROR_DESCRIPTIONS[code], content=error.content
                )
    # Every route refuses a malformed query string (a parameter given twice, a NUL: 400) and a
    # declared body over its cap (413), whether or not it takes a body or parameters.
    for code in (400, 413):
        if str(code) not in responses:
            responses[str(code)] = OpenAPIResponse(
                description=ERROR_DESCRIPTIONS[code], content=dict(_ERROR_CONTENT)
            )
    operation.responses = responses
    for status in ("429", "503"):
        response = responses.get(status)
        if isinstance(response, OpenAPIResponse):
            response.headers = {"Retry-After": _RETRY_AFTER}


def _bodiless(operation: Operation) -> Operation:
    """A HEAD operation: its answers' statuses and headers, without the GET's bodies (clients
    generated from the document parsed HEAD's empty body as the GET's JSON, and failed)."""
    responses = {
        status: replace(response, content=None)
        if isinstance(response, OpenAPIResponse)
        else response
        for status, response in (operation.responses or {}).items()
    }
    return replace(operation, responses=responses)


_ERROR_CONTENT = {
    "application/json": OpenAPIMediaType(schema=Reference(ref="#/components/schemas/Error"))
}


def _export_content(operation: Operation) -> None:
    ok = (operation.responses or {}).get("200")
    if isinstance(ok, OpenAPIResponse):
        ok.content = {kind: OpenAPIMediaType(schema=sch) for kind, sch in _EXPORT_TYPES.items()}


# The v2 query's date_range words: day, month, year, Nd (N 1-366) and Nmo (N 1-12).
_V2_RANGE_WORDS = (
    "^(day|month|year|([1-9][0-9]?|[12][0-9]{2}|3[0-5][0-9]|36[0-6])d|([1-9]|1[0-2])mo)$"
)
_ISO_DATE = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"


def _v2_body_schema(components: dict[str, Any]) -> Any:
    """``POST /api/v2/query``'s body as JSON Schema (from msgspec: the same type that decodes
    it), its parts named ``V2...`` among the components, with the values the query takes."""
    (body,), parts = msgspec.json.schema_components(
        [QueryBody], ref_template="#/components/schemas/V2{name}"
    )
    query = parts["QueryBody"]
    props = query["properties"]
    props["metrics"]["items"]["enum"] = list(METRICS)
    props["dimensions"]["items"]["enum"] = [*DIMENSIONS, *TIME_DIMENSIONS, *PLAUSIBLE_DIMENSIONS]
    props["date_range"]["description"] = (
        '"day" (today), "Nd" (the N days ending yesterday, N 1-366), "month", "year", "Nmo" '
        '(the N whole months before this one, N 1-12) or two dates ["YYYY-MM-DD", "YYYY-MM-DD"] '
        "(inclusive); local dates of the project's zone, at most 366 days"
    )
    props["filters"]["description"] = (
        "[operator, dimension, [values...]]: operator is, is_not, contains or contains_not; "
        "at most 20 filters"
    )
    # Typed, so that a client generator makes the operation (openapi-python-client left it out:
    # "type array must have items or prefixItems defined").
    props["filters"]["maxItems"] = MAX_FILTERS
    props["filters"]["items"] = {
        "type": "array",
        "minItems": 3,
        "maxItems": 3,
        "prefixItems": [
            {"type": "string", "enum": list(OPERATORS)},
            {"type": "string", "enum": [*DIMENSIONS, *PLAUSIBLE_DIMENSIONS]},
            {"type": "array", "items": {"type": "string"}, "maxItems": MAX_VALUES},
        ],
        "items": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    }
    props["order_by"]["description"] = '[[metric or dimension, "asc" or "desc"], ...]'
    # What the server refuses, said where a schema can say it: a value given twice, a filter
    # without values, a direction other than the two, a range the server does not read.
    props["metrics"]["uniqueItems"] = True
    props["dimensions"]["uniqueItems"] = True
    props["filters"]["items"]["prefixItems"][2]["minItems"] = 1
    props["order_by"]["anyOf"] = [
        {
            "type": "array",
            "items": {
                "type": "array",
                "minItems": 2,
                "maxItems": 2,
                "prefixItems": [{"type": "string"}, {"type": "string", "enum": ["asc", "desc"]}],
                "items": {"type": "string"},
            },
        },
        {"type": "null"},
    ]
    text, dates = props["date_range"]["anyOf"]
    text["pattern"] = _V2_RANGE_WORDS
    dates.update(minItems=2, maxItems=2, items={"type": "string", "pattern": _ISO_DATE})
    for name, schema in parts.items():
        components[f"V2{name}"] = schema
    return body


def _document_rules(components: dict[str, Any]) -> None:
    """What msgspec enforces but Litestar does not translate."""
    document_project_fields(components)
    for name in CLOSED_BODIES:  # forbid_unknown_fields
        if name in components:
            components[name].additional_properties = False
    event = components.get("Event")
    if event is not None and event.properties:
        # Metadata: at most 50 keys of 1-100 characters. Values are anyOf, not oneOf: an
        # integer is also a number, and oneOf would call every integer invalid.
        value = Schema(
            any_of=[
                Schema(type=OpenAPIType.STRING, max_length=1024),
                Schema(type=OpenAPIType.NUMBER),
                Schema(type=OpenAPIType.BOOLEAN),
                Schema(type=OpenAPIType.NULL),
            ]
        )
        event.properties["metadata"] = Schema(
            one_of=[
                Schema(
                    type=OpenAPIType.OBJECT,
                    max_properties=50,
                    property_names=Schema(type=OpenAPIType.STRING, min_length=1, max_length=100),
                    additional_properties=value,
                ),
                Schema(type=OpenAPIType.NULL),
            ],
            description="at most 50 keys of 1 to 100 characters; values are strings (at most "
            "1024 characters), numbers, booleans or null",
        )
