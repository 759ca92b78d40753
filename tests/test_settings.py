"""Settings that would start a server quietly doing something other than asked are refused at
start, in one line naming the variable (config.check)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from tally.config import Settings, dev_secret, load_settings

REFUSED = {
    # A misspelt "hash" stored every client IP in clear.
    "IP privacy HASH": ({"TALLY_IP_PRIVACY": "HASH"}, "TALLY_IP_PRIVACY must be 'store'"),
    "IP privacy hashed": ({"TALLY_IP_PRIVACY": "hashed"}, "got 'hashed'"),
    # A log cap of 0 answered every collect 503 while health said ok.
    "log cap 0": ({"TALLY_LOG_CAP_MB": "0"}, "TALLY_LOG_CAP_MB must be more than 0"),
    "log cap negative": ({"TALLY_LOG_CAP_MB": "-5"}, "TALLY_LOG_CAP_MB must be more than 0"),
    "seal age 0": ({"TALLY_LOG_SEAL_AGE_MS": "0"}, "TALLY_LOG_SEAL_AGE_MS must be more than 0"),
    "pool of 0": ({"TALLY_CLICKHOUSE_POOL_SIZE": "0"}, "TALLY_CLICKHOUSE_POOL_SIZE must be more"),
    "retention negative": (
        {"TALLY_RETENTION_DAYS": "-5"},
        "TALLY_RETENTION_DAYS must be 0 or more",
    ),
    "retries backwards": (
        {"TALLY_LOAD_RETRY_MIN_MS": "500", "TALLY_LOAD_RETRY_MAX_MS": "100"},
        "TALLY_LOAD_RETRY_MAX_MS (100.0) must be at least TALLY_LOAD_RETRY_MIN_MS (500.0)",
    ),
    "log level": ({"TALLY_LOG_LEVEL": "LOUD"}, "TALLY_LOG_LEVEL must be one of"),
    "rate limit": (
        {"TALLY_COLLECT_LIMIT_PER_KEY": "garbage"},
        "TALLY_COLLECT_LIMIT_PER_KEY must be a rate such as '100/second'",
    ),
    # "none" was never accepted, so every session was refused, with nothing logged.
    "JWT algorithm none": ({"TALLY_JWT_ALGORITHMS": "none"}, "TALLY_JWT_ALGORITHMS must list"),
    "JWT algorithms empty": ({"TALLY_JWT_ALGORITHMS": " , "}, "TALLY_JWT_ALGORITHMS must list"),
    "database name": (
        {"TALLY_CLICKHOUSE_DATABASE": "bad-name"},
        "TALLY_CLICKHOUSE_DATABASE must be a plain identifier",
    ),
    "database name with a newline": (
        {"TALLY_CLICKHOUSE_DATABASE": "tally\n"},
        "TALLY_CLICKHOUSE_DATABASE must be a plain identifier",
    ),
    # msgspec said "at `$.clickhouse_pool_size`": the variable is what was set.
    "not a number": (
        {"TALLY_CLICKHOUSE_POOL_SIZE": "ten"},
        "TALLY_CLICKHOUSE_POOL_SIZE must be a whole number, got 'ten'",
    ),
    "not a boolean": ({"TALLY_BENCH_NOOP_STORAGE": "maybe"}, "must be true or false"),
    # inf passed "more than 0", then every worker crashed on it (an OverflowError, a crash loop)
    "log cap inf": ({"TALLY_LOG_CAP_MB": "inf"}, "TALLY_LOG_CAP_MB must be a finite number"),
    "timeout nan": ({"TALLY_BODY_TIMEOUT_SECONDS": "nan"}, "must be a finite number"),
    "timeout 1e300": (
        {"TALLY_HEADER_TIMEOUT_SECONDS": "1e300"},
        "TALLY_HEADER_TIMEOUT_SECONDS must be at most 86400 (a day)",
    ),
    # 0 is "no timeout" to granian: SIGTERM waited forever for a worker that did not stop
    "shutdown timeout 0": (
        {"TALLY_SHUTDOWN_TIMEOUT_SECONDS": "0"},
        "TALLY_SHUTDOWN_TIMEOUT_SECONDS must be more than 0",
    ),
    # started, then answered every collect 429
    "rate of 0": (
        {"TALLY_COLLECT_LIMIT_PER_IP": "0/second"},
        "TALLY_COLLECT_LIMIT_PER_IP must allow at least 1 request",
    ),
    # started, accepted no token, while `tally token` printed HS256 ones
    "secret without an HS algorithm": (
        {"TALLY_JWT_SECRET": "s" * 32, "TALLY_JWT_ALGORITHMS": "RS256"},
        "TALLY_JWT_SECRET verifies HS256, HS384 or HS512 tokens",
    ),
    # each worker crashed on these, granian stopped the server with pages of tracebacks
    "ClickHouse URL scheme": (
        {"TALLY_CLICKHOUSE_URL": "postgres://x/y"},
        "TALLY_CLICKHOUSE_URL must be chdb:///absolute/path (embedded) or http(s)://",
    ),
    "JWKS URL": ({"TALLY_JWKS_URL": "notaurl"}, "TALLY_JWKS_URL must be an http(s):// URL"),
    # from 28,926 days the TTL wrapped past 2106 to 1990: every event deleted by the next merge
    "retention of 100 years": (
        {"TALLY_RETENTION_DAYS": "36500"},
        "TALLY_RETENTION_DAYS must be at most 10000 (about 27 years; 0 keeps events forever)",
    ),
    "retention past the bound": ({"TALLY_RETENTION_DAYS": "10001"}, "got 10001"),
    # the worker created clients without end, growing, never answering
    "huge pool": (
        {"TALLY_CLICKHOUSE_POOL_SIZE": "99999999999999999999999"},
        "TALLY_CLICKHOUSE_POOL_SIZE must be at most 256",
    ),
    "pool past the bound": ({"TALLY_CLICKHOUSE_POOL_SIZE": "257"}, "got 257"),
    # anyone could sign a session token with these
    "secret placeholder": (
        {"TALLY_JWT_SECRET": "CHANGE-ME"},
        "TALLY_JWT_SECRET is the placeholder 'CHANGE-ME' of deploy/'s examples",
    ),
    "ip hash secret placeholder": (
        {"TALLY_IP_HASH_SECRET": "CHANGE-ME"},
        "TALLY_IP_HASH_SECRET is the placeholder 'CHANGE-ME' of deploy/'s examples",
    ),
    # a short key is guessed, and with it every hash reversed
    "ip hash secret of 1 byte": (
        {"TALLY_IP_HASH_SECRET": "a"},
        "TALLY_IP_HASH_SECRET must be at least 32 bytes",
    ),
    "ip hash secret of spaces": ({"TALLY_IP_HASH_SECRET": "   "}, "got 0"),
    "ip hash secret of 31 bytes": ({"TALLY_IP_HASH_SECRET": "k" * 31}, "got 31"),
    "secret of 3 bytes": (
        {"TALLY_JWT_SECRET": "abc"},
        "TALLY_JWT_SECRET must be at least 32 bytes",
    ),
    "secret of 31 bytes": ({"TALLY_JWT_SECRET": "s" * 31}, "got 31"),
    # the secret was ignored, silently
    "secret and JWKS": (
        {"TALLY_JWT_SECRET": "s" * 32, "TALLY_JWKS_URL": "https://id.example.com/jwks"},
        "TALLY_JWT_SECRET and TALLY_JWKS_URL are both set",
    ),
    # read as 1/second, not what was written
    "rate over a period of 0": (
        {"TALLY_COLLECT_LIMIT_PER_KEY": "1/0 second"},
        "TALLY_COLLECT_LIMIT_PER_KEY must be a rate over a period of more than 0",
    ),
    "rate per 0 minutes": ({"TALLY_EXPORT_LIMIT_PER_USER": "5 per 0 minutes"}, "period"),
}


@pytest.mark.parametrize(("environ", "said"), REFUSED.values(), ids=REFUSED.keys())
def test_a_setting_that_would_do_something_else_is_refused_in_words(environ, said):
    with pytest.raises(SystemExit) as refused:
        load_settings(environ=environ, env_file=None)
    message = str(refused.value)
    assert message.startswith("tally: invalid configuration: ") and said in message, message


ACCEPTED = {
    "defaults": {},
    # deploy/'s Compose files pass TALLY_IP_PRIVACY=${TALLY_IP_PRIVACY:-}: empty is "store".
    "IP privacy empty": {"TALLY_IP_PRIVACY": ""},
    "IP privacy hash": {"TALLY_IP_PRIVACY": "hash"},
    "lower-case log level": {"TALLY_LOG_LEVEL": "debug"},
    "rate limits off": {"TALLY_COLLECT_LIMIT_PER_KEY": "", "TALLY_EXPORT_LIMIT_PER_USER": ""},
    "several algorithms": {"TALLY_JWT_ALGORITHMS": "RS256, ES256"},
    "keep everything": {"TALLY_RETENTION_DAYS": "0", "TALLY_MAX_BODY_BYTES": "0"},
    "longest retention and largest pool": {
        "TALLY_RETENTION_DAYS": "10000",
        "TALLY_CLICKHOUSE_POOL_SIZE": "256",
    },
    "secret of 32 bytes": {"TALLY_JWT_SECRET": "s" * 32},
    "ip hash secret of 32 bytes": {"TALLY_IP_HASH_SECRET": "k" * 32},
    "rate over several periods": {"TALLY_COLLECT_LIMIT_PER_KEY": "10/2 seconds"},
}


@pytest.mark.parametrize("environ", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_settings_in_range_are_taken(environ):
    load_settings(environ=environ, env_file=None)


def test_the_embedded_engine_is_known_by_its_scheme_in_any_case(tmp_path):
    """``CHDB:///path`` opened the embedded engine but passed for a server: --workers 2 was
    taken, and the second worker crashed on the engine's lock."""
    for scheme in ("chdb", "CHDB", "Chdb"):
        url = f"{scheme}://{tmp_path}/engine"
        settings = load_settings(environ={"TALLY_CLICKHOUSE_URL": url}, env_file=None)
        assert settings.embedded, url
    server = load_settings(environ={"TALLY_CLICKHOUSE_URL": "http://ch:8123/x"}, env_file=None)
    assert not server.embedded


def test_an_empty_data_dir_is_the_default(tmp_path, monkeypatch):
    """TALLY_DATA_DIR set but empty (a Compose file's ${TALLY_DATA_DIR:-}) put the engine, the
    secrets and the ingest log in the working directory itself; it is the default ./.tally."""
    monkeypatch.chdir(tmp_path)
    for empty in ("", "  "):
        settings = load_settings(environ={"TALLY_DATA_DIR": empty}, env_file=None)
        assert settings.data_path == tmp_path.resolve() / ".tally", empty


def _race_for_secret(base: str, rounds: int, start: object, answers: object) -> None:
    for round_ in range(rounds):
        start.wait()  # type: ignore[attr-defined]  # all eight at once, each round
        secret = dev_secret(Settings(data_dir=f"{base}/round-{round_}"), name="ip-hash-secret")
        answers.put((round_, secret))  # type: ignore[attr-defined]


def test_processes_racing_to_make_a_secret_all_get_the_same_whole_one(tmp_path: Path) -> None:
    """Workers started at once each made the IP hash secret on first use: opened by name and
    written after, the file was read empty by some, which hashed IPs with an empty key, or
    differently from the others. Every process now gets the one secret, whole. Eight processes
    race in each of 60 new folders, released together by a barrier: against the old code 14 to
    29 rounds of 60 went wrong (3 runs), where a new set of processes per round found 7 in 150
    and took 36 s of the suite to do it."""
    fork = multiprocessing.get_context("fork")
    rounds = 60
    start, answers = fork.Barrier(8), fork.Queue()
    racers = [
        fork.Process(target=_race_for_secret, args=(str(tmp_path), rounds, start, answers))
        for _ in range(8)
    ]
    for racer in racers:
        racer.start()
    got: dict[int, set[str]] = {}
    for _ in range(8 * rounds):
        round_, secret = answers.get(timeout=60)
        got.setdefault(round_, set()).add(secret)
    for racer in racers:
        racer.join(60)
        assert racer.exitcode == 0
    assert sorted(got) == list(range(rounds))
    for round_, secrets in got.items():
        assert len(secrets) == 1 and len(next(iter(secrets))) >= 32, (round_, secrets)


def test_an_empty_secret_file_is_refused_not_used(tmp_path: Path) -> None:
    settings = Settings(data_dir=str(tmp_path))
    (tmp_path / "ip-hash-secret").write_text("")
    with pytest.raises(SystemExit) as refused:
        dev_secret(settings, name="ip-hash-secret")
    assert "ip-hash-secret is empty (a write cut off by a crash?); delete it" in str(refused.value)
