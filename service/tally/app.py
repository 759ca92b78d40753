"""The application factory: ``create_app(settings) -> Litestar``.

Nothing reads the environment at import time. ``tally serve`` hands granian :func:`app_factory`,
which loads settings in each worker; tests call :func:`create_app` with their own settings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, Schema, SecurityScheme
from litestar.openapi.spec.enums import OpenAPIType
from litestar.types import Message, Scope

from .config import Settings, load_settings
from .domain.privacy import IpHasher
from .http.auth import SessionVerifier
from .http.breakdown import breakdown
from .http.controllers import ProjectController, collect, dashboard, health
from .http.errors import EXCEPTION_HANDLERS
from .http.pages import PAGE_HANDLERS, WebFiles
from .http.ratelimit import RateLimits
from .http.schemas import CLOSED_BODIES
from .http.timeouts import body_deadline
from .storage.client import Storage, parse_url
from .storage.keys import KeyRegistry
from .storage.migrate import migrate as apply_schema
from .storage.projects import ProjectStore
from .storage.writer import BatchWriter, InsertFn, events_inserter

log = logging.getLogger("tally")

OPENAPI = OpenAPIConfig(
    title="Tally",
    version="1.0.0",
    description="Web analytics on ClickHouse: collect events, manage projects and keys, "
    "read dashboards.",
    path="/api/schema",
    components=Components(
        security_schemes={
            "session": SecurityScheme(type="http", scheme="bearer", bearer_format="JWT"),
            "apiKey": SecurityScheme(type="apiKey", name="x-api-key", security_scheme_in="header"),
            "apiKeyQuery": SecurityScheme(type="apiKey", name="apiKey", security_scheme_in="query"),
        }
    ),
)

CORS = CORSConfig(
    allow_origins=["*"],
    allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
    allow_headers=["content-type", "x-api-key", "authorization"],
    max_age=86400,
)


# Sent with every response, errors included: an API has nothing to frame, sniff or cache. The
# page routes (http/pages.py) set their own Content-Security-Policy and Cache-Control.
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"cache-control", b"no-store"),
]


async def add_security_headers(message: Message, scope: Scope) -> None:
    if message["type"] == "http.response.start":
        present = {name.lower() for name, _ in message.get("headers", [])}
        extra = [(n, v) for n, v in SECURITY_HEADERS if n not in present]
        message["headers"] = [*message.get("headers", []), *extra]


def _noop_insert(rows: list[tuple[Any, ...]], token: str) -> None:
    """Benchmark-only storage: measures the HTTP stack and decoder without ClickHouse."""


def create_app(settings: Settings, *, migrate: bool = False) -> Litestar:
    """Build the Tally app. ``migrate=True`` applies ``schema/`` at startup (tests, one process)."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        state = app.state
        target = parse_url(settings.storage_url, settings.clickhouse_database)
        log.info("storage: %s", target.description)
        storage = await asyncio.to_thread(
            Storage, target, settings.clickhouse_pool_size, settings.clickhouse_cluster
        )
        if migrate:
            await asyncio.to_thread(apply_schema, storage, settings.retention_days)
        store = ProjectStore(storage)
        keys = KeyRegistry(
            store,
            refresh_interval=settings.key_refresh_seconds,
            usage_interval=settings.last_used_flush_seconds,
        )
        insert: InsertFn = (
            _noop_insert
            if settings.bench_noop_storage
            else events_inserter(storage, settings.fault_file)
        )
        writer = BatchWriter(
            insert,
            max_events=settings.batch_max_events,
            max_delay=settings.batch_max_delay_ms / 1000,
            attempts=settings.insert_attempts,
            backoff=settings.insert_retry_backoff_ms / 1000,
            buffer_limit=settings.buffer_limit_events,
            max_inflight=settings.batch_max_inflight,
            buffer_limit_bytes=settings.buffer_limit_mb * 1024 * 1024,
        )
        state.storage, state.store, state.registry, state.writer = storage, store, keys, writer
        await keys.start()
        writer.start()
        try:
            yield
        finally:
            # Drain first: every buffered event is stored (or refused) before storage closes.
            await writer.stop()
            try:
                await keys.stop()
            except Exception as exc:
                log.warning("could not store last-use times: %s", exc)
            storage.close()

    state = State(
        {
            "settings": settings,
            "sessions": SessionVerifier(settings),
            "limits": RateLimits(settings),
            "hash_ip": IpHasher(settings) if settings.ip_privacy == "hash" else str,
            "web_files": WebFiles(),
        }
    )
    app = Litestar(
        route_handlers=[ProjectController, collect, dashboard, breakdown, health, *PAGE_HANDLERS],
        state=state,
        lifespan=[lifespan],
        exception_handlers=EXCEPTION_HANDLERS,
        openapi_config=OPENAPI,
        cors_config=CORS,
        before_send=[add_security_headers],
        middleware=[body_deadline(settings.body_timeout_seconds)],
        logging_config=None,
        debug=False,
    )
    _complete_openapi(app)
    return app


def _complete_openapi(app: Litestar) -> None:
    """Say in the document what msgspec enforces but Litestar does not translate."""
    components = app.openapi_schema.components.schemas or {}
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


def app_factory() -> Litestar:
    """Entry point for granian workers: settings from the environment of the worker."""
    settings = load_settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return create_app(settings)
