"""The one table of limits and defaults: in the README verbatim, in the OpenAPI document, and true
to the code it describes."""

from __future__ import annotations

from pathlib import Path

import msgspec

from conftest import auth
from tally.app import create_app
from tally.config import Settings
from tally.domain import projects
from tally.http import schemas
from tally.http.limits_doc import DEFAULT_DAYS, PAGE_DAYS, markdown, rows
from tally.http.messages import plain
from tally.http.schemas import ProjectCreated

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_holds_the_table():
    assert markdown() in (ROOT / "README.md").read_text()


def test_the_openapi_document_holds_the_table_as_configured():
    settings = Settings(max_body_bytes=123_456, session_limit_per_user="5/second")
    document = create_app(settings).openapi_schema.to_schema()
    assert markdown(settings) in document["info"]["description"]
    assert "123,456 bytes" in document["info"]["description"]
    assert "5/second per user" in document["info"]["description"]


def test_the_days_default_is_the_apis_and_the_page_says_its_own():
    document = create_app(Settings()).openapi_schema.to_schema()
    [days] = [
        p for p in document["paths"]["/api/dashboard"]["get"]["parameters"] if p["name"] == "days"
    ]
    # Said, not declared as the schema's default: generated clients sent it with from/to (400).
    assert "default" not in days["schema"]
    assert f"(default {DEFAULT_DAYS}, when from/to are not given)" in days["description"]
    app_js = (ROOT / "service" / "tally" / "web" / "app.js").read_text()
    assert f"const DEFAULT_DAYS = {PAGE_DAYS};" in app_js


def test_the_field_limits_are_the_schemas():
    def bounds(struct, name):
        info = msgspec.inspect.type_info(struct)
        [field] = [f for f in info.fields if f.encode_name == name]
        kind = field.type
        if isinstance(kind, msgspec.inspect.UnionType):
            kind = next(t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType))
        return getattr(kind, "min_length", None), getattr(kind, "max_length", None)

    # A project name is 2-60 characters once trimmed (domain/projects.py, which the schema's
    # pattern follows).
    assert (projects.NAME_MIN, projects.NAME_MAX) == (2, 60)
    # A key label likewise, 1-60 characters once trimmed.
    assert (projects.LABEL_MIN, projects.LABEL_MAX) == (1, 60)
    assert bounds(schemas.Event, "name") == (1, 100)
    assert bounds(schemas.Event, "path") == (None, 2048)
    assert bounds(schemas.Event, "url") == (None, 4096)
    assert bounds(schemas.Event, "referrer") == (None, 4096)
    assert bounds(schemas.Event, "sessionId") == (None, 200)
    assert bounds(schemas.Event, "visitorId") == (None, 200)
    assert bounds(schemas.CollectBody, "events") == (1, 100)
    table = markdown()
    for rule in ("2–60 characters", "1–60 characters", "1–100", "at most 2048 characters"):
        assert rule in table
    # The error messages state the same ranges.
    assert plain("Expected `str` of length >= 2", "$.name")[1] == projects.NAME_RULE
    assert projects.NAME_RULE.startswith("must be 2 to 60 characters")
    # beyond the raw length read (200, spaces included), the message says that too
    assert plain("Expected `str` of length <= 200", "$.label")[1] == (
        f"{projects.LABEL_RULE}, and at most 200 characters with them"
    )
    assert projects.LABEL_RULE.startswith("must be 1 to 60 characters")


def test_the_readme_states_the_created_projects_body(client):
    """README "Projects" said the 201 body of POST /api/projects is {projectId, apiKey}; the
    answer (and the API example) carry keyId too."""
    import json
    import re

    readme = (ROOT / "README.md").read_text()
    answer = client.post("/api/projects", json={"name": "Doc"}, headers=auth("doc-reader"))
    assert answer.status_code == 201, answer.text
    fields = set(answer.json())
    assert fields == {f.encode_name for f in msgspec.inspect.type_info(ProjectCreated).fields}
    [stated] = re.findall(r"its 201 body is `\{([^}]*)\}`", readme)
    assert {f.strip() for f in stated.split(",")} == fields
    [example] = re.findall(r'# 201 \{("projectId",[^}]*)\}', readme)
    assert {f.strip().strip('"') for f in example.split(",")} == fields
    [quickstart] = re.findall(r'^# (\{"projectId":.*\})$', readme, re.MULTILINE)
    assert set(json.loads(quickstart)) == fields


def row(settings: Settings, what: str) -> str:
    [rule] = [r for w, r in rows(settings) if w == what]
    return rule


def test_the_table_states_configured_values_as_they_apply():
    """The OpenAPI table printed "default 0 bytes (0 MiB)" for TALLY_MAX_BODY_BYTES=0 (which turns
    collect's cap off), "default 1,000 bytes (0.000953674 MiB)" and "64 KiB on the other
    endpoints" for 1000 (where 1000 bytes applied there too), and a blank for a rate limit turned
    off."""
    off = row(Settings(max_body_bytes=0), "request body")
    assert off.startswith("`TALLY_MAX_BODY_BYTES` set to 0: no cap on collect")
    assert "; 64 KiB on the other endpoints;" in off
    assert "MiB" not in off and "default" not in off
    low = row(Settings(max_body_bytes=1000), "request body")
    assert low.startswith("`TALLY_MAX_BODY_BYTES` set to 1,000 bytes on collect")
    assert "1,000 bytes on the other endpoints too" in low
    assert "64 KiB on the other endpoints;" not in low
    assert "MiB" not in low and "default" not in low and "e-" not in low
    odd = row(Settings(max_body_bytes=123_456), "request body")
    assert "set to 123,456 bytes (about 120.6 KiB) on collect" in odd
    assert "; 64 KiB on the other endpoints;" in odd
    big = row(Settings(max_body_bytes=10 * 2**20), "request body")
    assert "set to 10,485,760 bytes (10 MiB) on collect" in big
    default = row(Settings(), "request body")
    assert "default 7,340,032 bytes (7 MiB) on collect (0: no cap)" in default
    assert "64 KiB on the other endpoints, or `TALLY_MAX_BODY_BYTES` if lower" in default

    unlimited = Settings(
        collect_limit_per_key="", collect_limit_per_ip=" ", session_limit_per_user=""
    )
    collect = row(unlimited, "collect rate limits")
    assert "`TALLY_COLLECT_LIMIT_PER_KEY` empty, so no limit per key" in collect
    assert "`TALLY_COLLECT_LIMIT_PER_IP` empty, so no limit per client IP" in collect
    session = row(unlimited, "session endpoints rate limit")
    assert session.startswith("`TALLY_SESSION_LIMIT_PER_USER` empty, so no limit per user")
    # the document served with such settings holds that table
    document = create_app(Settings(max_body_bytes=0)).openapi_schema.to_schema()
    assert markdown(Settings(max_body_bytes=0)) in document["info"]["description"]


def test_a_rate_limit_turned_off_promises_no_429():
    """With the per-user limit set empty the table read "empty, so no limit per user; 429
    beyond": beyond no limit."""
    off = row(Settings(session_limit_per_user=""), "session endpoints rate limit")
    assert off == "`TALLY_SESSION_LIMIT_PER_USER` empty, so no limit per user"
    on = row(Settings(session_limit_per_user="5/second"), "session endpoints rate limit")
    assert on.endswith("5/second per user; 429 beyond")
    both_off = row(
        Settings(collect_limit_per_key="", collect_limit_per_ip=""), "collect rate limits"
    )
    assert "429" not in both_off
    one = row(
        Settings(collect_limit_per_key="", collect_limit_per_ip="9/second"), "collect rate limits"
    )
    assert one.endswith("9/second per client IP; 429 beyond")


def test_the_retention_is_stated_as_configured():
    """An importer learns from the document how far back it may send: the configured retention
    (the row gave only "N")."""
    assert "`TALLY_RETENTION_DAYS` is 90: one of a UTC day before today minus 90 days" in row(
        Settings(retention_days=90), "`occurredAt`"
    )
    assert "(default 0: every day kept)" in row(Settings(), "`occurredAt`")
