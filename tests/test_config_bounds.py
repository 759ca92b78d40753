"""Settings with no sane upper bound, storage URLs that name no usable folder, and the session
settings that `tally token` must follow: each refused in one line, or honoured, by the commands
as a user runs them (real processes on the real engine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import httpx
import jwt
import pytest

from served import free_port, wait_healthy
from tally.storage.migrate import retention_statements

TALLY = [sys.executable, "-m", "tally"]
# The longest retention taken, in days (about 27 years; config.MAX_RETENTION_DAYS).
MAX_RETENTION_DAYS = 10_000


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(extra)
    return env


def run(tmp_path, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """The command to its end. A `tally serve` meant to be refused that is still running after
    a minute was not (its workers die with it, tally.supervision)."""
    try:
        return subprocess.run(
            [*TALLY, *args],
            cwd=tmp_path,
            env=clean_env(**{"TALLY_DATA_DIR": str(tmp_path / "data"), **env}),
            capture_output=True,
            text=True,
            timeout=60 if args[0] == "serve" else 180,
        )
    except subprocess.TimeoutExpired as running:
        pytest.fail(f"`tally {' '.join(args)}` was not refused: {running.stderr!r}")


def refused_in_one_line(done: subprocess.CompletedProcess[str], said: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert said in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr  # no traceback, no page of the engine's C++ stack
    assert done.stdout == ""


# --- retention: a TTL past DateTime's end (2106) wrapped to 1990 and deleted every event -------


@pytest.mark.parametrize("command", ["serve", "migrate"])
@pytest.mark.parametrize("days", [MAX_RETENTION_DAYS + 1, 36500])
def test_a_retention_past_the_bound_is_refused_before_anything_is_touched(tmp_path, command, days):
    args = [command, "--port", str(free_port())] if command == "serve" else [command]
    done = run(tmp_path, args, TALLY_RETENTION_DAYS=str(days))
    refused_in_one_line(
        done,
        f"tally: invalid configuration: TALLY_RETENTION_DAYS must be at most {MAX_RETENTION_DAYS} "
        f"(about 27 years; 0 keeps events forever), got {days}",
    )
    assert not (tmp_path / "data").exists()  # nothing created, no engine opened


def test_migrate_never_builds_a_ttl_that_wraps():
    """Called directly (not through the settings), the TTL builder refuses too."""
    with pytest.raises(ValueError, match="0 keeps events forever"):
        retention_statements({}, 36500, "tally")
    assert retention_statements({}, MAX_RETENTION_DAYS, "tally")


SURVIVES = """
import sys, clickhouse_connect
c = clickhouse_connect.get_client(dsn=f"chdb://{sys.argv[1]}")
[(engine,)] = c.query(
    "SELECT engine_full FROM system.tables WHERE database = 'tally' AND name = 'events'"
).result_rows
ttl = engine.split(" TTL ", 1)[1].split(" SETTINGS ", 1)[0]
[(expires, now)] = c.query(
    f"SELECT {ttl}, now() FROM (SELECT now64(3, 'UTC') AS occurred_at)"
).result_rows
c.command("INSERT INTO tally.events (project_id, name, occurred_at, received_at) "
          "VALUES ('p', 'pageview', now64(3), now64(3))")
c.command("OPTIMIZE TABLE tally.events FINAL")  # what a background TTL merge does
[(kept,)] = c.query("SELECT count() FROM tally.events").result_rows
print(ttl, "|", expires.year, "|", expires > now, "|", kept)
"""


@pytest.mark.slow
def test_the_longest_retention_keeps_an_event_just_stored(tmp_path):
    engine = tmp_path / "ch"
    done = run(
        tmp_path,
        ["migrate"],
        TALLY_CLICKHOUSE_URL=f"chdb://{engine}",
        TALLY_RETENTION_DAYS=str(MAX_RETENTION_DAYS),
    )
    assert done.returncode == 0, done.stderr
    assert f"TTL of {MAX_RETENTION_DAYS} days set" in done.stdout
    probe = subprocess.run(
        [sys.executable, "-c", SURVIVES, str(engine)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert probe.returncode == 0, probe.stderr
    ttl, year, future, kept = (part.strip() for part in probe.stdout.split("|"))
    assert ttl.endswith(f"toIntervalDay({MAX_RETENTION_DAYS + 1})"), ttl
    assert future == "True" and int(year) > 2050, probe.stdout
    assert kept == "1", probe.stdout


# --- pool size: a huge one had the worker create clients without end ---------------------------


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_a_huge_pool_is_refused(tmp_path, command):
    args = [command, "--port", str(free_port())] if command == "serve" else [command]
    done = run(tmp_path, args, TALLY_CLICKHOUSE_POOL_SIZE="99999999999999999999999")
    refused_in_one_line(
        done,
        "tally: invalid configuration: TALLY_CLICKHOUSE_POOL_SIZE must be at most 256, "
        "got 99999999999999999999999",
    )


# --- embedded URLs that name no usable folder: tracebacks and C++ stacks before ---------------

BAD_ENGINE_FOLDERS = {
    "the root": ("chdb:///", "TALLY_CLICKHOUSE_URL chdb:/// names no folder of its own"),
    "under a file": (
        "chdb:///etc/hostname/clickhouse",
        "TALLY_CLICKHOUSE_URL chdb:///etc/hostname/clickhouse: /etc/hostname is a file, "
        "not a folder",
    ),
    "a file": (
        "chdb:///etc/hostname",
        "TALLY_CLICKHOUSE_URL chdb:///etc/hostname: /etc/hostname is a file, not a folder",
    ),
}


@pytest.mark.parametrize("command", ["serve", "migrate"])
@pytest.mark.parametrize(("url", "said"), BAD_ENGINE_FOLDERS.values(), ids=BAD_ENGINE_FOLDERS)
def test_an_embedded_url_that_names_no_usable_folder_is_one_line(tmp_path, command, url, said):
    args = [command, "--port", str(free_port())] if command == "serve" else [command]
    done = run(tmp_path, args, TALLY_CLICKHOUSE_URL=url)
    refused_in_one_line(done, "tally: " + said)


# --- serve --no-migrate on an embedded folder with no schema ------------------------------------


def test_serve_without_migrate_on_an_empty_embedded_folder_is_refused(tmp_path):
    """It started, said ok on /api/health and answered 503 to every call, while `tally migrate`
    could not run beside it (the engine allows one process)."""
    done = run(tmp_path, ["serve", "--no-migrate", "--port", str(free_port())])
    assert done.returncode == 1, done.stderr
    assert "no schema in embedded ClickHouse" in done.stderr, done.stderr
    assert "yet: run `tally migrate` first" in done.stderr, done.stderr
    assert "tally: not starting (see above)" in done.stderr
    assert "Traceback" not in done.stderr
    # The folder is free for the migrate it asks for, which then lets it start.
    migrated = run(tmp_path, ["migrate"])
    assert migrated.returncode == 0, migrated.stderr


# --- the token command serve prints, and `tally token`, follow the session settings ------------


@pytest.mark.slow
def test_the_printed_token_command_carries_issuer_audience_and_algorithm(tmp_path):
    """Dev mode with TALLY_JWT_ISSUER, TALLY_JWT_AUDIENCE and TALLY_JWT_ALGORITHMS=HS384 set:
    the printed command, run as printed from an environment without them, gives a token the
    server accepts. It left them out, and `tally token` signed HS256, which it refused."""
    server_dir, other_dir = tmp_path / "server", tmp_path / "elsewhere"
    server_dir.mkdir()
    other_dir.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = clean_env(
        TALLY_JWT_ISSUER="https://id.example.com/",
        TALLY_JWT_AUDIENCE="tally api",
        TALLY_JWT_ALGORITHMS="HS384",
    )
    proc = subprocess.Popen(
        [*TALLY, "serve", "--port", str(port)],
        cwd=server_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        command = None
        for line in proc.stdout:
            if "For a session token run: " in line:
                command = line.split("For a session token run: ", 1)[1].strip()
                break
        assert command, "the serve log printed no token command"
        wait_healthy(url, proc, proc.stdout.read)
        token = subprocess.run(
            command.replace("USER", "someone"),
            shell=True,
            cwd=other_dir,
            env=clean_env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        assert jwt.get_unverified_header(token)["alg"] == "HS384"
        listed = httpx.get(f"{url}/api/projects", headers={"authorization": f"Bearer {token}"})
        assert listed.status_code == 200, (command, listed.text)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=60)


def test_token_signs_with_the_first_hs_algorithm_allowed(tmp_path):
    """TALLY_JWT_SECRET with TALLY_JWT_ALGORITHMS=HS384: `tally token` signed HS256, which the
    server (the same verifier) refuses."""
    import asyncio

    from tally.config import load_settings
    from tally.http.auth import SessionVerifier

    environ = {"TALLY_JWT_SECRET": "k" * 48, "TALLY_JWT_ALGORITHMS": "RS256, HS384, HS256"}
    done = run(tmp_path, ["token", "--sub", "ann"], **environ)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert jwt.get_unverified_header(token)["alg"] == "HS384"
    verifier = SessionVerifier(load_settings(environ=environ, env_file=None))
    assert asyncio.run(verifier.verify(token)) == "ann"


def test_token_refuses_when_no_hs_algorithm_is_allowed(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dev-jwt-secret").write_text("d" * 64)
    done = run(tmp_path, ["token", "--sub", "ann"], TALLY_JWT_ALGORITHMS="RS256")
    refused_in_one_line(done, "TALLY_JWT_ALGORITHMS lists no HS256, HS384 or HS512")


# --- shared secrets anyone can sign with -------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "said"),
    [
        ("CHANGE-ME", "TALLY_JWT_SECRET is the placeholder 'CHANGE-ME' of deploy/'s examples"),
        ("abc", "TALLY_JWT_SECRET must be at least 32 bytes (an HS256 key of 256 bits"),
        ("x" * 31, "got 31"),
    ],
)
def test_serve_refuses_a_secret_anyone_could_guess(tmp_path, secret, said):
    done = run(tmp_path, ["serve", "--port", str(free_port())], TALLY_JWT_SECRET=secret)
    refused_in_one_line(done, said)
    assert secret not in done.stderr or secret == "CHANGE-ME"  # a real secret is never printed


def test_the_placeholder_of_the_kubernetes_example_is_refused():
    """The secret deploy/k8s/secret.example.yaml ships, as it is written there."""
    from pathlib import Path

    from tally.config import load_settings

    example = Path(__file__).resolve().parents[1] / "deploy" / "k8s" / "secret.example.yaml"
    [line] = [line for line in example.read_text().splitlines() if "TALLY_JWT_SECRET:" in line]
    placeholder = json.loads(line.split(":", 1)[1].strip())
    with pytest.raises(SystemExit, match="TALLY_JWT_SECRET is the placeholder"):
        load_settings(environ={"TALLY_JWT_SECRET": placeholder}, env_file=None)
