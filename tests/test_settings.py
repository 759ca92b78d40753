"""Settings that would start a server quietly doing something other than asked are refused at
start, in one line naming the variable (config.check)."""

from __future__ import annotations

import pytest

from tally.config import load_settings

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
}


@pytest.mark.parametrize("environ", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_settings_in_range_are_taken(environ):
    load_settings(environ=environ, env_file=None)
