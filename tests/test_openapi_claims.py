"""What a client generated from the OpenAPI document relies on, checked against the server: every
request body has a working example (sent as is, it is accepted), every content type a route takes
or answers is listed, the statuses of slow and large bodies are documented, and a real v2 answer
validates against the document's schema for it (jsonschema, as a generated client would)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
import msgspec
import pytest

from conftest import auth, new_project
from tally.app import create_app
from tally.config import Settings
from tally.http.openapi_doc import EXAMPLES

DOCUMENT: dict[str, Any] = json.loads(
    msgspec.json.encode(create_app(Settings(jwt_secret="s" * 32)).openapi_schema.to_schema())
)
BODY_OPERATIONS = sorted(
    (path, method)
    for path, item in DOCUMENT["paths"].items()
    for method, operation in item.items()
    if isinstance(operation, dict) and "requestBody" in operation
)


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with the document's components beside it, so that its $refs resolve."""
    return {**schema, "components": DOCUMENT["components"]}


def test_every_body_taking_operation_is_documented_with_a_body_and_an_example():
    assert set(BODY_OPERATIONS) == set(EXAMPLES)  # v2's body too, which its handler decodes
    for path, method in BODY_OPERATIONS:
        operation = DOCUMENT["paths"][path][method]
        media = operation["requestBody"]["content"]["application/json"]
        (example,) = media["examples"].values()
        jsonschema_rs.validate(_resolve(media["schema"]), example["value"])
        # a body may arrive too slowly or be too large, whatever the route
        assert {"408", "413"} <= set(operation["responses"]), (path, method)


def test_retry_after_is_documented_on_every_429_and_503():
    for item in DOCUMENT["paths"].values():
        for operation in item.values():
            for status in ("429", "503"):
                response = operation.get("responses", {}).get(status)
                if response is not None:
                    assert "Retry-After" in response["headers"]


def test_the_documents_content_types_are_the_servers():
    collect = DOCUMENT["paths"]["/api/collect"]["post"]["requestBody"]["content"]
    assert set(collect) == {"application/json", "text/plain"}  # the tracker's text/plain
    export = DOCUMENT["paths"]["/api/export"]["get"]["responses"]["200"]["content"]
    assert set(export) == {"text/csv", "application/x-ndjson", "application/vnd.apache.parquet"}


def test_the_session_cookie_is_a_documented_way_in(client, user):
    schemes = DOCUMENT["components"]["securitySchemes"]
    cookie = schemes["sessionCookie"]
    assert (cookie["type"], cookie["name"], cookie["in"]) == ("apiKey", "tally_session", "cookie")
    # Swagger UI's Authorize took it and showed "Authorized", then sent no cookie (401)
    assert "Not for this page's Try it out" in cookie["description"]
    listing = DOCUMENT["paths"]["/api/projects"]["get"]
    assert {"sessionCookie": []} in listing["security"]
    token = auth(user)["authorization"].removeprefix("Bearer ")
    client.cookies.set("tally_session", token)
    try:
        assert client.get("/api/projects").status_code == 200
    finally:
        client.cookies.clear()


@pytest.mark.parametrize(("path", "method"), BODY_OPERATIONS)
def test_each_example_body_is_accepted_as_it_is_written(client, user, path, method):
    project_id, key = new_project(client, user=user)
    body = json.loads(json.dumps(EXAMPLES[(path, method)]))
    for field in ("projectId", "site_id"):
        if field in body:  # the example's id stands for a project of the caller's
            body[field] = project_id
    headers = {**auth(user), "x-api-key": key}
    response = client.request(method.upper(), path, json=body, headers=headers)
    documented = DOCUMENT["paths"][path][method]["responses"]
    success = next(code for code in documented if code.startswith("2"))
    assert response.status_code == int(success), response.text
    schema = documented[success].get("content", {}).get("application/json", {}).get("schema")
    if schema is not None:
        jsonschema_rs.validate(_resolve(schema), response.json())


def test_a_v2_answer_with_integer_and_decimal_metrics_validates_against_its_schema(client, user):
    project_id, key = new_project(client, user=user)
    sent = client.post(
        "/api/collect",
        json={
            "events": [
                {"name": "pageview", "path": "/a", "sessionId": "s1", "visitorId": "v1"},
                {"name": "pageview", "path": "/b", "sessionId": "s1", "visitorId": "v1"},
                {"name": "pageview", "path": "/a", "sessionId": "s2", "visitorId": "v2"},
            ]
        },
        headers={"x-api-key": key},
    )
    assert sent.status_code == 202
    response = client.post(
        "/api/v2/query",
        json={
            "site_id": project_id,
            "metrics": ["visitors", "bounce_rate", "visit_duration"],
            "date_range": "day",
            "dimensions": ["source"],
        },
        headers=auth(user),
    )
    assert response.status_code == 200, response.text
    metrics = [row["metrics"] for row in response.json()["results"]]
    assert any(isinstance(m[0], int) for m in metrics)  # visitors: integers
    assert any(isinstance(m[1], float) for m in metrics)  # bounce rate: 50.0, a decimal
    schema = DOCUMENT["paths"]["/api/v2/query"]["post"]["responses"]["200"]["content"]
    jsonschema_rs.validate(_resolve(schema["application/json"]["schema"]), response.json())


OPERATIONS = sorted(
    (path, method)
    for path, item in DOCUMENT["paths"].items()
    for method, operation in item.items()
    if isinstance(operation, dict) and "responses" in operation
)


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
def test_the_statuses_every_route_can_answer_are_documented_on_each(client, path, method):
    """Any route refuses a parameter given twice (400) and a body declared over its cap (413),
    whether or not it takes parameters or a body: the document says so on every operation (it
    did only where a body or parameters were taken; health, projects and key listing missed
    them)."""
    declared = DOCUMENT["paths"][path][method]["responses"]
    assert {"400", "413"} <= set(declared), sorted(declared)
    repeated = client.request(method.upper(), f"{path}?x=1&x=2")
    assert repeated.status_code == 400, repeated.text
    if method != "head":
        assert repeated.json()["error"] == "Invalid query"
    if path != "/api/collect":  # its cap is TALLY_MAX_BODY_BYTES, 7 MiB
        large = client.request(method.upper(), path, content=b"x" * 70_000)
        assert large.status_code == 413, large.text


@pytest.mark.parametrize("path", sorted(DOCUMENT["paths"]))
def test_a_plain_options_lists_the_documented_methods_of_its_path_without_a_session(client, path):
    """OPTIONS (not a CORS preflight) answers 204 with every method the document gives the
    path. On /api/projects and /api/projects/keys it asked for a session (401) and, with one,
    listed OPTIONS and POST alone."""
    answer = client.options(path)
    assert answer.status_code == 204, answer.text
    documented = {method.upper() for method in DOCUMENT["paths"][path]} & {
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
    }
    assert answer.headers["allow"] == ", ".join(sorted(documented | {"OPTIONS"}))


def test_head_answers_are_documented_without_a_body():
    """A client generated from the document parsed HEAD's empty answer as the GET's JSON, and
    failed (seven of eight HEAD functions of openapi-python-client's client)."""
    heads = [(path, item["head"]) for path, item in DOCUMENT["paths"].items() if "head" in item]
    assert len(heads) >= 8
    for path, operation in heads:
        for status, response in operation["responses"].items():
            assert "content" not in response, (path, status)
    # The GET beside it keeps its bodies.
    assert "content" in DOCUMENT["paths"]["/api/projects"]["get"]["responses"]["200"]


def test_the_v2_filters_are_typed_as_the_server_takes_them():
    """``filters`` was an array of anything: openapi-python-client left the v2 operation out of
    its client, and the document took 21 filters the server refuses."""
    body = DOCUMENT["paths"]["/api/v2/query"]["post"]["requestBody"]["content"]["application/json"]
    schema = _resolve(body["schema"])
    query = {"site_id": "0" * 24, "metrics": ["visitors"], "date_range": "7d"}
    one = ["is", "event:page", ["/a", "/b"]]
    jsonschema_rs.validate(schema, query | {"filters": [one, ["contains", "source", ["x"]]]})
    for wrong in ([one] * 21, [["is", "event:page"]], [["equals", "event:page", ["/a"]]]):
        with pytest.raises(jsonschema_rs.ValidationError):
            jsonschema_rs.validate(schema, query | {"filters": wrong})


V2_QUERY = {"site_id": "0" * 24, "metrics": ["visitors"], "date_range": "7d"}


@pytest.mark.parametrize(
    "change",
    [
        {"filters": [["is", "event:page", []]]},
        {"order_by": [["visitors", "up"]]},
        {"order_by": [["visitors"]]},
        {"metrics": ["visitors", "visitors"]},
        {"dimensions": ["event:page", "event:page"]},
        {"date_range": "0d"},
        {"date_range": "367d"},
        {"date_range": "13mo"},
        {"date_range": "all"},
        {"date_range": ["2026-01-01"]},
        {"date_range": ["2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"]},
    ],
)
def test_a_v2_body_the_server_refuses_breaks_the_documents_schema(client, user, change):
    """The document's v2 body took bodies the server refuses (a filter without values, a
    direction other than asc or desc, a metric twice, date ranges it does not read): a client
    that validates before sending learned of them only from the 400."""
    project_id, _ = new_project(client, user=user)
    body = V2_QUERY | {"site_id": project_id} | change
    response = client.post("/api/v2/query", json=body, headers=auth(user))
    assert response.status_code == 400, response.text
    media = DOCUMENT["paths"]["/api/v2/query"]["post"]["requestBody"]["content"]
    with pytest.raises(jsonschema_rs.ValidationError):
        jsonschema_rs.validate(_resolve(media["application/json"]["schema"]), body)


@pytest.mark.parametrize(
    "change",
    [
        {"date_range": "366d"},
        {"date_range": "1d"},
        {"date_range": "12mo"},
        {"date_range": "day"},
        {"date_range": ["2026-01-01", "2026-01-31"]},
        {"order_by": [["visitors", "asc"]], "dimensions": ["event:page"]},
        {"order_by": None},
        {"filters": [["is", "event:page", [""]]]},
    ],
)
def test_a_v2_body_the_server_takes_meets_the_documents_schema(client, user, change):
    project_id, _ = new_project(client, user=user)
    body = V2_QUERY | {"site_id": project_id} | change
    response = client.post("/api/v2/query", json=body, headers=auth(user))
    assert response.status_code == 200, response.text
    media = DOCUMENT["paths"]["/api/v2/query"]["post"]["requestBody"]["content"]
    jsonschema_rs.validate(_resolve(media["application/json"]["schema"]), body)
