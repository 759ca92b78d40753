"""ClickHouse connections, configured by URL only.

``chdb:///abs/path[?database=name]`` opens the embedded engine in this process;
``http(s)://user:password@host:port/database`` talks to a ClickHouse server. Everything above this
module sees the same :class:`Storage` API whichever it is.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import struct
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError, ProgrammingError

from ..config import DATABASE_NAME
from .dedup_log import forget_uncommitted_blocks

T = TypeVar("T")


# Settings applied to every call.
SESSION_SETTINGS: dict[str, Any] = {
    # Tally batches inserts itself, so server-side async inserts would only add latency, and
    # its acknowledgement must mean "stored".
    "async_insert": 0,
    # A filtered view keeps the sessions with a kept event by a semi-join on their keys
    # (``session_hash IN (SELECT ...)``, query/filtered.py), hundreds of thousands of random
    # hashes under a filter on a common country or browser. Checked against the sort key's
    # index, such a set skips nothing (every granule holds some of them) and the check took a
    # quarter of the query. Sets of more keys than this are not used for the index; smaller
    # ones (the latest events' sessions, a filter's value hashes) still are.
    "use_index_for_in_with_subqueries_max_values": 10_000,
}

# Added in cluster mode, where Tally's tables are Distributed tables over replicated local ones.
CLUSTER_SETTINGS: dict[str, Any] = {
    # An INSERT into a Distributed table returns only once every shard it touches has stored its
    # rows (formerly ``insert_distributed_sync``). The default, a background queue on the node
    # that received it, would let Tally acknowledge events that sit in a local spool and are lost
    # with that node's disk; it would also make a new project or key invisible for a moment.
    "distributed_foreground_insert": 1,
    # Every query of the service names its project, and tables are sharded by project: ask only
    # the shard that holds it rather than all of them.
    "optimize_skip_unused_shards": 1,
}


def session_settings(cluster: str = "") -> dict[str, Any]:
    """The settings of every call, for one node (``cluster=""``) or a cluster."""
    return {**SESSION_SETTINGS, **CLUSTER_SETTINGS} if cluster else dict(SESSION_SETTINGS)


class StorageUnavailable(Exception):
    """ClickHouse could not be reached or failed to run a statement; the caller may retry."""


class ReportTooLarge(Exception):
    """A report needed more memory than one report may use (``TALLY_REPORT_MEMORY_MB``): asking
    again will not help, asking for less will."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_mib = limit_bytes // 2**20
        super().__init__(f"a report needed more than its {self.limit_mib} MiB")


# The engine's words for a query over its own ``max_memory_usage`` (26.x, then older versions);
# the whole server over its limit ("(total)") stays StorageUnavailable: it passes.
_OVER_QUERY_LIMIT = ("Query memory limit exceeded", "Memory limit (for query) exceeded")


@contextmanager
def _unavailable_on_failure() -> Iterator[None]:
    # Mistakes in Tally's own SQL (ProgrammingError) stay bugs; everything else the engine or
    # the connection reports means the storage cannot serve right now.
    try:
        yield
    except ProgrammingError:
        raise
    except (ClickHouseError, OSError) as exc:
        raise StorageUnavailable(str(exc)) from exc
    except (UnicodeDecodeError, IndexError, struct.error) as exc:
        # Bytes clickhouse-connect's reader cannot decode (text that is not UTF-8, a block cut
        # short): the embedded engine handed them over when a failed stream's unread blocks
        # reached the next query on its handle, which :meth:`Storage.client` now prevents. Should
        # any other answer come so, it is not there: a 503 to retry, not a 500.
        raise StorageUnavailable(f"the engine's answer could not be read ({exc})") from exc


@dataclass(frozen=True)
class Target:
    """Where the data lives, parsed from the URL."""

    kind: str  # "chdb" or "http"
    database: str
    path: str = ""  # chdb data folder
    host: str = ""
    port: int = 0
    username: str = ""
    password: str = ""
    secure: bool = False

    @property
    def description(self) -> str:
        """The target without credentials, safe to log."""
        if self.kind == "chdb":
            return f"embedded ClickHouse at {self.path} (database {self.database})"
        scheme = "https" if self.secure else "http"
        return f"ClickHouse server {scheme}://{self.host}:{self.port} (database {self.database})"


def parse_url(url: str, default_database: str = "tally") -> Target:
    """Parse a Tally storage URL. Raises ValueError with a readable message."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if parts.scheme == "chdb":
        path = unquote(parts.path)
        if parts.netloc or not path.startswith("/"):
            raise ValueError(
                f"embedded storage needs an absolute path: chdb:///abs/path, got {url!r}"
            )
        database = query.get("database", [default_database])[0]
        target = Target(kind="chdb", database=database, path=path)
    elif parts.scheme in ("http", "https"):
        database = unquote(parts.path.strip("/")) or query.get("database", [default_database])[0]
        secure = parts.scheme == "https"
        target = Target(
            kind="http",
            database=database,
            host=parts.hostname or "localhost",
            port=parts.port or (8443 if secure else 8123),
            username=unquote(parts.username or "default"),
            password=unquote(parts.password or ""),
            secure=secure,
        )
    else:
        raise ValueError(
            f"unsupported ClickHouse URL scheme {parts.scheme!r}: use chdb:// or http(s)://"
        )
    if not DATABASE_NAME.match(target.database):
        raise ValueError(f"invalid database name {target.database!r}")
    return target


def connect(
    target: Target,
    database: str | None = None,
    cluster: str = "",
    settings: dict[str, Any] | None = None,
) -> Client:
    """One clickhouse-connect client. ``database=""`` connects without selecting one;
    ``settings`` are added to every call of this client."""
    db = target.database if database is None else database
    every_call = {**session_settings(cluster), **(settings or {})}
    if target.kind == "chdb":
        client = clickhouse_connect.get_client(dsn=f"chdb://{target.path}", settings=every_call)
        if db:
            client.command(f"CREATE DATABASE IF NOT EXISTS {db}")
            client.database = db
        return client
    return clickhouse_connect.get_client(
        host=target.host,
        port=target.port,
        username=target.username,
        password=target.password,
        secure=target.secure,
        database=db or "default",
        settings=every_call,
        connect_timeout=5,
        send_receive_timeout=60,
        autogenerate_session_id=False,
    )


# Threads of the control lane (:meth:`Storage.run`): projects, keys, access checks, health.
CONTROL_THREADS = 4


class Storage:
    """A pool of clients on one target. Calls are blocking; ``run`` and ``report`` move them off
    the loop, each on a lane of threads of its own.

    clickhouse-connect serialises the calls of one client object, so concurrency comes from
    holding several: each thread borrows one for the length of a call.

    The *report* lane (:meth:`report`; half the pool's clients, its own) answers dashboards,
    breakdowns and the query API: statements that may each take seconds under a filter on a large
    tenant. Each of its queries may use at most ``report_memory_mb`` (by default a quarter of what
    the engine allows all queries together): an analyst's four-dimension year, which grows with
    the tenant, then fails alone with ReportTooLarge, not the dashboards and the loader's INSERT
    running beside it when the engine as a whole runs out (in the embedded engine, the process).
    The *control* lane (:meth:`run`) runs the short statements: access checks, projects and
    keys, health. Both shared the event loop's default executor before (a few threads): four
    users opening filtered dashboards on a 10M-event tenant queued a health check for up to 5.5 s,
    longer than a container health check waits, and the loader's INSERT behind them (the loader
    has a thread of its own, storage/loader.py). Now a slow report waits only for other reports.
    """

    def __init__(
        self, target: Target, pool_size: int = 4, cluster: str = "", report_memory_mb: int = 0
    ) -> None:
        self.target = target
        self.database = target.database
        # The ClickHouse cluster the schema lives on ("" on one node): see storage/migrate.py.
        self.cluster = cluster
        self._pool: queue.LifoQueue[Client] = queue.LifoQueue()
        self._report_pool: queue.LifoQueue[Client] = queue.LifoQueue()
        self._clients: list[Client] = []
        self._clients_lock = threading.Lock()
        self._set: dict[str, str] = {}  # set_setting's, for a client made after
        if target.kind == "chdb":
            # Before the engine opens: blocks a crash recorded but never stored (dedup_log.py).
            forget_uncommitted_blocks(target.path)
        first = connect(target, database="")
        try:
            first.command(f"CREATE DATABASE IF NOT EXISTS {self.database}")
            self.report_memory = report_memory_mb * 2**20 or _quarter_of_engine_memory(first)
        finally:
            first.close()
        self.report_threads = max(1, pool_size // 2)
        for _ in range(max(1, pool_size - self.report_threads)):
            client = connect(target, cluster=cluster)
            self._clients.append(client)
            self._pool.put(client)
        # The report lane's own clients, each with the lane's memory cap on every call.
        self._capped = {"max_memory_usage": self.report_memory} if self.report_memory else {}
        for _ in range(self.report_threads):
            client = connect(target, cluster=cluster, settings=self._capped)
            self._clients.append(client)
            self._report_pool.put(client)
        # Reports waiting for a thread of their lane, running, and stopped because their caller
        # left (never started, or killed while running): /api/health shows them.
        self.reports = {"waiting": 0, "running": 0, "stopped": 0}
        self._reports_lock = threading.Lock()
        self._control = ThreadPoolExecutor(CONTROL_THREADS, thread_name_prefix="tally-control")
        self._reports = ThreadPoolExecutor(self.report_threads, thread_name_prefix="tally-report")

    @contextmanager
    def client(self, pool: queue.LifoQueue[Client] | None = None) -> Iterator[Client]:
        """A client of ``pool`` (the control lane's by default) for one call. On the embedded
        engine a client whose call failed is closed and replaced, never lent again: after a
        result stream fails partway (a query killed, over its memory cap, or an engine error
        while it streams), the engine hands that stream's unread blocks to the next query on
        the same handle, which then failed to decode or, when the blocks parsed, returned the
        failed query's rows before its own (tests/test_stale_stream.py). A new client costs some
        15 ms; a failure is rare."""
        pool = self._pool if pool is None else pool
        client = pool.get()
        try:
            yield client
        except BaseException:
            if self.target.kind == "chdb":
                client = self._replace(client, pool)
            raise
        finally:
            pool.put(client)

    def _replace(self, client: Client, pool: queue.LifoQueue[Client]) -> Client:
        """A new client with ``client``'s settings (the report lane's memory cap), in its place
        in the list :meth:`close` closes; ``client`` itself is closed. Should the new one fail to
        connect, ``client`` is kept: the lane keeps its size."""
        settings = {**(self._capped if pool is self._report_pool else {}), **self._set}
        try:
            fresh = connect(self.target, cluster=self.cluster, settings=settings)
        except Exception:
            return client
        with self._clients_lock:
            closed = client not in self._clients  # the storage closed meanwhile
            if not closed:
                self._clients[self._clients.index(client)] = fresh
        with suppress(Exception):
            (fresh if closed else client).close()
        return client if closed else fresh

    @contextmanager
    def own_client(self) -> Iterator[Client]:
        """A client of its own, closed after, for a call that holds one for long: an export is
        read at the pace of whoever downloads it, and slow downloads holding every client of
        the pool kept the next export, the health check and the loader's INSERT waiting for one
        until a download ended. A new client costs some 15 ms."""
        with _unavailable_on_failure():
            client = connect(self.target, cluster=self.cluster)
        try:
            yield client
        finally:
            with suppress(Exception):
                client.close()

    def set_setting(self, name: str, value: str) -> None:
        """A setting on every client of the pool, for every call after (scripts/projection_ab.py
        reads a tenant with and without projections this way)."""
        self._set[name] = value
        for client in self._clients:
            client.set_client_setting(name, value)

    def close(self) -> None:
        for lane in (self._control, self._reports):
            lane.shutdown(wait=False, cancel_futures=True)
        for client in self._clients:
            with suppress(Exception):
                client.close()
        self._clients.clear()

    # --- blocking API ------------------------------------------------------------------------
    def query(
        self,
        sql: str,
        parameters: dict[str, Any] | None = None,
        pool: queue.LifoQueue[Client] | None = None,
    ) -> list[tuple[Any, ...]]:
        with self.client(pool) as client, _unavailable_on_failure():
            result = client.query(sql, parameters=parameters)
            return [tuple(row) for row in result.result_rows]

    def _report_query(self, sql: str, parameters: dict[str, Any] | None) -> list[tuple[Any, ...]]:
        """A query on a report client: over the lane's memory cap it is ReportTooLarge."""
        try:
            return self.query(sql, parameters, self._report_pool)
        except StorageUnavailable as exc:
            if any(words in str(exc) for words in _OVER_QUERY_LIMIT):
                raise ReportTooLarge(self.report_memory) from exc
            raise

    def command(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        with self.client() as client, _unavailable_on_failure():
            return client.command(sql, parameters=parameters)

    def insert(
        self,
        table: str,
        columns: Sequence[Sequence[Any]],
        column_names: Sequence[str],
        settings: dict[str, Any] | None = None,
        column_types: Sequence[str] | None = None,
    ) -> None:
        """Column-oriented INSERT of one block. Known ``column_types`` save a DESCRIBE per call."""
        with self.client() as client, _unavailable_on_failure():
            client.insert(
                table,
                columns,
                column_names=list(column_names),
                column_type_names=list(column_types) if column_types else None,
                column_oriented=True,
                settings=settings,
            )

    def raw_insert(
        self,
        table: str,
        column_names: Sequence[str],
        data: bytes,
        fmt: str,
        settings: dict[str, Any] | None = None,
    ) -> None:
        """INSERT of ``data`` already encoded in ClickHouse input format ``fmt``."""
        with self.client() as client, _unavailable_on_failure():
            client.raw_insert(table, list(column_names), data, settings=settings, fmt=fmt)

    # --- async API ---------------------------------------------------------------------------
    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a short blocking storage call on the control lane."""
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._control, call)

    async def aquery(
        self, sql: str, parameters: dict[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """A short query on the control lane."""
        return await self.run(self.query, sql, parameters)

    async def report(
        self, sql: str, parameters: dict[str, Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """A query of a dashboard, breakdown or the query API, on the report lane.

        Cancelled (the request's client went away: http/gone.py), the query stops: one still
        waiting for a thread never runs, one running is killed (found by the comment its text
        starts with), so that views a user clicked past do not hold up the one they clicked to.
        A comment rather than a setting: the embedded engine would apply a setting to the
        client for the calls after too."""
        comment = f"/* tally-report {uuid.uuid4().hex} */"

        def call() -> list[tuple[Any, ...]]:
            self._count(waiting=-1, running=1)
            try:
                return self._report_query(f"{comment} {sql}", parameters)
            finally:
                self._count(running=-1)

        self._count(waiting=1)
        job = self._reports.submit(call)
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            if job.cancel():  # still waiting for a thread: it never runs
                self._count(waiting=-1, stopped=1)
            elif not job.done():
                # Not awaited: the caller is gone, and the KILL takes a few milliseconds.
                self._count(stopped=1)
                self._control.submit(self.kill, "startsWith(query, {m:String})", {"m": comment})
            raise

    def _count(self, **changes: int) -> None:
        with self._reports_lock:
            for name, change in changes.items():
                self.reports[name] += change

    def kill(self, condition: str, parameters: dict[str, Any]) -> None:
        """Stop the running queries that ``condition`` (on system.processes) finds, without
        waiting for them to end; best effort: a failure is ignored, the query then runs on."""
        with suppress(Exception):
            self.command(f"KILL QUERY WHERE {condition} ASYNC", parameters)


async def together(*calls: Awaitable[T]) -> list[T]:
    """Run ``calls`` (a view's report queries) concurrently and return their results in order.
    When one fails, the others are cancelled before its failure is raised: their queries stop
    (:meth:`Storage.report`) rather than run on, unawaited, for an answer already given (a 400
    over the memory cap, a 503). ``asyncio.gather`` leaves them running; a ``TaskGroup`` would
    raise an ExceptionGroup, which the HTTP layer's handlers do not map."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _quarter_of_engine_memory(client: Client) -> int:
    """A quarter of the memory the engine lets all its queries use together (its
    ``max_server_memory_usage``: 90% of the machine's or the container's memory by default); 0
    (no cap) when the engine does not say."""
    with suppress(Exception):
        rows = client.query(
            "SELECT toUInt64OrZero(value) FROM system.server_settings"
            " WHERE name = 'max_server_memory_usage'"
        ).result_rows
        return int(rows[0][0]) // 4 if rows else 0
    return 0
