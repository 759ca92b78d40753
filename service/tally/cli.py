"""The ``tally`` command: serve, migrate, token."""

from __future__ import annotations

import ipaddress
import logging
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import click

from .config import (
    DATABASE_NAME,
    DEV_SECRET_FILE,
    Settings,
    dev_secret,
    load_settings,
    settings_to_env,
    unknown_names,
)
from .domain.privacy import IP_SECRET_FILE

log = logging.getLogger("tally")


def _setup_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Tally: web analytics on ClickHouse."""


# `tally migrate --check` (what `tally serve --no-migrate` runs first): its exit status when
# the storage cannot be reached, apart from 1 (migrations missing), so that serve can tell them
# apart: a ClickHouse server that does not answer yet is waited for by the worker, as before.
CHECK_UNREACHABLE = 3


@main.command()
@click.option(
    "--quiet",
    is_flag=True,
    help="Print nothing when there is nothing new (new migrations and retention changes are "
    "still said).",
)
@click.option(
    "--check",
    is_flag=True,
    hidden=True,
    help="Apply nothing: exit 1, naming them, when the database has recorded migrations but "
    "lacks some of this release's (what `tally serve --no-migrate` checks at start).",
)
def migrate(quiet: bool, check: bool) -> None:
    """Apply schema/ and the retention TTL (TALLY_RETENTION_DAYS) to the configured ClickHouse
    (idempotent, ordered, recorded)."""
    from .storage.client import Storage, parse_url
    from .storage.migrate import (
        NoRoomForSchema,
        migrate_schema,
        missing_migrations,
        retention_report,
    )
    from .supervision import exit_with_parent

    settings = load_settings()
    _setup_logging(settings)
    # Run by `tally serve` (which names itself in PARENT_ENV): die with it. Left running after a
    # kill -9 of the server, it held the engine and every restart was refused until it ended.
    exit_with_parent()
    try:
        target = parse_url(settings.storage_url, settings.clickhouse_database)
    except ValueError as exc:
        raise SystemExit(f"tally: invalid TALLY_CLICKHOUSE_URL: {exc}") from None
    if settings.embedded:
        _usable_data_folder(settings)
        # `tally serve` holds the folder and runs this as its child: that is the one holder
        # allowed; any other means a server has the engine open.
        _hold_engine_folder(settings, allowed=os.getppid())
    try:
        storage = Storage(target, pool_size=1, cluster=settings.clickhouse_cluster)
    except Exception as exc:
        if target.kind == "chdb" and "Cannot lock file" in str(exc):
            # another process opened the engine between the check above and here
            raise SystemExit(_folder_in_use(settings, _engine_holder(settings) or 0)) from None
        message = f"tally: cannot reach {target.description}: {exc}"
        if check:
            click.echo(message, err=True)
            raise SystemExit(CHECK_UNREACHABLE) from None
        raise SystemExit(message) from None
    if check:
        try:
            missing = missing_migrations(storage)
        except Exception as exc:
            click.echo(f"tally: cannot read the schema of {target.description}: {exc}", err=True)
            raise SystemExit(CHECK_UNREACHABLE) from None
        finally:
            storage.close()
        if missing is None and target.kind == "chdb":
            # The embedded engine allows one process: no migrate can run beside this server,
            # which would answer 503 to every call while its health check said ok.
            raise SystemExit(
                f"tally: no schema in {target.description} yet: run `tally migrate` first (the "
                "embedded engine allows one process, so it cannot run beside the server), or "
                "start `tally serve` without --no-migrate"
            )
        if missing is None:
            # A first install: the migrate step may be running beside this server, which answers
            # 503 until the tables exist (docs/operations.md, "Schema upgrades").
            log.warning("no schema in %s yet: run `tally migrate`", target.description)
        elif missing:
            raise SystemExit(
                f"tally: the schema of {target.description} is behind this release of Tally: "
                f"{len(missing)} migration(s) not applied ({', '.join(missing)}). Run `tally "
                "migrate` with this release (deploy/: the tally-migrate Compose service or "
                "Kubernetes Job), then start it again."
            )
        return
    if settings.fault_pause_at == "migrate":
        # Fault tests only: stop here, the engine open, for a test to kill `tally serve`.
        (settings.data_path / "fault-paused").write_text("migrate")
        while True:
            time.sleep(3600)
    try:
        done = migrate_schema(storage, settings.retention_days)
    except NoRoomForSchema as exc:
        raise SystemExit(f"tally: not changing the schema: {exc}") from None
    except Exception as exc:
        raise SystemExit(f"tally: cannot apply the schema to {target.description}: {exc}") from None
    finally:
        storage.close()
    retention = retention_report(done.retention, settings.retention_days)
    if done.new:
        names = [
            f"{name} (again: its SQL changed since it was applied)" if name in done.again else name
            for name in done.new
        ]
        click.echo(
            f"applied {len(done.new)} migration(s) to {target.description}: " + ", ".join(names)
        )
    if retention:
        click.echo(retention)
    if not (done.new or retention or quiet):
        days = settings.retention_days
        kept = f"a TTL of {days} day{'s' if days != 1 else ''}" if days else "no TTL, keeping all"
        click.echo(f"schema of {target.description} is up to date (retention: {kept})")


@main.command()
@click.option("--database", help="Database name to render (default: the configured one).")
@click.option(
    "--cluster",
    help="Render for this ClickHouse cluster: ON CLUSTER, replicated local tables behind "
    "Distributed ones (default: TALLY_CLICKHOUSE_CLUSTER; empty for one node).",
)
def schema(database: str | None, cluster: str | None) -> None:
    """Print the DDL that `tally migrate` runs, for review, with the retention TTL of
    TALLY_RETENTION_DAYS as set on a new database."""
    from .storage.client import parse_url
    from .storage.migrate import (
        database_statement,
        load_migrations,
        migrations_table,
        retention_statements,
    )

    settings = load_settings()
    try:
        name = database or parse_url(settings.storage_url, settings.clickhouse_database).database
    except ValueError as exc:
        raise SystemExit(f"tally: invalid TALLY_CLICKHOUSE_URL: {exc}") from None
    if not DATABASE_NAME.match(name):
        raise SystemExit(
            f"tally: --database must be a plain identifier (letters, digits, underscore), "
            f"got {name!r}"
        )
    cluster = settings.clickhouse_cluster if cluster is None else cluster
    try:
        ddl = [database_statement(name, cluster), migrations_table(name, cluster)]
        migrations = [(m.name, m.statements(name, cluster)) for m in load_migrations()]
        # A new database's tables have no TTL: these are the ALTERs that set the configured one.
        retention = retention_statements({}, settings.retention_days, name, cluster)
    except ValueError as exc:
        raise SystemExit(f"tally: {exc}") from None
    for statement in ddl:
        click.echo(statement.strip() + ";\n")
    for migration, statements in migrations:
        click.echo(f"-- {migration}")
        for statement in statements:
            click.echo(statement.strip() + ";\n")
    days = settings.retention_days
    if days > 0:
        click.echo(
            f"-- retention: TALLY_RETENTION_DAYS={days}, a TTL on events and every rollup (on an "
            "existing database `tally migrate` runs the ALTERs of the tables whose TTL differs)"
        )
        for statement in retention:
            click.echo(statement.strip() + ";\n")
    else:
        click.echo(
            "-- retention: TALLY_RETENTION_DAYS=0, no TTL (on an existing database `tally "
            "migrate` runs ALTER TABLE ... REMOVE TTL on the tables that have one)"
        )


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="An address or host name.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option("--workers", default=1, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--migrate/--no-migrate",
    default=True,
    show_default=True,
    help="Apply the schema before serving. Deployments that run `tally migrate` as a step of "
    "their own (Compose, a Kubernetes Job) pass --no-migrate.",
)
def serve(host: str, port: int, workers: int, migrate: bool) -> None:
    """Run the HTTP API under granian (applies the schema first, unless --no-migrate)."""
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings

    from .supervision import PARENT_ENV, PORT_TAKEN, claim_port, port_is_free

    settings = load_settings()
    _setup_logging(settings)
    for line in unknown_names():
        log.warning("%s", line)
    host = _address(host)
    _usable_data_folder(settings)
    if settings.geoip_db:
        from .domain.geo import CountryReader

        try:  # else each worker would fail on it and granian restart them in a loop
            CountryReader(settings.geoip_db).close()
        except ValueError as exc:
            raise SystemExit(f"tally: invalid configuration: {exc}") from None
    # granian binds with SO_REUSEPORT, which would let a second server share the port silently:
    # the claim keeps another `tally serve` off it from here to granian's bind (supervision.py).
    if not claim_port(host, port) or not port_is_free(host, port):
        raise SystemExit(
            f"tally: port {port} on {host} {PORT_TAKEN}; stop "
            "that server or choose another port with --port"
        )
    if settings.embedded and workers > 1:
        raise SystemExit(
            "tally: the embedded ClickHouse engine allows one process, so --workers must be 1. "
            "Point TALLY_CLICKHOUSE_URL at a ClickHouse server to run several workers."
        )
    if settings.embedded:
        _hold_engine_folder(settings)
    if settings.ip_privacy == "hash" and not settings.ip_hash_secret:
        # Made here, before the workers, which would otherwise each race to make it.
        dev_secret(settings, name=IP_SECRET_FILE)
    if settings.dev_mode:
        dev_secret(settings)
        log.warning(
            "dev mode: no TALLY_JWT_SECRET or TALLY_JWKS_URL set; sessions are signed with a "
            "random secret kept in %s. For a session token run: %s",
            settings.data_path,
            token_command(settings),
        )
    # The schema is applied by a child process, so that this one never holds the embedded
    # engine that the worker is about to open.
    # The migrate child dies with this process, as the workers do (supervision.exit_with_parent).
    env = {**os.environ, **settings_to_env(settings), PARENT_ENV: str(os.getpid())}
    if migrate:
        done = subprocess.run([sys.executable, "-m", "tally", "migrate", "--quiet"], env=env)
        if done.returncode != 0:
            raise SystemExit("tally: not starting, the schema could not be applied (see above)")
    else:
        # The schema is someone else's step (a migrate Job): make sure it ran for this release.
        # Served on an older schema, the health check said ok and breakdowns answered 503.
        done = subprocess.run([sys.executable, "-m", "tally", "migrate", "--check"], env=env)
        if done.returncode == CHECK_UNREACHABLE and not settings.embedded:
            log.warning("the schema could not be checked (see above); the worker waits for it")
        elif done.returncode != 0:
            raise SystemExit("tally: not starting (see above)")
    os.environ.update(settings_to_env(settings))
    # Workers die with this process (tally.supervision.exit_with_parent reads it).
    os.environ[PARENT_ENV] = str(os.getpid())
    server = Granian(
        "tally.app:app_factory",
        factory=True,
        interface=Interfaces.ASGI,
        address=host,
        port=port,
        workers=workers,
        log_access=False,
        workers_kill_timeout=settings.shutdown_timeout_seconds,
        # A worker killed alone (OOM killer, kill -9) is replaced; one that crashes again within
        # seconds of its start stops the server instead of looping.
        respawn_failed_workers=True,
        # The request target (path and query string) is capped at 65,534 bytes by granian's HTTP
        # library (the http crate's Uri), 414 beyond, whatever max_buffer_size says (that bounds
        # the headers): http/limits.py caps filters at 16 KiB so that every valid query fits.
        # HTTP/1 only: granian's default ("auto") also took cleartext HTTP/2 (prior knowledge),
        # where the header deadline does not apply: a connection sending part of its headers,
        # or nothing, was held open for good. HTTP/2 to browsers is the TLS proxy's side.
        http=HTTPModes.http1,
        http1_settings=HTTP1Settings(
            header_read_timeout=int(settings.header_timeout_seconds * 1000)
        ),
    )
    if settings.embedded:
        # granian's SIGHUP starts a new worker before it stops the old one, and the embedded
        # engine allows one process: the new worker failed, then the whole server stopped.
        server.signal_handler_reload = _hup_ignored  # type: ignore[method-assign]
    log.info("Tally starting on http://%s:%d", host, port)
    ready = threading.Thread(target=_say_when_ready, args=(host, port), name="tally-ready")
    ready.daemon = True
    ready.start()
    server.serve()


def _say_when_ready(host: str, port: int, timeout: float = 900) -> None:
    """Log "Tally listening on ..." once a worker answers (its liveness probe), not when granian
    is started: logged before, the line came seconds before the worker took connections (about
    10 s under load), and a script that waited for it was refused."""
    probe = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    url = f"http://{f'[{probe}]' if ':' in probe else probe}:{port}/api/health/live"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    log.info("Tally listening on http://%s:%d", host, port)
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)


def _hup_ignored(*_: object) -> None:
    log.warning(
        "SIGHUP ignored: the embedded engine allows one process, so workers are not respawned "
        "(restart with SIGTERM, then `tally serve`)"
    )


def _address(host: str) -> str:
    """``host`` as the IP address granian binds: an address as given, a name resolved."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except (OSError, UnicodeError) as exc:
        raise SystemExit(
            f"tally: --host {host!r} is neither an IP address nor a name this machine resolves "
            f"({exc}); use e.g. 127.0.0.1, 0.0.0.0 or ::"
        ) from None


def _usable_data_folder(settings: Settings) -> None:
    """Create the data folder (TALLY_DATA_DIR) if needed, or say in words why it cannot be.
    What this process and its children create from here on is theirs alone (umask 077): the
    embedded engine's files hold client IPs, User-Agents and owners' ids, and other users of the
    machine could read them with the default umask (the secrets were already 0600)."""
    os.umask(0o077)
    path = settings.data_path
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise SystemExit(f"tally: TALLY_DATA_DIR {path} is a file, not a folder") from None
    except OSError as exc:
        raise SystemExit(
            f"tally: cannot use TALLY_DATA_DIR {path} as the data folder: {exc.strerror}"
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise SystemExit(f"tally: TALLY_DATA_DIR {path} is not writable by this user")


def _hold_engine_folder(settings: Settings, allowed: int = 0) -> None:
    """The embedded engine allows one process per folder: lock it for this server (held until it
    exits; its migrate child and its worker open the engine under it), or refuse to start,
    naming the process that holds it, before anything opens the engine. A lock held by
    ``allowed`` (the PID of the ``tally serve`` whose child this is) is no refusal."""
    from .supervision import hold_lock

    engine = _usable_engine_folder(settings)
    # Next to the engine's folder (by default <data dir>/clickhouse.lock), not inside it.
    holder = hold_lock(engine.with_name(engine.name + ".lock"))
    if holder is None or (allowed and holder == allowed):
        # Ours. A Tally from before the lock file (or any other program using chDB) may have the
        # engine open all the same: the engine's own lock, on its status file, says so.
        other = _engine_holder(settings)
        if other is not None:
            raise SystemExit(_folder_in_use(settings, other))
        return
    raise SystemExit(_folder_in_use(settings, holder, tally=True))


def _usable_engine_folder(settings: Settings) -> Path:
    """The embedded engine's folder (TALLY_CLICKHOUSE_URL, by default <data dir>/clickhouse),
    created if needed, or one line saying why it cannot be: ``chdb:///`` was a traceback, and a
    file there a page of the engine's C++ stack."""
    try:
        engine = _engine_folder(settings)
    except ValueError as exc:
        raise SystemExit(f"tally: invalid TALLY_CLICKHOUSE_URL: {exc}") from None
    variable = "TALLY_CLICKHOUSE_URL" if settings.clickhouse_url else "TALLY_DATA_DIR"
    if engine.name in ("", ".", "..") or engine.resolve() == engine.resolve().parent:
        raise SystemExit(
            f"tally: {variable} {settings.storage_url} names no folder of its own (the root, or "
            "a path ending in ..); give the embedded engine one, e.g. "
            "chdb:///var/lib/tally/clickhouse"
        )
    for folder in (*reversed(engine.parents), engine):
        if folder.exists() and not folder.is_dir():
            raise SystemExit(
                f"tally: {variable} {settings.storage_url}: {folder} is a file, not a folder"
            )
    try:
        engine.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SystemExit(
            f"tally: cannot use {engine} ({variable} {settings.storage_url}) as the embedded "
            f"engine's folder: {exc.strerror}"
        ) from None
    return engine


def _engine_folder(settings: Settings) -> Path:
    from .storage.client import parse_url

    return Path(parse_url(settings.storage_url, settings.clickhouse_database).path)


def _engine_holder(settings: Settings) -> int | None:
    """The PID of a process that has the embedded engine of ``settings`` open (0 if it cannot be
    told), or None when none has. The engine holds an exclusive ``flock`` on ``status`` in its
    folder while it is open, and writes ``PID: N`` in it."""
    import fcntl

    status = _engine_folder(settings) / "status"
    try:
        fd = os.open(status, os.O_RDONLY)
    except OSError:
        return None  # never opened, or not readable: the engine itself will say
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(fd, 4096).decode(errors="replace")
        else:
            return None  # free (the lock goes with the descriptor, closed below)
    finally:
        os.close(fd)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "PID" and value.strip().isdigit():
            pid = int(value)
            return pid if Path(f"/proc/{pid}").exists() or not Path("/proc").is_dir() else 0
    return 0


def _folder_in_use(settings: Settings, holder: int, tally: bool = False) -> str:
    """The refusal for a folder whose engine another process has (``tally``: a current Tally,
    known by its lock file)."""
    engine = _engine_folder(settings)
    process = f"PID {holder}" if holder else "its PID unknown"
    if engine.is_relative_to(settings.data_path):
        folder, other = f"the data folder {settings.data_path}", "TALLY_DATA_DIR"
    else:
        folder, other = f"the embedded ClickHouse folder {engine}", "TALLY_CLICKHOUSE_URL"
    if tally:
        who = f"another Tally process ({process})"
    else:
        who = (
            f"another process ({process}; perhaps an older Tally, which holds no "
            f"{engine.name}.lock)"
        )
    return (
        f"tally: {folder} is in use by {who}; the embedded ClickHouse engine allows one process "
        f"per folder. Stop that server first, or give this one another {other}."
    )


def _tally() -> str:
    """How to run this same Tally from a shell: ``tally`` if that is what PATH finds, else this
    interpreter with ``-m tally``."""
    found = shutil.which("tally")
    here = Path(sys.executable).parent / "tally"
    if found and Path(found).resolve() == here.resolve():
        return "tally"
    return f"{shlex.quote(sys.executable)} -m tally"


def token_command(settings: Settings, sub: str = "USER") -> str:
    """The `tally token` command that signs with this server's dev secret, from any directory,
    a token this server accepts: with its issuer, audience and algorithms when they are set
    (a .env file of the server's folder is not read elsewhere)."""
    env = {"TALLY_DATA_DIR": str(settings.data_path)}
    for name in ("jwt_issuer", "jwt_audience", "jwt_algorithms"):
        if getattr(settings, name):
            env[f"TALLY_{name.upper()}"] = getattr(settings, name)
    assigned = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"{assigned} {_tally()} token --sub {sub}"


@main.command()
@click.option("--sub", required=True, help="User id (the token's sub claim).")
@click.option(
    "--ttl",
    default=86400,
    show_default=True,
    type=click.IntRange(min=1),
    help="Lifetime in seconds.",
)
def token(sub: str, ttl: int) -> None:
    """Print a signed session token (shared-secret or dev mode only)."""
    from .http.auth import issue_token

    if not sub.strip():
        raise SystemExit("tally: --sub must name a user (the token's sub claim), not be empty")
    settings = load_settings()
    if settings.jwks_url:
        raise SystemExit("tally: sessions come from your identity provider (TALLY_JWKS_URL is set)")
    # The server accepts only TALLY_JWT_ALGORITHMS: sign with the first HS one of them.
    algorithm = next((a for a in settings.algorithms if a.startswith("HS")), None)
    if algorithm is None:
        raise SystemExit(
            "tally: TALLY_JWT_ALGORITHMS lists no HS256, HS384 or HS512, so the server accepts "
            f"no token signed with a shared secret ({settings.jwt_algorithms!r})"
        )
    try:
        # Never created here: a secret made by `tally token` would sign tokens no server accepts.
        secret = settings.jwt_secret or dev_secret(settings, create=False)
    except FileNotFoundError:
        raise SystemExit(
            f"tally: no dev-mode secret in {settings.data_path} (no {DEV_SECRET_FILE} there, "
            "and TALLY_JWT_SECRET is not set). `tally serve` creates it in its data folder when "
            "it starts. Run `tally token` with the server's folder, e.g. "
            f"TALLY_DATA_DIR=/path/to/.tally {_tally()} token --sub {shlex.quote(sub)} (the "
            "server's log prints the exact command), or set the TALLY_JWT_SECRET the server uses."
        ) from None
    claims = {}
    if settings.jwt_issuer:
        claims["iss"] = settings.jwt_issuer
    if settings.jwt_audience:
        claims["aud"] = settings.jwt_audience
    click.echo(issue_token(secret, sub, ttl, algorithm=algorithm, **claims))


if __name__ == "__main__":
    main()
