"""Starting the current Tally on a data folder an older one left or still holds.

- `tally serve --no-migrate` (deploy/ runs it after a migrate Job) on a schema behind the release
  started, said ok on /api/health, and answered 503 "Storage unavailable" on breakdowns by source
  (Unknown identifier source_first). It refuses to start, naming what is missing.
- A folder whose engine another process has open (an older Tally, which held no clickhouse.lock)
  gave chDB's "Cannot lock file ... status" and "Error initializing EmbeddedServer: .
  (BAD_ARGUMENTS)". It is refused in words, naming the process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from served import Server, free_port
from tally.storage.migrate import load_migrations

TALLY = [sys.executable, "-m", "tally"]


def env_for(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(TALLY_DATA_DIR=str(data), TALLY_JWT_SECRET="s" * 32)
    return env


def migrate_folder_before(data: Path, version: int) -> None:
    """The data folder as a Tally of schema ``version - 1`` left it (its own process: chDB opens
    one engine per process), as conftest.migrate_before does for a database."""
    code = textwrap.dedent(
        f"""
        from tally.storage.client import Storage, parse_url
        from tally.storage.migrate import load_migrations, migrations_table
        storage = Storage(parse_url("chdb://{data}/clickhouse"), 1)
        storage.command(migrations_table(storage.database))
        for m in load_migrations():
            if m.version >= {version}:
                break
            for statement in m.statements(storage.database):
                storage.command(statement)
            storage.insert(storage.database + ".schema_migrations",
                           [[m.version], [m.name], [m.checksum]], ["version", "name", "checksum"])
        storage.close()
        """
    )
    subprocess.run([sys.executable, "-c", code], env=env_for(data), check=True, timeout=300)


@pytest.mark.slow
def test_serve_without_migrate_refuses_a_schema_behind_the_release(tmp_path):
    migrate_folder_before(tmp_path, 12)
    env = env_for(tmp_path)
    refused = subprocess.run(
        [*TALLY, "serve", "--no-migrate", "--port", str(free_port())],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode != 0, refused.stderr
    missing = [m.name for m in load_migrations() if m.version >= 12]
    assert f"{len(missing)} migration(s) not applied ({', '.join(missing)})" in refused.stderr
    assert "Run `tally migrate`" in refused.stderr
    assert "Traceback" not in refused.stderr

    subprocess.run([*TALLY, "migrate"], cwd=tmp_path, env=env, check=True, timeout=300)
    served = Server(tmp_path, args=("--no-migrate",))  # now it starts
    assert served.stop() == 0


HOLD = """
import sys, time, clickhouse_connect
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
client.command("SELECT 1")
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_folder_whose_engine_another_process_holds_is_refused_in_words(tmp_path):
    """Another process (here chDB itself, as a Tally from before clickhouse.lock) has the engine
    open: serve and migrate refuse before opening it, naming the folder and that process."""
    migrate_folder_before(tmp_path, 1000)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "clickhouse")],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        env = env_for(tmp_path)
        for args in (["migrate"], ["serve", "--port", str(free_port())]):
            done = subprocess.run(
                [*TALLY, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode != 0, (args, done.stderr)
            assert (
                f"tally: the data folder {tmp_path} is in use by another process "
                f"(PID {holder.pid}; perhaps an older Tally"
            ) in done.stderr, done.stderr
            assert "BAD_ARGUMENTS" not in done.stderr and "Cannot lock" not in done.stderr
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=60)
    # Once it is gone the folder is Tally's again.
    again = subprocess.run(
        [*TALLY, "migrate"], cwd=tmp_path, env=env_for(tmp_path), capture_output=True, text=True
    )
    assert again.returncode == 0 and "up to date" in again.stdout, again.stderr
