"""The `tally` command as a user runs it: serve on embedded storage in dev mode, token, migrate."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from served import Server, free_port, wait_healthy
from tally.storage.migrate import RETENTION_COLUMNS, load_migrations, retention_statements

TALLY = [sys.executable, "-m", "tally"]


def clean_env(tmp_path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(extra)
    return env


@pytest.mark.slow
def test_the_listening_line_comes_once_a_worker_answers(tmp_path):
    """A script that waits for "Tally listening on" connects at once: the line was logged when
    granian was started, seconds before its worker took connections (refused meanwhile).
    A misspelt TALLY_ name is said, with the setting it resembles (it was ignored silently);
    the Compose files' TALLY_HTTP_PORT is not a misspelling."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = clean_env(tmp_path) | {"TALLY_KEY_REFRESH_SECOND": "1", "TALLY_HTTP_PORT": "9000"}
    proc = subprocess.Popen(
        [*TALLY, "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "Tally listening on" in line:
                break
        else:
            pytest.fail(f"no listening line: {''.join(seen)}")
        # no retry: the line says it answers now
        assert httpx.get(f"{url}/api/health/live", timeout=10).status_code == 200
        assert f"Tally listening on {url}" in seen[-1]
        assert any(f"Tally starting on {url}" in line for line in seen), seen
        [misspelt] = [line for line in seen if "is not a setting" in line]
        assert misspelt.rstrip().endswith(
            "TALLY_KEY_REFRESH_SECOND is not a setting of Tally and is ignored "
            "(did you mean TALLY_KEY_REFRESH_SECONDS?)"
        ), misspelt
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)


@pytest.mark.slow
def test_serve_in_dev_mode_from_any_directory(tmp_path):
    """No configuration at all: embedded storage under ./.tally, a dev secret, tokens that work."""
    env = clean_env(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*TALLY, "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_healthy(url, proc, proc.stdout.read)
        assert (tmp_path / ".tally" / "clickhouse").is_dir()
        token = subprocess.run(
            [*TALLY, "token", "--sub", "dev"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        headers = {"authorization": f"Bearer {token}"}
        created = httpx.post(f"{url}/api/projects", json={"name": "Local"}, headers=headers)
        assert created.status_code == 201
        key = created.json()["apiKey"]
        sent = httpx.post(
            f"{url}/api/collect",
            json={"events": [{"name": "pageview", "path": "/"}]},
            headers={"x-api-key": key},
        )
        assert sent.status_code == 202
        acknowledged = datetime.now(UTC)
        # The event is loaded from the ingest log about a second later; the dashboard says up to
        # when it is complete (dataThrough): once past the 202, the pageview must be in it.
        deadline = time.monotonic() + 120
        while True:
            dashboard = httpx.get(
                f"{url}/api/dashboard",
                params={"projectId": created.json()["projectId"], "days": 1},
                headers=headers,
            ).json()
            if datetime.fromisoformat(dashboard["dataThrough"]) >= acknowledged:
                break
            assert time.monotonic() < deadline, "the dashboard never caught up with the 202"
            time.sleep(0.1)
        assert dashboard["summary"]["pageviews"] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert "dev mode" in output
    assert key not in output and token not in output  # secrets never logged


def test_embedded_storage_refuses_several_workers(tmp_path):
    done = subprocess.run(
        [*TALLY, "serve", "--workers", "2"],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "embedded ClickHouse engine allows one process" in done.stderr


def test_migrate_is_idempotent_and_says_so(tmp_path):
    env = clean_env(tmp_path, TALLY_CLICKHOUSE_URL=f"chdb://{tmp_path}/ch")
    first = subprocess.run(
        [*TALLY, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stderr
    assert f"applied {len(load_migrations())} migration(s)" in first.stdout
    second = subprocess.run(
        [*TALLY, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert second.returncode == 0 and "up to date" in second.stdout


def test_migrate_says_what_retention_it_set_or_removed(tmp_path):
    """`tally migrate` said "schema ... is up to date" right after setting or removing the TTL of
    13 tables: it says what it did, and is quiet with --quiet only when nothing changed."""

    def run(*args: str, days: int) -> str:
        env = clean_env(
            tmp_path, TALLY_CLICKHOUSE_URL=f"chdb://{tmp_path}/ch", TALLY_RETENTION_DAYS=str(days)
        )
        done = subprocess.run(
            [*TALLY, "migrate", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    tables = len(RETENTION_COLUMNS)
    first = run("--quiet", days=0)
    assert "applied" in first and "retention" not in first  # a new database has no TTL
    assert run("--quiet", days=0) == ""
    set_now = run(days=30)
    assert f"retention: TTL of 30 days set on {tables} tables" in set_now
    assert "up to date" not in set_now
    assert run("--quiet", days=30) == ""
    assert "is up to date (retention: a TTL of 30 days)" in run(days=30)
    changed = run("--quiet", days=90)  # a change is news, --quiet or not
    assert (
        changed.strip() == f"retention: TTL of 90 days set on {tables} tables (events and rollups)"
    )
    removed = run(days=0)
    assert f"retention: TTL removed from {tables} tables" in removed
    assert "up to date" not in removed
    assert "is up to date (retention: no TTL, keeping all)" in run(days=0)


def test_migrate_reports_unreachable_storage(tmp_path):
    env = clean_env(
        tmp_path, TALLY_CLICKHOUSE_URL=f"http://default:s3cr3t-pw@127.0.0.1:{free_port()}/tally"
    )
    done = subprocess.run(
        [*TALLY, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "cannot reach ClickHouse server http://127.0.0.1" in done.stderr
    assert "s3cr3t-pw" not in done.stderr  # credentials are not printed


def test_bad_storage_url(tmp_path):
    env = clean_env(tmp_path, TALLY_CLICKHOUSE_URL="postgres://x")
    done = subprocess.run(
        [*TALLY, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "TALLY_CLICKHOUSE_URL must be chdb:///absolute/path (embedded) or" in done.stderr


def test_schema_prints_what_migrate_runs(tmp_path):
    done = subprocess.run(
        [*TALLY, "schema", "--database", "analytics"],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    ddl = done.stdout
    assert "CREATE TABLE IF NOT EXISTS analytics.events" in ddl
    assert "CREATE MATERIALIZED VIEW IF NOT EXISTS analytics.sessions_daily_mv" in ddl
    assert "${db}" not in ddl
    assert ddl.count(";\n") >= 15


def test_schema_prints_the_retention_ttl_migrate_sets(tmp_path):
    """README: `tally schema` "prints the DDL that tally migrate applies"; it left out the
    retention TTL. It ends with the ALTERs that set TALLY_RETENTION_DAYS on a new database."""

    def schema(*args: str, days: int) -> str:
        env = clean_env(tmp_path, TALLY_RETENTION_DAYS=str(days))
        done = subprocess.run(
            [*TALLY, "schema", *args], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    ddl = schema("--database", "analytics", days=30)
    ttls = [line for line in ddl.splitlines() if "TTL" in line and not line.startswith("--")]
    assert ttls == [
        f"ALTER TABLE analytics.{table} MODIFY TTL {column} + toIntervalDay(31);"
        for table, column in RETENTION_COLUMNS.items()
    ]
    # Exactly what migrate runs on a new database (storage/migrate.py).
    assert [t.rstrip(";") for t in ttls] == retention_statements({}, 30, "analytics")
    assert "-- retention: TALLY_RETENTION_DAYS=30" in ddl
    on_cluster = schema("--cluster", "c", days=7)
    events_ttl = "MODIFY TTL toDateTime(toDate(occurred_at), 'UTC') + "
    assert f"ALTER TABLE tally.events_local ON CLUSTER c {events_ttl}" in on_cluster
    # 0 keeps everything: no TTL, and the output says so.
    none = schema(days=0)
    assert "MODIFY TTL" not in none
    assert "-- retention: TALLY_RETENTION_DAYS=0, no TTL" in none


def test_the_commands_table_names_every_option():
    """The README's commands table lacked `tally migrate --quiet`, which --help lists."""
    from tally.cli import main

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for name, command in main.commands.items():
        [row] = [line for line in readme.splitlines() if line.startswith(f"| `tally {name}")]
        head = row.split(" | ", 2)[0]
        for param in command.params:
            if param.name == "help" or getattr(param, "hidden", False):
                continue  # hidden: internal (migrate --check, what serve --no-migrate runs)
            assert any(opt in head for opt in param.opts + param.secondary_opts), (name, param)


def test_serve_refuses_to_start_without_storage(tmp_path):
    env = clean_env(
        tmp_path,
        TALLY_CLICKHOUSE_URL=f"http://default:x@127.0.0.1:{free_port()}/t",
        TALLY_JWT_SECRET="s" * 32,
    )
    done = subprocess.run(
        [*TALLY, "serve", "--port", str(free_port())],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "cannot reach ClickHouse server" in done.stderr
    assert "not starting, the schema could not be applied" in done.stderr


def test_schema_for_a_cluster(tmp_path):
    done = subprocess.run(
        [*TALLY, "schema", "--cluster", "tally_cluster"],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    ddl = done.stdout
    assert ddl.startswith("CREATE DATABASE IF NOT EXISTS tally ON CLUSTER tally_cluster;\n")
    assert "CREATE TABLE IF NOT EXISTS tally.events_local ON CLUSTER tally_cluster" in ddl
    assert "ENGINE = Distributed(tally_cluster, tally, events_local, cityHash64(project_id))" in ddl
    # The setting is the default cluster; an empty --cluster renders for one node.
    env = clean_env(
        tmp_path, TALLY_CLICKHOUSE_CLUSTER="c2", TALLY_CLICKHOUSE_URL="http://u:p@h:8123/db"
    )
    from_env = subprocess.run(
        [*TALLY, "schema"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert (
        "tally.events" not in from_env.stdout and "db.events_local ON CLUSTER c2" in from_env.stdout
    )
    plain = subprocess.run(
        [*TALLY, "schema", "--cluster", ""], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert "ON CLUSTER" not in plain.stdout and "db.events\n" in plain.stdout


def test_cluster_mode_needs_a_server(tmp_path):
    env = clean_env(tmp_path, TALLY_CLICKHOUSE_CLUSTER="tally_cluster")
    done = subprocess.run(
        [*TALLY, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "TALLY_CLICKHOUSE_CLUSTER needs a ClickHouse server" in done.stderr
    env["TALLY_CLICKHOUSE_URL"] = "http://u:p@127.0.0.1:1/tally"
    env["TALLY_CLICKHOUSE_CLUSTER"] = "bad-name"
    done = subprocess.run(
        [*TALLY, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "must be a plain identifier" in done.stderr


@pytest.mark.slow
def test_serve_without_migrate_uses_the_schema_in_place(tmp_path):
    """--no-migrate: deployments that run `tally migrate` as a step of their own."""
    env = clean_env(
        tmp_path, TALLY_CLICKHOUSE_URL=f"chdb://{tmp_path}/ch", TALLY_JWT_SECRET="s" * 32
    )
    subprocess.run([*TALLY, "migrate"], cwd=tmp_path, env=env, check=True, timeout=120)
    served = Server(
        tmp_path, args=("--no-migrate",), TALLY_CLICKHOUSE_URL=env["TALLY_CLICKHOUSE_URL"]
    )
    assert served.stop() == 0, (tmp_path / served.log.name).read_text()


@pytest.mark.slow
def test_a_second_serve_on_the_same_data_folder_is_refused_plainly(tmp_path):
    """The embedded engine allows one process: a second `tally serve` on the folder of a running
    one failed deep in the engine ("the schema could not be applied"). It now refuses before
    opening anything, naming the folder and the process that holds it; the first serves on."""
    first = Server(tmp_path)
    try:
        env = clean_env(tmp_path, TALLY_DATA_DIR=str(tmp_path), TALLY_JWT_SECRET="s" * 32)
        second = subprocess.run(
            [*TALLY, "serve", "--port", str(free_port())],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        held = (
            f"the data folder {tmp_path.resolve()} is in use by another Tally process "
            f"(PID {first.proc.pid})"
        )
        assert second.returncode != 0
        assert held in second.stderr, second.stderr
        assert "schema could not be applied" not in second.stderr
        # `tally migrate` on it said only "Error initializing EmbeddedServer: . (BAD_ARGUMENTS)"
        # after a page of the engine's stack.
        migrate = subprocess.run(
            [*TALLY, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert migrate.returncode != 0
        assert held in migrate.stderr, migrate.stderr
        assert "EmbeddedServer" not in migrate.stderr
        assert httpx.get(f"{first.url}/api/health", timeout=10).status_code == 200
    finally:
        assert first.stop() == 0
    # The lock goes with the process that held it: the folder serves again.
    assert Server(tmp_path).stop() == 0


HOLD = """
import os, sys, time
from pathlib import Path
from tally.supervision import hold_lock
assert hold_lock(Path(sys.argv[1])) is None
if os.fork() == 0:  # a worker: it has the lock's descriptor too, and outlives us a moment
    time.sleep(float(sys.argv[2]))
    os._exit(0)
print("held", flush=True)
if sys.argv[3] == "die":
    os._exit(0)  # as after kill -9: the worker still holds the lock
time.sleep(60)
"""
TAKE = "import sys; from pathlib import Path; from tally.supervision import hold_lock; "
TAKE += "print(hold_lock(Path(sys.argv[1])))"


def test_the_data_folder_lock_names_a_live_holder_and_waits_out_a_dead_ones_worker(tmp_path):
    """Two real processes on one lock file: a live holder is named at once; one that died (its
    worker still exiting, as after kill -9) is waited for, so that a restart starts."""
    lock = str(tmp_path / "clickhouse.lock")
    live = subprocess.Popen(
        [*TALLY[:1], "-c", HOLD, lock, "0.1", "live"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert live.stdout.readline().strip() == "held"
        started = time.monotonic()
        taken = subprocess.run([*TALLY[:1], "-c", TAKE, lock], capture_output=True, text=True)
        assert taken.stdout.strip() == str(live.pid), taken.stderr
        assert time.monotonic() - started < 5  # not waited for: it is alive
    finally:
        live.kill()
        live.wait()
    dead = subprocess.Popen(
        [*TALLY[:1], "-c", HOLD, lock, "2", "die"], stdout=subprocess.PIPE, text=True
    )
    assert dead.stdout.readline().strip() == "held"
    dead.wait()
    taken = subprocess.run([*TALLY[:1], "-c", TAKE, lock], capture_output=True, text=True)
    assert taken.stdout.strip() == "None", taken.stderr


def test_token_never_creates_a_secret(tmp_path):
    """With no secret where it looks, `tally token` fails, naming the folder and the fix, and
    leaves nothing behind (a secret of its own would sign tokens no server accepts)."""
    done = subprocess.run(
        [*TALLY, "token", "--sub", "me"],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert done.stdout == ""
    assert f"no dev-mode secret in {tmp_path / '.tally'}" in done.stderr
    assert "TALLY_DATA_DIR=" in done.stderr and "TALLY_JWT_SECRET" in done.stderr
    assert not (tmp_path / ".tally").exists()


@pytest.mark.slow
def test_serve_log_prints_a_token_command_that_works_from_elsewhere(tmp_path):
    server_dir, other_dir = tmp_path / "server", tmp_path / "elsewhere"
    server_dir.mkdir()
    other_dir.mkdir()
    env = clean_env(tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [*TALLY, "serve", "--port", str(port)],
        cwd=server_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        command = None
        for line in proc.stdout:  # the dev-mode warning comes before the server starts
            if "For a session token run: " in line:
                command = line.split("For a session token run: ", 1)[1].strip()
                break
        assert command, "the serve log printed no token command"
        assert f"TALLY_DATA_DIR={server_dir / '.tally'}" in command
        wait_healthy(url, proc, proc.stdout.read)
        # The printed command, as printed, from another directory.
        token = subprocess.run(
            command.replace("USER", "someone"),
            shell=True,
            cwd=other_dir,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        created = httpx.post(
            f"{url}/api/projects",
            json={"name": "Elsewhere"},
            headers={"authorization": f"Bearer {token}"},
        )
        assert created.status_code == 201, created.text
        assert not (other_dir / ".tally").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def test_just_recipes_use_the_active_interpreter():
    """No recipe but `install` names a virtual environment's folder: they run `python -m ...`."""
    justfile = (Path(__file__).resolve().parents[1] / "justfile").read_text()
    install = justfile.split("\ninstall:\n", 1)[1].split("\n\n", 1)[0]
    elsewhere = [
        line
        for line in justfile.splitlines()
        if ".venv/bin/" in line
        and line not in install.splitlines()
        and not line.lstrip().startswith("#")
    ]
    assert elsewhere == []
    assert "python -m tally token" in justfile


# Bad input to the command: one plain line, never a traceback.
BAD_INPUT = {
    "data folder is a file": (
        ["serve"],
        {"TALLY_DATA_DIR": "/etc/passwd"},
        "TALLY_DATA_DIR /etc/passwd is a file, not a folder",
    ),
    "data folder cannot be made": (
        ["migrate"],
        {"TALLY_DATA_DIR": "/proc/nope"},
        "cannot use TALLY_DATA_DIR /proc/nope as the data folder",
    ),
    "host that does not resolve": (
        ["serve", "--host", "nosuch.invalid"],
        {},
        "--host 'nosuch.invalid' is neither an IP address nor a name",
    ),
    "port out of range": (["serve", "--port", "99999"], {}, "99999 is not in the range"),
    "GeoIP file that is not one": (
        ["serve"],
        {"TALLY_GEOIP_DB": "/etc/passwd"},
        "cannot open the IP-to-country database /etc/passwd (TALLY_GEOIP_DB)",
    ),
    "empty sub": (["token", "--sub", " "], {}, "--sub must name a user"),
    "schema of a bad URL": (
        ["schema"],
        {"TALLY_CLICKHOUSE_URL": "foo://x"},
        "TALLY_CLICKHOUSE_URL must be chdb:///absolute/path (embedded) or",
    ),
    "schema of a bad database name": (
        ["schema", "--database", "x; DROP TABLE y"],
        {},
        "--database must be a plain identifier",
    ),
    "misspelt IP privacy": (
        ["migrate"],
        {"TALLY_IP_PRIVACY": "HASH"},
        "TALLY_IP_PRIVACY must be 'store' (keep each event's client IP) or 'hash'",
    ),
    "unknown log level": (
        ["migrate"],
        {"TALLY_LOG_LEVEL": "LOUD"},
        "TALLY_LOG_LEVEL must be one of DEBUG, INFO",
    ),
}


@pytest.mark.parametrize(("args", "env", "said"), BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_one_plain_line(tmp_path, args, env, said):
    done = subprocess.run(
        [*TALLY, *args],
        cwd=tmp_path,
        env=clean_env(tmp_path, **{"TALLY_DATA_DIR": str(tmp_path / "d"), **env}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "Error initializing" not in done.stderr
    assert done.stdout == ""


def serve_logged(tmp_path: Path, env: dict[str, str], *args: str):
    """A `tally serve` in a process group of its own, its output in ``tmp_path/serve.log``."""
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*TALLY, "serve", *args],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, log


@pytest.mark.slow
def test_serve_binds_a_host_name(tmp_path):
    """granian binds addresses only: ``--host localhost`` was a traceback."""
    port = free_port()
    env = clean_env(tmp_path, TALLY_DATA_DIR=str(tmp_path), TALLY_JWT_SECRET="s" * 32)
    proc, log = serve_logged(tmp_path, env, "--host", "localhost", "--port", str(port))
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, log.read_text)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.slow
def test_a_worker_started_in_a_clickhouse_outage_waits_for_it(tmp_path):
    """Deployments serve with --no-migrate (the schema is a step of its own). A worker that
    started while its ClickHouse server did not answer crashed; granian restarted it, it crashed
    again, and granian stopped the whole server. It now waits, saying so, and tries again."""
    port = free_port()
    env = clean_env(
        tmp_path,
        TALLY_CLICKHOUSE_URL=f"http://default:s3cr3t-pw@127.0.0.1:{free_port()}/t",
        TALLY_JWT_SECRET="s" * 32,
        TALLY_DATA_DIR=str(tmp_path),
    )
    proc, log = serve_logged(tmp_path, env, "--no-migrate", "--port", str(port))
    try:
        deadline = time.monotonic() + 60
        while log.read_text().count("this worker waits for it") < 3:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        assert proc.poll() is None
        text = log.read_text()
        assert "Worker crash loop" not in text and "Traceback" not in text, text
        assert "s3cr3t-pw" not in text
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_the_data_folder_is_readable_by_its_owner_only(tmp_path):
    """The embedded engine's files hold client IPs, User-Agents and owners' ids. With the usual
    umask (022) they were readable by every user of the machine; the secrets were 0600."""
    data = tmp_path / "data"
    env = clean_env(tmp_path, TALLY_DATA_DIR=str(data))
    done = subprocess.run(
        [*TALLY, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    paths = [data, *data.rglob("*")]
    assert len(paths) > 20  # the engine's folders and files
    shared = [
        f"{p.relative_to(tmp_path)} {oct(p.stat().st_mode & 0o777)}"
        for p in paths
        if not p.is_symlink() and p.stat().st_mode & 0o077
    ]
    assert shared == []


def test_a_worker_before_the_schema_is_applied_answers_503_not_a_crash(chdb_path, tmp_path):
    """A pod started beside the migrate Job of a first install (a ClickHouse server, --no-migrate,
    no tables yet): the worker serves, a collect is told to retry (503 with Retry-After; its key
    is not known to be invalid), and liveness holds. It crashed on reading the API keys, and
    granian stopped the server. (On the embedded engine `serve --no-migrate` refuses an empty
    folder instead, tests/test_config_bounds.py: no migrate can run beside it.) The worker's
    app, on a database with no schema, on the real engine."""
    from litestar.testing import TestClient

    from conftest import make_settings
    from tally.app import create_app

    settings = make_settings(chdb_path, tmp_path)
    with TestClient(create_app(settings, migrate=False)) as worker:
        refused = worker.post(
            "/api/collect",
            json={"events": [{"name": "a"}]},
            headers={"x-api-key": "tk_" + "a" * 40},
        )
        assert (refused.status_code, refused.json()) == (503, {"error": "Storage unavailable"})
        assert int(refused.headers["retry-after"]) >= 1
        live = worker.get("/api/health/live").json()
        assert live["status"] == "ok" and live["backlog"]["events"] == 0


def test_sighup_on_embedded_storage_leaves_the_server_serving(tmp_path):
    """granian's SIGHUP starts a new worker before stopping the old one; on the embedded engine
    (one process) the new one failed on the engine's lock and the whole server stopped."""
    served = Server(tmp_path)
    try:
        _, key = served.new_project("hup", "Hup")
        (worker,) = served.workers()
        os.kill(served.proc.pid, signal.SIGHUP)
        served.collect(key, [{"name": "after-hup"}])
        time.sleep(1.0)  # a respawn would have begun by now
        assert served.proc.poll() is None
        assert served.workers() == [worker]
        assert httpx.get(f"{served.url}/api/health").status_code == 200
    finally:
        assert served.stop() == 0
