"""Settings: environment variables prefixed ``TALLY_``, optionally completed by a ``.env`` file.

Nothing here runs at import time; :func:`load_settings` is called by the CLI and by tests, which
build their own :class:`Settings` directly.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import secrets
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
from dotenv import dotenv_values
from jwt.algorithms import get_default_algorithms

ENV_PREFIX = "TALLY_"
# Cluster names reach DDL as bare identifiers (ON CLUSTER name), so they are checked.
CLUSTER_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
DEV_SECRET_FILE = "dev-jwt-secret"


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    """Every knob Tally has. Field ``foo_bar`` is read from ``TALLY_FOO_BAR``."""

    # Storage. ``chdb:///abs/path`` (embedded engine) or ``http(s)://user:pw@host:port/db``.
    # Empty means embedded storage under ``<data_dir>/clickhouse``.
    clickhouse_url: str = ""
    # Database used when the URL does not name one (embedded URLs may add ``?database=``).
    clickhouse_database: str = "tally"
    # Name of a ClickHouse cluster (its ``remote_servers`` entry): the schema is created
    # ``ON CLUSTER`` as replicated local tables behind Distributed ones. Needs a server URL.
    clickhouse_cluster: str = ""
    # Days of events and rollups to keep (a ClickHouse TTL applied by migrate); 0 keeps all.
    retention_days: int = 0
    # Clients in the pool: half answer reports (dashboards, breakdowns, the query API), each
    # query on a client of its own; the others the short statements and the loader.
    clickhouse_pool_size: int = 12
    # Memory one report query (dashboard, breakdown, query API) may use, in MiB; 0: a quarter of
    # the engine's max_server_memory_usage. A report over it is answered 400, alone.
    report_memory_mb: int = 0
    # Working folder for the embedded engine and the dev-mode secret.
    data_dir: str = ".tally"

    # Sessions (JWT from the identity provider).
    jwt_secret: str = ""
    jwks_url: str = ""
    jwt_issuer: str = ""
    jwt_audience: str = ""
    jwt_algorithms: str = ""  # comma-separated; default HS256 with a secret, RS256,ES256 with JWKS
    jwks_cache_seconds: float = 300.0
    jwks_refetch_cooldown_seconds: float = 30.0

    # Ingestion: collect acknowledges once events are fsynced to a log under
    # ``<data_dir>/log`` (storage/ingestlog.py); a loader stores each sealed segment of it with
    # one INSERT (storage/loader.py). A segment is sealed this many ms after its first event...
    log_seal_age_ms: float = 1000.0
    # ...or once it holds this many MiB, whichever comes first.
    log_segment_mb: float = 64.0
    # Disk the log may use while ClickHouse does not take it (an outage): beyond it collect
    # answers 503. 4 GiB: about 2.8 hours of 1,000 events/s at the ~420 bytes a typical pageview
    # takes in the log (measured: Chrome User-Agent, URL, referrer, session and visitor ids).
    log_cap_mb: float = 4096.0
    # The loader retries a failed INSERT after this many ms, doubling up to the maximum.
    load_retry_min_ms: float = 100.0
    load_retry_max_ms: float = 5000.0

    # API-key registry refresh (bounds how long a revocation takes to reach other processes).
    key_refresh_seconds: float = 2.0
    last_used_flush_seconds: float = 5.0

    # Rate limits, in the notation of the ``limits`` package ("N/second", "N/minute", ...);
    # an empty string disables one. Generous by default: they stop abuse, not traffic.
    collect_limit_per_key: str = "10000/second"
    collect_limit_per_ip: str = "10000/second"
    session_limit_per_user: str = "100/second"

    # Largest collect body in bytes (413 beyond it, refused before it is read whole). The
    # default, 7 MiB, admits the largest valid collect batch (6,737,612 bytes: 100 events at
    # every field's maximum, metadata included); 0 turns collect's cap off. Every other endpoint
    # keeps a cap of 64 KiB, or this one when it is lower.
    max_body_bytes: int = 7 * 1024 * 1024

    # Exports (GET /api/export) per user, on top of the session limit: each one reads raw events.
    export_limit_per_user: str = "30/minute"

    # Slow clients: seconds to send the headers (granian) and then the whole body (408 after).
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 10.0

    # How long a stopping worker may take to finish requests and load its log (what is not
    # loaded by then stays on disk and is loaded at the next start).
    shutdown_timeout_seconds: int = 30

    # "store" keeps each event's client IP; "hash" keeps an HMAC-SHA-256 of it instead, its key
    # rotating daily (derived from ip_hash_secret, or a random secret kept in the data folder).
    ip_privacy: str = "store"
    ip_hash_secret: str = ""
    # A MaxMind-format (.mmdb) IP-to-country database to use instead of the DB-IP country lite
    # file that ships with Tally (e.g. GeoLite2-Country or a commercial database).
    geoip_db: str = ""

    log_level: str = "INFO"

    # Benchmark-only: acknowledge events without storing them, to measure the HTTP stack's
    # ceiling. Never set this in production.
    bench_noop_storage: bool = False
    # Fault tests only: a file whose presence makes the loader's INSERTs fail ("fail") or lose
    # their answer after succeeding ("lose"). Never set this in production.
    fault_file: str = ""
    # Fault tests only: a named point of the ingest path (mid_append, after_fsync, before_load,
    # during_insert, after_insert) where the worker writes ``<data_dir>/fault-paused`` and
    # stops forever, for a test to kill it there; or "migrate", where `tally serve`'s migrate
    # step does, with the engine open. Never set this in production.
    fault_pause_at: str = ""

    # --- derived helpers -------------------------------------------------------------------
    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser().resolve()

    @property
    def log_path(self) -> Path:
        """Where the ingest log's slots live (storage/ingestlog.py)."""
        return self.data_path / "log"

    @property
    def storage_url(self) -> str:
        """The ClickHouse URL with the embedded default filled in."""
        if self.clickhouse_url:
            return self.clickhouse_url
        return f"chdb://{self.data_path / 'clickhouse'}"

    @property
    def embedded(self) -> bool:
        return urlsplit(self.storage_url).scheme == "chdb"  # a scheme in any case: CHDB:///x

    @property
    def dev_mode(self) -> bool:
        """No identity provider configured: sessions are signed with a local random secret."""
        return not self.jwt_secret and not self.jwks_url

    @property
    def algorithms(self) -> list[str]:
        if self.jwt_algorithms:
            return [a.strip() for a in self.jwt_algorithms.split(",") if a.strip()]
        return ["RS256", "ES256"] if self.jwks_url else ["HS256"]


def _tally_variables(
    environ: dict[str, str] | None, env_file: str | Path | None
) -> dict[str, str | None]:
    """Every ``TALLY_*`` variable of ``.env`` and the environment (the environment wins)."""
    values: dict[str, str | None] = {}
    if env_file is not None and Path(env_file).is_file():
        values.update(
            {k: v for k, v in dotenv_values(env_file).items() if k.startswith(ENV_PREFIX)}
        )
    env = os.environ if environ is None else environ
    values.update({k: v for k, v in env.items() if k.startswith(ENV_PREFIX)})
    return values


def _read_env(environ: dict[str, str] | None, env_file: str | Path | None) -> dict[str, Any]:
    fields = set(Settings.__struct_fields__)
    out: dict[str, Any] = {}
    for key, value in _tally_variables(environ, env_file).items():
        name = key[len(ENV_PREFIX) :].lower()
        if name in fields and value is not None:
            out[name] = value
    return out


# TALLY_* names that are not settings of the server: the Compose files' port, the test suite's
# server, the benchmark's wrk script.
NOT_SETTINGS = frozenset(
    {"HTTP_PORT", "TEST_CLICKHOUSE_URL", "TEST_CLICKHOUSE_CLUSTER", "KEY", "EVENTS"}
)


def unknown_names(
    environ: dict[str, str] | None = None, env_file: str | Path | None = ".env"
) -> list[str]:
    """One line per ``TALLY_*`` variable that names no setting (a misspelt name is otherwise
    ignored without a word: ``TALLY_KEY_REFRESH_SECOND`` left revoked keys usable on other
    workers for the default time), with the setting it most resembles."""
    fields = [f.upper() for f in Settings.__struct_fields__]
    lines = []
    for key in sorted(_tally_variables(environ, env_file)):
        name = key[len(ENV_PREFIX) :]
        if name.lower() in Settings.__struct_fields__ or name in NOT_SETTINGS:
            continue
        close = difflib.get_close_matches(name, fields, n=1, cutoff=0.75)
        hint = f" (did you mean {ENV_PREFIX}{close[0]}?)" if close else ""
        lines.append(f"{key} is not a setting of Tally and is ignored{hint}")
    return lines


def load_settings(
    environ: dict[str, str] | None = None, env_file: str | Path | None = ".env", **overrides: Any
) -> Settings:
    """Build settings from ``TALLY_*`` variables (environment wins over ``.env``) and overrides."""
    raw = _read_env(environ, env_file)
    raw.update({k: v for k, v in overrides.items() if v is not None})
    if isinstance(raw.get("data_dir"), str) and not raw["data_dir"].strip():
        # Set but empty (a Compose file's ${TALLY_DATA_DIR:-}): the default, not the working
        # directory that Path("") would resolve to.
        del raw["data_dir"]
    try:
        settings = msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SystemExit(f"tally: invalid configuration: {_named(str(exc), raw)}") from None
    problems = check(settings)
    if problems:
        raise SystemExit("tally: invalid configuration: " + problems[0])
    if settings.clickhouse_cluster and settings.embedded:
        raise SystemExit(
            "tally: invalid configuration: TALLY_CLICKHOUSE_CLUSTER needs a ClickHouse server; "
            "the embedded engine (chdb://, the default TALLY_CLICKHOUSE_URL) has no cluster. "
            "Point TALLY_CLICKHOUSE_URL at a node of the cluster (http(s)://user:pw@host:port/db)."
        )
    if settings.geoip_db and not Path(settings.geoip_db).expanduser().is_file():
        raise SystemExit(
            "tally: invalid configuration: TALLY_GEOIP_DB must name a MaxMind-format (.mmdb) "
            f"file; {settings.geoip_db!r} is not a file"
        )
    # Resolve the data folder now, so that workers started elsewhere agree on it.
    return msgspec.structs.replace(settings, data_dir=str(settings.data_path))


_TYPES = {"int": "a whole number", "float": "a number", "bool": "true or false", "str": "text"}
_AT_FIELD = re.compile(r"^Expected `(\w+)`, got `(\w+)` - at `\$\.(\w+)`$")


def _named(message: str, raw: dict[str, Any]) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.clickhouse_pool_size`" in the words of the
    variable that was set: "TALLY_CLICKHOUSE_POOL_SIZE must be a whole number, got 'ten'"."""
    found = _AT_FIELD.match(message)
    if not found:
        return message
    want, field = found.group(1), found.group(3)
    return f"{ENV_PREFIX}{field.upper()} must be {_TYPES.get(want, want)}, got {raw.get(field)!r}"


# What a setting must be, beyond its type (check below).
_POSITIVE = (
    "clickhouse_pool_size",
    "log_seal_age_ms",
    "log_segment_mb",
    "log_cap_mb",
    "load_retry_min_ms",
    "load_retry_max_ms",
    "key_refresh_seconds",
    "last_used_flush_seconds",
    "header_timeout_seconds",
    "body_timeout_seconds",
    # 0 would be no timeout at all to granian: a stop that waits forever
    "shutdown_timeout_seconds",
)
_NOT_NEGATIVE = (
    "retention_days",
    "report_memory_mb",
    "max_body_bytes",
    "jwks_cache_seconds",
    "jwks_refetch_cooldown_seconds",
)
# Seconds a timeout may be at most: a day (the HTTP server counts them in 64-bit milliseconds).
_TIMEOUTS = ("header_timeout_seconds", "body_timeout_seconds", "shutdown_timeout_seconds")
MAX_TIMEOUT_SECONDS = 86_400
# Days of retention at most: about 27 years. The TTL is a DateTime (seconds since 1970, 32 bits,
# up to 2106-02-07): from 28,926 days on, today's events expired in 1990 and a merge deleted
# every one of them. 0 keeps events forever.
MAX_RETENTION_DAYS = 10_000
# Clients in a pool at most: each is a connection (or an engine session); a huge value had the
# worker create clients without end, its memory growing, never answering.
MAX_POOL_SIZE = 256
# A shared secret shorter than this many bytes is refused: RFC 7518 3.2 wants an HS256 key of at
# least 256 bits, and a short one can be guessed offline from any token.
MIN_JWT_SECRET_BYTES = 32
MIN_IP_HASH_SECRET_BYTES = 32  # an HMAC-SHA-256 key of 256 bits
# The placeholders of deploy/'s examples (deploy/k8s/secret.example.yaml): public, so anyone
# could sign a token with them.
PLACEHOLDER_SECRETS = frozenset({"change-me", "changeme"})
# "1/0 second": a rate whose period is 0 ("limits" reads it as 1/second, not what was written).
_ZERO_PERIOD = re.compile(r"(/|\bper\b)\s*0+\s*[a-z]", re.IGNORECASE)
_RATE_LIMITS = (
    "collect_limit_per_key",
    "collect_limit_per_ip",
    "session_limit_per_user",
    "export_limit_per_user",
)
IP_PRIVACY = ("store", "hash")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# Signing algorithms: the ones PyJWT verifies, "none" never.
JWT_ALGORITHMS = frozenset(get_default_algorithms()) - {"none"}
# Database names reach DDL as bare identifiers, as cluster names do.
DATABASE_NAME = CLUSTER_NAME


def check(settings: Settings) -> list[str]:
    """What is wrong with ``settings``, each in plain words naming its variable; [] if
    nothing. A value that would start a server quietly doing something else than asked (a
    misspelt ``hash`` storing raw IPs, a log cap of 0 refusing every event) is refused here."""
    from limits import parse

    def name(field: str) -> str:
        return ENV_PREFIX + field.upper()

    problems = [
        f"{name(f)} must be a finite number, got {value}"
        for f in Settings.__struct_fields__
        if isinstance(value := getattr(settings, f), float) and not math.isfinite(value)
    ]
    if problems:
        return problems
    problems += [
        f"{name(f)} must be more than 0, got {getattr(settings, f)}"
        for f in _POSITIVE
        if getattr(settings, f) <= 0
    ]
    problems += [
        f"{name(f)} must be at most {MAX_TIMEOUT_SECONDS} (a day), got {getattr(settings, f)}"
        for f in _TIMEOUTS
        if getattr(settings, f) > MAX_TIMEOUT_SECONDS
    ]
    problems += [
        f"{name(f)} must be 0 or more, got {getattr(settings, f)}"
        for f in _NOT_NEGATIVE
        if getattr(settings, f) < 0
    ]
    if settings.retention_days > MAX_RETENTION_DAYS:
        problems.append(
            f"TALLY_RETENTION_DAYS must be at most {MAX_RETENTION_DAYS} (about 27 years; 0 keeps "
            f"events forever), got {settings.retention_days}"
        )
    if settings.clickhouse_pool_size > MAX_POOL_SIZE:
        problems.append(
            f"TALLY_CLICKHOUSE_POOL_SIZE must be at most {MAX_POOL_SIZE}, got "
            f"{settings.clickhouse_pool_size}"
        )
    if settings.load_retry_max_ms < settings.load_retry_min_ms:
        problems.append(
            f"TALLY_LOAD_RETRY_MAX_MS ({settings.load_retry_max_ms}) must be at least "
            f"TALLY_LOAD_RETRY_MIN_MS ({settings.load_retry_min_ms})"
        )
    if settings.ip_privacy not in ("", *IP_PRIVACY):
        problems.append(
            f"TALLY_IP_PRIVACY must be 'store' (keep each event's client IP) or 'hash' (keep a "
            f"salted hash of it instead), got {settings.ip_privacy!r}"
        )
    if settings.log_level.upper() not in LOG_LEVELS:
        problems.append(
            f"TALLY_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {settings.log_level!r}"
        )
    for field in _RATE_LIMITS:
        value = getattr(settings, field)
        try:
            if value.strip() and _ZERO_PERIOD.search(value):
                problems.append(
                    f"{name(field)} must be a rate over a period of more than 0 (such as "
                    f"'100/second' or '5/2 minutes'; empty for no limit), got {value!r}"
                )
            elif value.strip() and parse(value).amount < 1:
                problems.append(
                    f"{name(field)} must allow at least 1 request (empty for no limit), got "
                    f"{value!r}, which would refuse every request"
                )
        except ValueError:
            problems.append(
                f"{name(field)} must be a rate such as '100/second' or '30/minute' (empty for "
                f"no limit), got {value!r}"
            )
    unknown = [a for a in settings.algorithms if a not in JWT_ALGORITHMS]
    if unknown or not settings.algorithms:
        problems.append(
            "TALLY_JWT_ALGORITHMS must list signing algorithms separated by commas, among "
            f"{', '.join(sorted(JWT_ALGORITHMS))}; got {settings.jwt_algorithms!r}"
        )
    if settings.jwt_secret and settings.jwks_url:
        problems.append(
            "TALLY_JWT_SECRET and TALLY_JWKS_URL are both set: sessions come from one of them "
            "(the secret would be ignored); unset one"
        )
    elif settings.jwt_secret.strip().lower() in PLACEHOLDER_SECRETS:
        problems.append(
            f"TALLY_JWT_SECRET is the placeholder {settings.jwt_secret!r} of deploy/'s examples, "
            "with which anyone can sign a session token: set a random one (openssl rand -hex 32)"
        )
    elif settings.jwt_secret and len(settings.jwt_secret.encode()) < MIN_JWT_SECRET_BYTES:
        problems.append(
            f"TALLY_JWT_SECRET must be at least {MIN_JWT_SECRET_BYTES} bytes (an HS256 key of "
            f"256 bits, RFC 7518), got {len(settings.jwt_secret.encode())}: set a random one "
            "(openssl rand -hex 32)"
        )
    if settings.ip_hash_secret.strip().lower() in PLACEHOLDER_SECRETS:
        problems.append(
            f"TALLY_IP_HASH_SECRET is the placeholder {settings.ip_hash_secret!r} of deploy/'s "
            "examples, known to anyone who would reverse the hashes: set a random one (openssl "
            "rand -hex 32), or leave it empty for a random one kept in the data folder"
        )
    elif (
        settings.ip_hash_secret
        and (size := len(settings.ip_hash_secret.strip().encode())) < MIN_IP_HASH_SECRET_BYTES
    ):
        problems.append(
            f"TALLY_IP_HASH_SECRET must be at least {MIN_IP_HASH_SECRET_BYTES} bytes (the key of "
            "HMAC-SHA-256; a short one is guessed, and with it every hash reversed over the 2^32 "
            f"IPv4 addresses), got {size}: set a random one (openssl rand -hex 32), or leave it "
            "empty for a random one kept in the data folder"
        )
    if (
        settings.jwt_secret
        and not settings.jwks_url
        and not any(a.startswith("HS") for a in settings.algorithms)
    ):
        problems.append(
            "TALLY_JWT_SECRET verifies HS256, HS384 or HS512 tokens, and TALLY_JWT_ALGORITHMS "
            f"({settings.jwt_algorithms!r}) lists none of them: no token would be accepted"
        )
    scheme = urlsplit(settings.clickhouse_url).scheme
    if settings.clickhouse_url and scheme not in ("chdb", "http", "https"):
        problems.append(
            "TALLY_CLICKHOUSE_URL must be chdb:///absolute/path (embedded) or "
            f"http(s)://user:password@host:port/database, got scheme {scheme!r}"
        )
    if settings.jwks_url and urlsplit(settings.jwks_url).scheme not in ("http", "https"):
        problems.append(f"TALLY_JWKS_URL must be an http(s):// URL, got {settings.jwks_url!r}")
    if not DATABASE_NAME.match(settings.clickhouse_database):
        problems.append(
            "TALLY_CLICKHOUSE_DATABASE must be a plain identifier (letters, digits, underscore), "
            f"got {settings.clickhouse_database!r}"
        )
    if settings.clickhouse_cluster and not CLUSTER_NAME.match(settings.clickhouse_cluster):
        problems.append(
            "TALLY_CLICKHOUSE_CLUSTER must be a plain identifier (letters, digits, underscore), "
            f"got {settings.clickhouse_cluster!r}"
        )
    return problems


def settings_to_env(settings: Settings) -> dict[str, str]:
    """The environment that reproduces ``settings`` in another process (granian workers)."""
    env: dict[str, str] = {}
    for name in Settings.__struct_fields__:
        value = getattr(settings, name)
        env[ENV_PREFIX + name.upper()] = str(value)
    return env


def dev_secret(settings: Settings, create: bool = True, name: str = DEV_SECRET_FILE) -> str:
    """A random secret kept in the data folder (``name``), created on first use.

    Created whole or not at all: written to a file of its own, synced, then linked to its name
    (which fails if another process linked first; that one is read). Opened by name and written
    after, a racing process read it empty (7 rounds in 150 of 8 processes at once) and hashed
    IPs, or signed sessions, with an empty key. An empty file (from a release before, cut off by
    a crash) is refused, not used."""
    path = settings.data_path / name
    if not path.is_file():
        if not create:
            raise FileNotFoundError(path)
        _create_secret(path)
    secret = path.read_text().strip()
    if not secret:
        raise SystemExit(
            f"tally: the secret file {path} is empty (a write cut off by a crash?); delete it "
            "and start again, and a new random secret is made"
        )
    return secret


def _create_secret(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, draft = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(48))
            fh.flush()
            os.fsync(fh.fileno())
        with suppress(FileExistsError):  # another process's came first: that one holds
            os.link(draft, path)
    finally:
        os.unlink(draft)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
