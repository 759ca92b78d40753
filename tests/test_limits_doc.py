"""The one table of limits and defaults: in the README verbatim, in the OpenAPI document, and true
to the code it describes."""

from __future__ import annotations

from pathlib import Path

import msgspec

from tally.app import create_app
from tally.config import Settings
from tally.domain import projects
from tally.http import schemas
from tally.http.limits_doc import DEFAULT_DAYS, PAGE_DAYS, markdown
from tally.http.messages import plain

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
    assert days["schema"]["default"] == DEFAULT_DAYS
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
