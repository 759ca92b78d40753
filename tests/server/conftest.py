"""The server suite: real ClickHouse servers in Docker. Every test here is marked ``server`` and
skipped, with the reason, when no Docker engine answers a ping."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.helpers import docker_problem


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.server)
            if problem := docker_problem():
                item.add_marker(pytest.mark.skip(reason=f"needs a Docker engine: {problem}"))
