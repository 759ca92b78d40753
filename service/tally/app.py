"""The application factory: ``create_app(settings) -> Litestar``.

Nothing reads the environment at import time. ``tally serve`` hands granian :func:`app_factory`,
which loads settings in each worker; tests call :func:`create_app` with their own settings.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.datastructures import State
from litestar.types import Message, Scope

from .config import Settings, load_settings
from .domain import zones
from .domain.geo import CountryReader
from .domain.privacy import IpHasher
from .http import collect_fast, compression, cors, drain, openapi_doc
from .http.access import ProjectLocks, true_allow
from .http.auth import SessionVerifier
from .http.breakdown import breakdown
from .http.controllers import ProjectController, alive, collect, dashboard, health
from .http.errors import EXCEPTION_HANDLERS
from .http.export import EXPORT_HANDLERS
from .http.gone import shielded_receive
from .http.limits import body_cap
from .http.limits_doc import markdown
from .http.live import live
from .http.pages import PAGE_HANDLERS, WebFiles
from .http.query import strict_query
from .http.ratelimit import RateLimits
from .http.timeouts import body_deadline
from .http.v2 import v2_query
from .storage.client import Storage, Target, parse_url
from .storage.export import sweep_spool
from .storage.ingestlog import IngestLog
from .storage.keys import KeyRegistry
from .storage.loader import Loader
from .storage.migrate import migrate as apply_schema
from .storage.projects import ProjectStore
from .storage.writer import LOGGED_COLUMNS, segment_inserter
from .storage.zones import engine_offsets, zones_in_use
from .supervision import exit_with_parent

log = logging.getLogger("tally")

CORS = CORSConfig(
    allow_origins=["*"],
    allow_methods=["GET", "POST", "PATCH", "DELETE", "OPTIONS"],
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


def fault_pause(settings: Settings) -> Any:
    """Fault tests only (``fault_pause_at``, ``point`` or ``point:n``): the n-th time (default
    the first) the ingest path passes that point, say so in ``<data_dir>/fault-paused`` and stop
    there for good, for the test to kill the process at that point."""
    point, _, nth = settings.fault_pause_at.partition(":")
    passes = {"left": int(nth or 1)}

    def pause(name: str, block: bool) -> None:
        if name != point or passes["left"] <= 0:
            return
        if not block and passes["left"] == 1:  # a marker only: the next blocking pass stops
            (settings.data_path / "fault-paused").write_text(name)
            return
        if not block:
            return
        passes["left"] -= 1
        if passes["left"] > 0:
            return
        (settings.data_path / "fault-paused").write_text(name)
        while True:
            time.sleep(3600)

    return pause


# A worker that starts while its ClickHouse server does not answer waits for it, trying again
# after this many seconds, doubling up to the second figure.
STORAGE_RETRY_SECONDS = (1.0, 30.0)


async def reachable_storage(settings: Settings, target: Target) -> Storage:
    """The storage pool, once ClickHouse answers. A server that does not answer is waited for,
    with a log line per attempt: a worker started in an outage (a new pod, or one replaced after
    the OOM killer) that crashed instead was restarted at once and crashed again, and granian
    then stopped the whole server, its healthy workers and their ingest logs included. The
    embedded engine is in this process: what fails there does not pass by waiting."""

    def open_pool() -> Storage:
        return Storage(
            target,
            settings.clickhouse_pool_size,
            settings.clickhouse_cluster,
            settings.report_memory_mb,
        )

    delay, ceiling = STORAGE_RETRY_SECONDS
    while True:
        try:
            return await asyncio.to_thread(open_pool)
        except Exception as exc:
            if target.kind == "chdb":
                raise
            log.warning(
                "%s does not answer (%s); this worker waits for it, trying again in %.0f s",
                target.description,
                exc,
                delay,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, ceiling)


def warm_zones(storage: Storage) -> None:
    """Read the stored projects' zone rules from the engine (a few milliseconds each)."""
    try:
        for name in zones_in_use(storage):
            zones.zone(name)
    except Exception as exc:  # a request reads its zone then
        log.warning("could not read the projects' time zones ahead: %s", exc)


def create_app(settings: Settings, *, migrate: bool = False) -> Litestar:
    """Build the Tally app. ``migrate=True`` applies ``schema/`` at startup (tests, one process)."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        state = app.state
        target = parse_url(settings.storage_url, settings.clickhouse_database)
        log.info("storage: %s", target.description)
        storage = await reachable_storage(settings, target)
        if migrate:
            await asyncio.to_thread(apply_schema, storage, settings.retention_days)
        # Local days and hours by the engine's zone rules, in Python too (domain/zones.py); the
        # stored projects' zones are read now, in the background, rather than by a request.
        zone_rules = partial(engine_offsets, storage)
        zones.use(zone_rules)
        warming = asyncio.create_task(asyncio.to_thread(warm_zones, storage))
        if target.kind == "chdb":
            await asyncio.to_thread(sweep_spool, storage)
        store = ProjectStore(storage)
        keys = KeyRegistry(
            store,
            refresh_interval=settings.key_refresh_seconds,
            usage_interval=settings.last_used_flush_seconds,
        )
        pause = fault_pause(settings) if settings.fault_pause_at else None
        ingest = IngestLog(
            settings.log_path,
            LOGGED_COLUMNS,
            cap_bytes=int(settings.log_cap_mb * (1 << 20)),
            seal_bytes=int(settings.log_segment_mb * (1 << 20)),
            seal_age=settings.log_seal_age_ms / 1000,
            # Benchmark only: acknowledge without storing (the HTTP stack's ceiling).
            noop=settings.bench_noop_storage,
            **({"pause": pause} if pause else {}),
        )
        try:
            await asyncio.to_thread(ingest.open)
        except Exception as exc:
            # Serve anyway (dashboards work): collect answers 503 until the log can be written.
            log.error("ingest log under %s is not writable: %s", settings.log_path, exc)
            ingest.write_error = str(exc)  # /api/health answers 503 until a commit succeeds
        loader = Loader(
            ingest,
            segment_inserter(storage, settings.fault_file),
            backoff_min=settings.load_retry_min_ms / 1000,
            backoff_max=settings.load_retry_max_ms / 1000,
            **({"pause": pause} if pause else {}),
        )
        state.storage, state.store, state.registry = storage, store, keys
        state.ingest, state.loader = ingest, loader
        await keys.start()
        ingest.start()
        if not settings.bench_noop_storage:
            # Loads what an earlier process left while this one already accepts events.
            loader.start()
        try:
            yield
        finally:
            # Commit what is waiting, then load what the time allows; the rest stays on disk.
            await ingest.stop()
            await loader.stop(timeout=max(1.0, settings.shutdown_timeout_seconds * 0.8))
            ingest.close()
            try:
                await keys.stop()
            except Exception as exc:
                log.warning("could not store last-use times: %s", exc)
            warming.cancel()
            zones.release(zone_rules)
            storage.close()

    state = State(
        {
            "settings": settings,
            "sessions": SessionVerifier(settings),
            "limits": RateLimits(settings),
            "hash_ip": IpHasher(settings) if settings.ip_privacy == "hash" else str,
            "geo": CountryReader.from_settings(settings),
            "web_files": WebFiles(),
            "project_locks": ProjectLocks(),
        }
    )
    app = Litestar(
        route_handlers=[
            ProjectController,
            collect,
            dashboard,
            breakdown,
            live,
            v2_query,
            health,
            alive,
            *EXPORT_HANDLERS,
            *PAGE_HANDLERS,
        ],
        state=state,
        lifespan=[lifespan],
        exception_handlers=EXCEPTION_HANDLERS,
        # The document states every limit and default, as configured (http/limits_doc.py).
        openapi_config=openapi_doc.openapi_config(
            f"{openapi_doc.DESCRIPTION}\n\n## Limits and defaults\n\n" + markdown(settings)
        ),
        cors_config=CORS,
        # JSON answers gzipped for clients that take it (http/compression.py).
        compression_config=compression.COMPRESSION,
        before_send=[add_security_headers, true_allow],
        # The cap first: an oversized body is refused before the deadline starts counting. The
        # shield outermost, next to the server: every cancelled receive() is one it absorbs.
        middleware=[
            shielded_receive,
            body_cap(settings.max_body_bytes),
            body_deadline(settings.body_timeout_seconds),
            strict_query,
        ],
        # Litestar's own cap, at the same figure, behind ours (it would otherwise be 10 MB).
        request_max_body_size=settings.max_body_bytes or None,
        logging_config=None,
        debug=False,
    )
    openapi_doc.complete(app)
    # A refused CORS preflight answers in the JSON error shape (http/cors.py).
    cors.install(app)
    # POST /api/collect answered without the framework's per-request layers (same checks, same
    # answers; http/collect_fast.py). Tests switch it off through state.collect_fast.enabled.
    app.state.collect_fast = collect_fast.install(app)
    # Around everything: an answer sent before the body was read reads it first, or closes the
    # connection saying so (http/drain.py).
    app.asgi_handler = drain.DrainUnread(
        app.asgi_handler, settings.max_body_bytes, settings.body_timeout_seconds
    )
    return app


def app_factory() -> Litestar:
    """Entry point for granian workers: settings from the environment of the worker."""
    exit_with_parent()  # a worker never outlives `tally serve` (tally/supervision.py)
    settings = load_settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return create_app(settings)
