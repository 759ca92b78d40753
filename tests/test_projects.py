"""Projects and API keys: the session endpoints, their errors, tenant isolation, revocation."""

from __future__ import annotations

import re
import time

import pytest

from conftest import auth, new_project

ISO_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
OBJECT_ID = re.compile(r"^[0-9a-f]{24}$")
SESSION_ENDPOINTS = [
    ("GET", "/api/projects", None),
    ("POST", "/api/projects", {"name": "Site"}),
    ("GET", "/api/projects/keys?projectId=0123456789abcdef01234567", None),
    ("POST", "/api/projects/keys", {"projectId": "0123456789abcdef01234567"}),
    (
        "DELETE",
        "/api/projects/keys?projectId=0123456789abcdef01234567&keyId=0123456789abcdef01234567",
        None,
    ),
    ("GET", "/api/dashboard?projectId=0123456789abcdef01234567", None),
]


def call(client, method, url, body=None, headers=None):
    return client.request(method, url, json=body, headers=headers or {})


@pytest.mark.parametrize(("method", "url", "body"), SESSION_ENDPOINTS)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer "},
        {"authorization": "Bearer not.a.jwt"},
        {"authorization": "Basic dXNlcjpwdw=="},
        {"cookie": "tally_session=garbage"},
    ],
    ids=["none", "empty bearer", "garbage bearer", "basic", "garbage cookie"],
)
def test_session_endpoints_refuse_missing_or_bad_sessions(client, method, url, body, headers):
    response = call(client, method, url, body, headers)
    assert response.status_code == 401
    assert response.json() == {"error": "Unauthorized"}


@pytest.mark.parametrize(("method", "url", "body"), SESSION_ENDPOINTS)
def test_session_is_checked_before_the_body(client, method, url, body):
    response = client.request(
        method, url, content=b"{broken", headers={"content-type": "application/json"}
    )
    assert (response.status_code, response.json()) == (401, {"error": "Unauthorized"})


def test_create_and_list_projects(client, user):
    assert client.get("/api/projects", headers=auth(user)).json() == {"projects": []}
    created = client.post("/api/projects", json={"name": "Shop"}, headers=auth(user))
    assert created.status_code == 201
    body = created.json()
    assert set(body) == {"projectId", "apiKey", "keyId"}
    assert OBJECT_ID.match(body["projectId"]) and body["apiKey"].startswith("tk_")
    # keyId is the Default key's id: the one the key list shows, revocable by it.
    [default] = client.get(
        f"/api/projects/keys?projectId={body['projectId']}", headers=auth(user)
    ).json()["keys"]
    assert (default["id"], default["label"]) == (body["keyId"], "Default")
    second, _ = new_project(client, user=user, name="Blog")
    listed = client.get("/api/projects", headers=auth(user))
    assert listed.status_code == 200
    projects = listed.json()["projects"]
    assert [(p["id"], p["name"]) for p in projects] == [
        (body["projectId"], "Shop"),
        (second, "Blog"),
    ]
    assert all(ISO_MS.match(p["createdAt"]) for p in projects)


def test_cookie_session_is_accepted(client, user):
    from conftest import token

    response = client.get("/api/projects", headers={"cookie": f"tally_session={token(user)}"})
    assert response.status_code == 200


def test_users_see_only_their_projects(client, user):
    new_project(client, user=user)
    other = f"{user}-other"
    assert client.get("/api/projects", headers=auth(other)).json() == {"projects": []}


@pytest.mark.parametrize(
    ("name", "status"),
    [("ab", 201), ("x" * 60, 201), ("é日", 201), ("a", 400), ("x" * 61, 400), ("", 400)],
)
def test_project_name_length(client, user, name, status):
    response = client.post("/api/projects", json={"name": name}, headers=auth(user))
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"] == "Invalid payload"
        assert response.json()["details"][0]["path"] == "$.name"


@pytest.mark.parametrize(
    "body",
    [b"{}", b'{"name": 12}', b'{"name": null}', b"[]", b"{oops", b"", b'{"name": "ok", "x": 1}'],
)
def test_create_project_bad_bodies(client, user, body):
    response = client.post(
        "/api/projects", content=body, headers={**auth(user), "content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "Invalid payload"
    assert isinstance(response.json()["details"], list) and response.json()["details"]
    assert client.get("/api/projects", headers=auth(user)).json() == {"projects": []}


def test_default_key_is_listed_by_preview_only(client, user):
    project_id, key = new_project(client, user=user)
    response = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user))
    assert response.status_code == 200
    (listed,) = response.json()["keys"]
    assert set(listed) == {"id", "label", "keyPreview", "createdAt", "lastUsedAt"}
    assert listed["label"] == "Default"
    assert listed["keyPreview"] == f"{key[:7]}\u2026{key[-4:]}"
    assert listed["lastUsedAt"] is None
    assert ISO_MS.match(listed["createdAt"]) and OBJECT_ID.match(listed["id"])
    assert key not in response.text


def test_last_used_at_follows_collect(client, user):
    project_id, key = new_project(client, user=user)
    before = time.time()
    assert (
        client.post(
            "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key}
        ).status_code
        == 202
    )
    (listed,) = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)).json()[
        "keys"
    ]
    assert ISO_MS.match(listed["lastUsedAt"])
    from datetime import datetime

    used = datetime.fromisoformat(listed["lastUsedAt"].replace("Z", "+00:00")).timestamp()
    assert before - 1 <= used <= time.time() + 1


def test_additional_keys_with_and_without_label(client, user):
    project_id, _ = new_project(client, user=user)
    labelled = client.post(
        "/api/projects/keys", json={"projectId": project_id, "label": "CI"}, headers=auth(user)
    )
    assert labelled.status_code == 201
    assert set(labelled.json()) == {"apiKey", "id", "label", "keyPreview", "createdAt"}
    plain = client.post("/api/projects/keys", json={"projectId": project_id}, headers=auth(user))
    assert plain.status_code == 201
    # The answer describes the key exactly as the key list does (the list adds lastUsedAt).
    listed = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)).json()
    by_id = {k["id"]: k for k in listed["keys"]}
    for made, label in ((labelled.json(), "CI"), (plain.json(), "Untitled")):
        assert made["label"] == label
        assert made["keyPreview"] == f"{made['apiKey'][:7]}\u2026{made['apiKey'][-4:]}"
        assert ISO_MS.match(made["createdAt"])
        expected = {k: v for k, v in made.items() if k != "apiKey"}
        assert by_id[made["id"]] == {**expected, "lastUsedAt": None}
    # The id is enough to revoke the key just made.
    revoked = client.delete(
        f"/api/projects/keys?projectId={project_id}&keyId={plain.json()['id']}", headers=auth(user)
    )
    assert revoked.status_code == 204
    labels = [
        k["label"]
        for k in client.get(
            f"/api/projects/keys?projectId={project_id}", headers=auth(user)
        ).json()["keys"]
    ]
    assert labels == ["Default", "CI"]
    for new_key in (labelled.json()["apiKey"],):
        assert (
            client.post(
                "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": new_key}
            ).status_code
            == 202
        )


@pytest.mark.parametrize(
    ("label", "status"), [("x", 201), ("x" * 60, 201), ("", 400), ("x" * 61, 400), (5, 400)]
)
def test_key_label_length(client, user, label, status):
    project_id, _ = new_project(client, user=user)
    response = client.post(
        "/api/projects/keys", json={"projectId": project_id, "label": label}, headers=auth(user)
    )
    assert response.status_code == status, response.text


@pytest.mark.parametrize(
    "project_id",
    [
        "",
        "abc",
        "0123456789ABCDEF01234567",
        "0123456789abcdef0123456",
        "0123456789abcdef012345678",
        "zz23456789abcdef01234567",
    ],
)
def test_invalid_project_ids(client, user, project_id):
    for response in (
        client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)),
        client.get(f"/api/dashboard?projectId={project_id}", headers=auth(user)),
        client.delete(
            f"/api/projects/keys?projectId={project_id}&keyId=0123456789abcdef01234567",
            headers=auth(user),
        ),
    ):
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "Invalid query"
        assert response.json()["details"][0]["path"] == "$.projectId"
    body = client.post("/api/projects/keys", json={"projectId": project_id}, headers=auth(user))
    assert body.status_code == 400 and body.json()["error"] == "Invalid payload"


def test_missing_project_id(client, user):
    for url in ("/api/projects/keys", "/api/dashboard"):
        response = client.get(url, headers=auth(user))
        assert response.status_code == 400
        assert response.json()["error"] == "Invalid query"


@pytest.mark.parametrize(
    ("days", "status"),
    [
        ("1", 200),
        ("90", 200),
        ("0", 400),
        ("91", 400),
        ("-1", 400),
        ("7.5", 400),
        ("seven", 400),
        ("", 400),
    ],
)
def test_dashboard_days_bounds(client, user, days, status):
    project_id, _ = new_project(client, user=user)
    response = client.get(f"/api/dashboard?projectId={project_id}&days={days}", headers=auth(user))
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"] == "Invalid query"
        assert response.json()["details"][0]["path"] == "$.days"
    else:
        assert len(response.json()["timeline"]) == int(days)


def test_other_users_projects_are_not_found(client, user):
    project_id, _key = new_project(client, user=user)
    intruder = f"{user}-intruder"
    unknown = "0123456789abcdef01234567"
    for pid in (project_id, unknown):
        for response in (
            client.get(f"/api/projects/keys?projectId={pid}", headers=auth(intruder)),
            client.post("/api/projects/keys", json={"projectId": pid}, headers=auth(intruder)),
            client.get(f"/api/dashboard?projectId={pid}", headers=auth(intruder)),
            client.delete(
                f"/api/projects/keys?projectId={pid}&keyId={unknown}", headers=auth(intruder)
            ),
        ):
            assert response.status_code == 404, response.text
            assert response.json() == {"error": "Project not found"}
    # The owner still has exactly one key: the intruder created none.
    keys = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)).json()[
        "keys"
    ]
    assert len(keys) == 1


def test_revocation(client, user):
    project_id, key = new_project(client, user=user)
    listed = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)).json()[
        "keys"
    ]
    key_id = listed[0]["id"]
    assert (
        client.post(
            "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key}
        ).status_code
        == 202
    )
    revoked = client.delete(
        f"/api/projects/keys?projectId={project_id}&keyId={key_id}", headers=auth(user)
    )
    assert revoked.status_code == 204 and revoked.content == b""
    after = client.post(
        "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key}
    )
    assert (after.status_code, after.json()) == (401, {"error": "Invalid API key"})
    assert client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)).json() == {
        "keys": []
    }
    again = client.delete(
        f"/api/projects/keys?projectId={project_id}&keyId={key_id}", headers=auth(user)
    )
    assert (again.status_code, again.json()) == (404, {"error": "Key not found"})


def test_keys_of_another_project_cannot_be_revoked_through_mine(client, user):
    mine, _ = new_project(client, user=user)
    theirs, their_key = new_project(client, user=f"{user}-b")
    their_key_id = client.get(
        f"/api/projects/keys?projectId={theirs}", headers=auth(f"{user}-b")
    ).json()["keys"][0]["id"]
    response = client.delete(
        f"/api/projects/keys?projectId={mine}&keyId={their_key_id}", headers=auth(user)
    )
    assert (response.status_code, response.json()) == (404, {"error": "Key not found"})
    assert (
        client.post(
            "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": their_key}
        ).status_code
        == 202
    )


def test_health_and_openapi(client):
    health = client.get("/api/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    spec = client.get("/api/schema/openapi.json").json()
    paths = spec["paths"]
    assert {
        "/api/projects",
        "/api/projects/keys",
        "/api/collect",
        "/api/dashboard",
        "/api/health",
    } <= set(paths)
    assert set(paths["/api/projects/keys"]) >= {"get", "post", "delete"}
    assert "202" in paths["/api/collect"]["post"]["responses"]
    assert "401" in paths["/api/collect"]["post"]["responses"]


def test_unknown_route_and_method(client):
    assert client.get("/api/nope").json() == {"error": "Not found"}
    response = client.put("/api/projects", json={})
    assert response.status_code == 405 and response.json() == {"error": "Method not allowed"}


def test_ownership_yes_is_remembered_and_no_is_asked_again(client, user):
    """A worker remembers that a user owns a project (owners never change, projects are never
    deleted) but asks storage again after a no: the project may be created elsewhere meanwhile."""
    from tally.domain.ids import next_version, object_id, utcnow
    from tally.storage.projects import ProjectStore

    storage = client.app.state.storage
    asked: list[str] = []

    class Counted:  # the real storage, counting the questions put to it
        database = storage.database

        def query(self, sql, parameters=None):
            asked.append(sql)
            return storage.query(sql, parameters)

    worker = ProjectStore(Counted())  # type: ignore[arg-type]
    project_id = object_id()
    assert not worker.owns(user, project_id)
    storage.insert(  # created on another worker
        f"{storage.database}.projects",
        [[project_id], [user], ["Site"], [utcnow()], [next_version()]],
        ["id", "owner_id", "name", "created_at", "version"],
    )
    assert not worker.owns(f"{user}-other", project_id)
    assert worker.owns(user, project_id)
    assert len(asked) == 3
    assert worker.owns(user, project_id) and len(asked) == 3  # remembered
    assert not worker.owns(f"{user}-other", project_id) and len(asked) == 4  # asked again
