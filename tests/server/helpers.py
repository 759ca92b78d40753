"""Helpers of the server suite: the pinned image, whether Docker answers, ports, waiting."""

from __future__ import annotations

import functools
import socket
import time
from pathlib import Path

import httpx
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# One pinned image for the suite and the deployments: the one deploy/compose runs.
CLICKHOUSE_IMAGE: str = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())[
    "services"
]["clickhouse"]["image"]


@functools.cache
def docker_problem() -> str:
    """Why Docker cannot be used here ("" when it can): the daemon must answer a ping."""
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except Exception as exc:
        return f"no Docker engine reachable ({type(exc).__name__}: {str(exc)[:120]})"
    return ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url: str, timeout: float, auth: tuple[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=2, auth=auth)
            if response.status_code == 200:
                return
            last = f"{response.status_code} {response.text[:200]}"
        except httpx.HTTPError as exc:
            last = str(exc)
        time.sleep(1)
    raise AssertionError(f"{url} not ready after {timeout}s: {last}")
