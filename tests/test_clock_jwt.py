"""A session token's times against a clock that differs from the issuer's: 30 s of leeway for
``exp``, ``nbf`` and ``iat`` alike (PyJWT refuses an ``iat`` in the future beyond the leeway),
and the README says so of all three."""

from __future__ import annotations

import time
from pathlib import Path

import jwt
import pytest

from conftest import JWT_SECRET

README = Path(__file__).resolve().parents[1] / "README.md"


def status(client, **times: float) -> int:
    claims = {"sub": "clock-user", "exp": time.time() + 600, **times}
    token = jwt.encode(claims, JWT_SECRET, algorithm="HS256")
    headers = {"authorization": f"Bearer {token}"}
    return client.get("/api/projects", headers=headers).status_code


@pytest.mark.parametrize("claim", ["iat", "nbf"])
def test_a_token_from_the_future_is_refused_beyond_the_leeway(client, claim):
    assert status(client, **{claim: time.time() + 10}) == 200
    assert status(client, **{claim: time.time() + 120}) == 401


def test_the_readme_gives_the_leeway_of_iat_too():
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert "with 30 seconds of leeway, all three of them" in text
    assert "more than 30 s before its `nbf` or its `iat`" in text
