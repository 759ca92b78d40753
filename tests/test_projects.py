"""Projects and API keys: the session endpoints, their errors, tenant isolation, revocation."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from conftest import auth, make_settings, new_project, running, stored


@pytest.fixture(scope="module")
def client(chdb_path, tmp_path_factory):
    """This module's own app and database. A project's deletion is a mutation of every table
    holding the project's rows, which rewrites each part they are in: on the database shared
    by the whole suite, which holds every test's events by then, each deletion here took about
    50 s in CI (5-9 s on a database of this module's projects alone)."""
    settings = make_settings(
        chdb_path, tmp_path_factory.mktemp("projects"), session_limit_per_user="1000000/second"
    )
    with running(settings) as test_client:
        yield test_client


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
    ("PATCH", "/api/projects", {"projectId": "0123456789abcdef01234567", "name": "New"}),
    ("DELETE", "/api/projects?projectId=0123456789abcdef01234567", None),
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


def test_last_used_at_with_a_stored_and_a_pending_use(client, user):
    # A stored last use (flushed) and a newer one still in memory: the later is shown (the
    # stored time came back without a zone and comparing the two was a 500).
    project_id, key = new_project(client, user=user)
    state = client.app.state

    def collect() -> None:
        sent = {"events": [{"name": "a"}]}
        assert client.post("/api/collect", json=sent, headers={"x-api-key": key}).status_code == 202

    collect()
    client.blocking_portal.call(state.registry.flush_usage)
    (stored_key,) = client.get(
        f"/api/projects/keys?projectId={project_id}", headers=auth(user)
    ).json()["keys"]
    time.sleep(0.01)
    collect()
    assert state.registry.pending_usage(stored_key["id"]) is not None
    response = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user))
    assert response.status_code == 200, response.text
    (listed,) = response.json()["keys"]
    assert ISO_MS.match(listed["lastUsedAt"]) and listed["lastUsedAt"] > stored_key["lastUsedAt"]


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
    ("label", "status"),
    [
        ("x", 201),
        ("x" * 60, 201),
        ("  " + "x" * 60 + "\t", 201),
        ("", 400),
        ("x" * 61, 400),
        (5, 400),
        (" ", 400),
        ("\u200b", 400),
        ("C\x00I", 400),
    ],
)
def test_key_label_length(client, user, label, status):
    project_id, _ = new_project(client, user=user)
    response = client.post(
        "/api/projects/keys", json={"projectId": project_id, "label": label}, headers=auth(user)
    )
    assert response.status_code == status, response.text


@pytest.mark.parametrize(
    ("label", "rule"),
    [
        ("   ", "1 to 60 characters once surrounding spaces are trimmed"),
        ("\t\n\u3000", "1 to 60 characters once surrounding spaces are trimmed"),
        ("\u200b\u200b", "visible character"),
        ("C\x00I", "control characters"),
        ("CI\x9f", "control characters"),
    ],
)
def test_blank_and_bad_labels_are_refused_as_names_are(client, user, label, rule):
    project_id, _ = new_project(client, user=user)
    message = invalid(
        client.post(
            "/api/projects/keys",
            json={"projectId": project_id, "label": label},
            headers=auth(user),
        ),
        "$.label",
    )
    assert rule in message
    listed = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)).json()
    assert [k["label"] for k in listed["keys"]] == ["Default"]


def test_labels_are_trimmed_and_an_absent_one_is_untitled(client, user):
    project_id, _ = new_project(client, user=user)
    made = [
        client.post("/api/projects/keys", json=body, headers=auth(user))
        for body in (
            {"projectId": project_id, "label": "  CI deploys\t"},
            {"projectId": project_id, "label": None},
            {"projectId": project_id},
        )
    ]
    assert [r.status_code for r in made] == [201, 201, 201]
    assert [r.json()["label"] for r in made] == ["CI deploys", "Untitled", "Untitled"]
    listed = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)).json()
    assert [k["label"] for k in listed["keys"]] == ["Default", "CI deploys", "Untitled", "Untitled"]


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
    assert set(paths["/api/projects"]) >= {"get", "post", "patch", "delete"}
    project = spec["components"]["schemas"]["Project"]
    assert set(project["required"]) == {"id", "name", "createdAt", "timezone", "excludeBots"}
    assert "202" in paths["/api/collect"]["post"]["responses"]
    assert "401" in paths["/api/collect"]["post"]["responses"]


def test_head_health_answers_as_get_without_a_body(client):
    got = client.get("/api/health")
    head = client.head("/api/health")
    assert (head.status_code, head.content) == (200, b"")
    assert head.headers["content-type"] == got.headers["content-type"] == "application/json"
    spec = client.get("/api/schema/openapi.json").json()
    assert set(spec["paths"]["/api/health"]) == {"get", "head"}


def test_head_answers_as_get_without_a_body_on_every_get_route(client):
    """RFC 9110 9.3.2: HEAD wherever GET is, the same status and headers, no body (it was 405
    everywhere but health and the pages)."""
    project_id, _ = new_project(client, user="head-owner")
    q = f"projectId={project_id}"
    spec = client.get("/api/schema/openapi.json").json()
    for path in (
        "/api/projects",
        f"/api/projects/keys?{q}",
        f"/api/dashboard?{q}",
        f"/api/breakdown?{q}&by=path",
        f"/api/live?{q}",
        f"/api/export?{q}&from=2026-01-01&to=2026-01-02",
        f"/api/dashboard?{q}&days=0",  # 400
    ):
        for user in ("head-owner", "head-stranger"):
            got = client.get(path, headers=auth(user))
            head = client.head(path, headers=auth(user))
            assert head.status_code == got.status_code, (path, user, head.text)
            assert head.content == b"", path
            for name in ("content-type", "content-disposition"):
                assert head.headers.get(name) == got.headers.get(name), (path, name)
        assert "head" in spec["paths"][path.split("?")[0]], path
    assert client.head(f"/api/dashboard?{q}").status_code == 401  # no session


def test_unknown_route_and_method(client):
    assert client.get("/api/nope").json() == {"error": "Not found"}
    # under the docs too, where Litestar answers with an HTML page of its own
    for path in ("redoc", "elements", "oauth2-redirect.html", "whatever", "openapi.yml", "%FF"):
        response = client.get(f"/api/schema/{path}")
        assert (response.status_code, response.json()) == (404, {"error": "Not found"}), path
    assert client.get("/api/schema").status_code == 200
    assert client.get("/api/schema/swagger").status_code == 200
    response = client.put("/api/projects", json={})
    assert response.status_code == 405 and response.json() == {"error": "Method not allowed"}


def test_ownership_yes_is_remembered_for_a_while_and_no_is_asked_again(client, user):
    """A worker remembers that a user owns a project, with its settings, for ``settings_ttl``
    (a clock injected here), but asks storage again after a no: the project may be created
    elsewhere meanwhile."""
    from tally.domain.ids import next_version, object_id, utcnow
    from tally.domain.projects import ProjectSettings
    from tally.storage.projects import ProjectStore

    storage = client.app.state.storage
    asked: list[str] = []
    now = [1000.0]

    class Counted:  # the real storage, counting the questions put to it
        database = storage.database
        cluster = storage.cluster

        def query(self, sql, parameters=None):
            asked.append(sql)
            return storage.query(sql, parameters)

        def insert(self, *args, **kwargs):
            return storage.insert(*args, **kwargs)

    worker = ProjectStore(Counted(), settings_ttl=5.0, clock=lambda: now[0])  # type: ignore[arg-type]
    project_id = object_id()
    assert not worker.owns(user, project_id)
    storage.insert(  # created on another worker, as schema 003 wrote projects
        f"{storage.database}.projects",
        [[project_id], [user], ["Site"], [utcnow()], [next_version()]],
        ["id", "owner_id", "name", "created_at", "version"],
    )
    assert not worker.owns(f"{user}-other", project_id)
    assert worker.owned_settings(user, project_id) == ProjectSettings("UTC", True)
    assert len(asked) == 3
    now[0] += 4.9
    assert worker.owns(user, project_id) and len(asked) == 3  # remembered
    assert not worker.owns(f"{user}-other", project_id) and len(asked) == 4  # asked again
    now[0] += 0.2
    assert worker.owns(user, project_id) and len(asked) == 5  # expired: asked again


def test_a_read_older_than_a_change_here_is_not_remembered(client, user):
    # A request read the project's row while a PATCH (or DELETE) on this worker wrote a new one:
    # the PATCH remembered its settings, then the read remembered the row it had read before, so
    # the worker answered in the old zone (and bot rule) for the TTL after the PATCH's 200.
    # Here the PATCH runs, on the real engine, just after the read and before it is remembered.
    from tally.domain.projects import ProjectSettings
    from tally.storage.projects import ProjectStore

    storage = client.app.state.storage
    now = [0.0]
    worker = ProjectStore(storage, settings_ttl=5.0, clock=lambda: now[0])
    project, _, _ = worker.create_project(user, "Site", "Pacific/Chatham")
    now[0] += 5.0  # forgotten: the next request reads the row
    read = worker.get_project

    def read_then_patch(owner: str, project_id: str) -> Any:
        row = read(owner, project_id)
        worker.get_project = read  # the PATCH's own read is a plain one
        worker.update_project(owner, project_id, timezone="America/New_York", exclude_bots=False)
        return row

    worker.get_project = read_then_patch  # type: ignore[method-assign]
    # The request that began before the PATCH answers what it read ...
    assert worker.owned_settings(user, project.id) == ProjectSettings("Pacific/Chatham", True)
    # ... and every later one the PATCH's settings, at once.
    assert worker.owned_settings(user, project.id) == ProjectSettings("America/New_York", False)

    # The same with a DELETE: a row read before it is not served after its 204.
    now[0] += 5.0

    def read_then_delete(owner: str, project_id: str) -> Any:
        row = read(owner, project_id)
        worker.get_project = read
        worker.mark_deleted(owner, row)
        return row

    worker.get_project = read_then_delete  # type: ignore[method-assign]
    assert worker.owned_settings(user, project.id) is not None
    assert worker.owned_settings(user, project.id) is None


def test_owned_settings_follow_changes_here_at_once_and_elsewhere_within_the_ttl(client, user):
    from tally.domain.projects import ProjectSettings
    from tally.storage.projects import ProjectStore

    storage = client.app.state.storage
    now = [0.0]
    here = ProjectStore(storage, settings_ttl=5.0, clock=lambda: now[0])
    elsewhere = ProjectStore(storage)  # another process
    project, _, _ = here.create_project(user, "Site", "Europe/Berlin")
    assert here.owned_settings(user, project.id) == ProjectSettings("Europe/Berlin", True)
    assert here.owned_settings(f"{user}-b", project.id) is None

    here.update_project(user, project.id, timezone="Asia/Kathmandu", exclude_bots=False)
    assert here.owned_settings(user, project.id) == ProjectSettings("Asia/Kathmandu", False)

    elsewhere.update_project(user, project.id, timezone="Pacific/Chatham")
    assert here.owned_settings(user, project.id) == ProjectSettings("Asia/Kathmandu", False)
    now[0] += 5.0
    assert here.owned_settings(user, project.id) == ProjectSettings("Pacific/Chatham", False)

    elsewhere.mark_deleted(user, elsewhere.get_project(user, project.id))
    assert here.owns(user, project.id)  # remembered until the TTL runs out
    now[0] += 5.0
    assert here.owned_settings(user, project.id) is None
    assert not here.owns(user, project.id)

    other, _, _ = here.create_project(user, "Other")
    assert here.owns(user, other.id)
    here.mark_deleted(user, here.get_project(user, other.id))
    assert not here.owns(user, other.id)  # this process's own delete: forgotten at once


# --- names, time zones, PATCH and DELETE ---------------------------------------------------------
def listed_projects(client, user):
    response = client.get("/api/projects", headers=auth(user))
    assert response.status_code == 200
    return {p["id"]: p for p in response.json()["projects"]}


def invalid(response, path):
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "Invalid payload"
    assert [d["path"] for d in body["details"]] == [path], body
    return body["details"][0]["message"]


@pytest.mark.parametrize(
    ("name", "stored_as"),
    [("  Shop  ", "Shop"), ("\tBlog\n", "Blog"), (" " + "x" * 60 + " ", "x" * 60), ("a b", "a b")],
)
def test_names_are_trimmed(client, user, name, stored_as):
    project_id, _ = new_project(client, user=user, name=name)
    assert listed_projects(client, user)[project_id]["name"] == stored_as
    renamed = client.patch(
        "/api/projects",
        json={"projectId": project_id, "name": f"  {stored_as[:-1]}z\t"},
        headers=auth(user),
    )
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == stored_as[:-1] + "z"


def test_the_documented_name_pattern_is_the_rule():
    """The OpenAPI pattern and the server's check agree on every string (ECMAScript whitespace,
    which is what JSON Schema validators and the page's String.trim use)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tally.domain.projects import NAME_PATTERN, InvalidProject, clean_name

    pattern = re.compile(NAME_PATTERN)
    spaces = st.sampled_from([" ", "\t", "\n", "\u3000", "\u00a0", "\x1c", "\x85", "\ufeff"])

    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.one_of(spaces, st.characters()), max_size=70).map("".join))
    def agree(name):
        try:
            clean_name(name)
            accepted = True
        except InvalidProject:
            accepted = False
        assert bool(pattern.match(name)) == accepted, repr(name)

    agree()
    # Not ECMAScript whitespace, so not trimmed: a control character, refused.
    with pytest.raises(InvalidProject, match="control characters"):
        clean_name("\x1cab\x1c")


def test_the_documented_label_pattern_is_the_rule():
    """The same for key labels, and for the characters both refuse: control characters
    anywhere once trimmed, and nothing but invisible characters."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from tally.domain.projects import LABEL_PATTERN, InvalidProject, clean_label

    pattern = re.compile(LABEL_PATTERN)
    odd = st.sampled_from(
        [
            " ",
            "\t",
            "\u3000",
            "\ufeff",
            "\x00",
            "\x1c",
            "\x7f",
            "\x85",
            "\u200b",
            "\u2060",
            "\U000e0020",
        ]
    )

    @settings(max_examples=600, deadline=None)
    @given(st.lists(st.one_of(odd, st.characters()), max_size=70).map("".join))
    def agree(label):
        try:
            clean_label(label)
            accepted = True
        except InvalidProject:
            accepted = False
        assert bool(pattern.match(label)) == accepted, repr(label)

    agree()


def test_format_characters_are_this_pythons_cf():
    """Format characters are looked for in planes 0, 1 and 14 only: all that Unicode has."""
    import unicodedata

    from tally.domain.projects import FORMAT_CHARACTERS

    every = "".join(chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf")
    assert every == FORMAT_CHARACTERS


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("   ", "2 to 60 characters"),
        ("\t\n", "2 to 60 characters"),
        (" a ", "2 to 60 characters"),
        ("", "2 to 60 characters"),
        ("a", "2 to 60 characters"),
        ("x" * 61, "2 to 60 characters"),
        (" " + "x" * 61 + " ", "2 to 60 characters"),
        ("\u200b\u200b", "visible character"),  # zero-width spaces only
        ("\u2060\u200b\u00a0\u200d", "visible character"),  # format characters and a space
        ("\ufeff\u200e\u200f\ufeff", "visible character"),
        ("\ufe0f\ufe0f", "visible character"),  # variation selectors
        ("\u3164\u3164", "visible character"),  # Hangul fillers
        ("\u115f\u1160", "visible character"),
        ("\uffa0\uffa0", "visible character"),
        ("\u034f\u034f", "visible character"),  # combining grapheme joiners
        ("\u0301\u0308\u20dd", "visible character"),  # combining marks with no letter
        ("Shop\x00", "control characters"),  # NUL
        ("Sh\x07op", "control characters"),
        ("Sh\top", "control characters"),  # a tab inside (around it, it is trimmed)
        ("Shop\x85", "control characters"),  # C1
    ],
)
def test_blank_and_bad_names_are_refused(client, user, name, rule):
    message = invalid(
        client.post("/api/projects", json={"name": name}, headers=auth(user)), "$.name"
    )
    assert rule in message
    assert listed_projects(client, user) == {}
    project_id, _ = new_project(client, user=user, name="Kept")
    patched = client.patch(
        "/api/projects", json={"projectId": project_id, "name": name}, headers=auth(user)
    )
    invalid(patched, "$.name")
    assert listed_projects(client, user)[project_id]["name"] == "Kept"


def test_new_projects_have_the_defaults_and_the_zone_given(client, user):
    plain, _ = new_project(client, user=user)
    zoned = client.post(
        "/api/projects", json={"name": "NY", "timezone": "America/New_York"}, headers=auth(user)
    )
    assert zoned.status_code == 201 and set(zoned.json()) == {"projectId", "apiKey", "keyId"}
    projects = listed_projects(client, user)
    assert set(projects[plain]) == {"id", "name", "createdAt", "timezone", "excludeBots"}
    assert (projects[plain]["timezone"], projects[plain]["excludeBots"]) == ("UTC", True)
    ny = projects[zoned.json()["projectId"]]
    assert (ny["timezone"], ny["excludeBots"]) == ("America/New_York", True)


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus", "utc", "Europe/berlin", "localtime", "+05:30", "", "EST 5", "x" * 65]
)
def test_unknown_zones_are_refused(client, user, zone):
    message = invalid(
        client.post("/api/projects", json={"name": "Site", "timezone": zone}, headers=auth(user)),
        "$.timezone",
    )
    if len(zone) <= 64:
        assert message == "must be an IANA time zone such as Europe/Berlin"
    assert listed_projects(client, user) == {}
    project_id, _ = new_project(client, user=user)
    invalid(
        client.patch(
            "/api/projects", json={"projectId": project_id, "timezone": zone}, headers=auth(user)
        ),
        "$.timezone",
    )
    assert listed_projects(client, user)[project_id]["timezone"] == "UTC"


def test_a_zone_the_engine_does_not_know_is_refused(client, user):
    """Python's zone list and the engine's could differ (different tzdata releases); a zone only
    Python knows is refused, since the dashboard computes its days in the engine."""
    store = client.app.state.store
    known = store._zones
    assert store.zone_supported("Asia/Kathmandu") and not store.zone_supported("Mars/Olympus")
    from tally.domain import projects as rules

    rules.iana_zones.cache_clear()
    try:
        import zoneinfo
        from unittest import mock

        with mock.patch.object(
            zoneinfo, "available_timezones", return_value={"UTC", "Mars/Olympus"}
        ):
            message = invalid(
                client.post(
                    "/api/projects",
                    json={"name": "Site", "timezone": "Mars/Olympus"},
                    headers=auth(user),
                ),
                "$.timezone",
            )
    finally:
        rules.iana_zones.cache_clear()
    assert "unknown to ClickHouse" in message
    assert "Mars/Olympus" not in known


@pytest.mark.parametrize(
    "zone",
    [
        "UTC",
        "Europe/Berlin",
        "America/New_York",
        "Asia/Kolkata",
        "Asia/Kathmandu",
        "Australia/Lord_Howe",
        "Pacific/Chatham",
        "America/Argentina/Buenos_Aires",
    ],
)
def test_zone_round_trip(client, user, zone):
    project_id, _ = new_project(client, user=user)
    patched = client.patch(
        "/api/projects", json={"projectId": project_id, "timezone": zone}, headers=auth(user)
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["timezone"] == zone
    assert listed_projects(client, user)[project_id] == patched.json()
    store = client.app.state.store
    assert store.owned_settings(user, project_id).timezone == zone


def test_patch_changes_only_the_fields_given(client, user):
    project_id, key = new_project(client, user=user, name="Shop")
    before = listed_projects(client, user)[project_id]

    def patch(**fields):
        response = client.patch(
            "/api/projects", json={"projectId": project_id, **fields}, headers=auth(user)
        )
        assert response.status_code == 200, response.text
        assert response.json() == listed_projects(client, user)[project_id]
        return response.json()

    assert patch() == before
    assert patch(name=" Store ") == {**before, "name": "Store"}
    assert patch(timezone="Europe/Berlin") == {
        **before,
        "name": "Store",
        "timezone": "Europe/Berlin",
    }
    after = patch(excludeBots=False)
    assert after == {**before, "name": "Store", "timezone": "Europe/Berlin", "excludeBots": False}
    assert patch(excludeBots=True, name="Shop", timezone="UTC") == before
    assert after["createdAt"] == before["createdAt"] and after["id"] == project_id
    # the project keeps working: its key, its dashboard
    ok = client.post("/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key})
    assert ok.status_code == 202
    dashboard = client.get(f"/api/dashboard?projectId={project_id}", headers=auth(user))
    assert dashboard.status_code == 200 and dashboard.json()["summary"]["totalEvents"] == 1


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (b'{"projectId": "0123456789abcdef01234567", "excludeBots": "yes"}', "$.excludeBots"),
        (b'{"projectId": "0123456789abcdef01234567", "timezone": 5}', "$.timezone"),
        (b'{"projectId": "0123456789abcdef01234567", "name": null, "x": 1}', "$.x"),
        (b'{"projectId": "0123456789ABCDEF01234567"}', "$.projectId"),
        (b'{"name": "Shop"}', "$.projectId"),
        (b"{oops", "$"),
        (b"", "$"),
    ],
)
def test_patch_bad_bodies(client, user, body, path):
    response = client.patch(
        "/api/projects", content=body, headers={**auth(user), "content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "Invalid payload"
    assert response.json()["details"][0]["path"] == path


def test_other_users_cannot_change_or_delete_a_project(client, user):
    project_id, key = new_project(client, user=user, name="Mine")
    intruder = f"{user}-intruder"
    unknown = "0123456789abcdef01234567"
    for pid in (project_id, unknown):
        for response in (
            client.patch(
                "/api/projects",
                json={"projectId": pid, "name": "Theirs", "timezone": "Asia/Tokyo"},
                headers=auth(intruder),
            ),
            client.delete(f"/api/projects?projectId={pid}", headers=auth(intruder)),
        ):
            assert (response.status_code, response.json()) == (404, {"error": "Project not found"})
    mine = listed_projects(client, user)[project_id]
    assert (mine["name"], mine["timezone"]) == ("Mine", "UTC")
    ok = client.post("/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key})
    assert ok.status_code == 202


@pytest.mark.parametrize("query", ["", "?projectId=", "?projectId=abc", "?projectId=" + "A" * 24])
def test_delete_needs_a_project_id(client, user, query):
    response = client.delete(f"/api/projects{query}", headers=auth(user))
    assert response.status_code == 400 and response.json()["error"] == "Invalid query"
    detail = response.json()["details"][0]
    assert detail["path"] == "$.projectId" or "projectId" in detail["message"], detail


# Every table that holds a project's rows and that its deletion empties (api_keys keeps them,
# revoked). A rollup added later must be added here: the test below compares this with what the
# service finds.
PROJECT_TABLES = {
    "events",
    "events_quarter",
    "visitors_quarter",
    "sessions_quarter",
    "audience_quarter",
    "session_values",
    "events_daily",
    "events_hourly",
    "paths_daily",
    "referrers_daily",
    "clients_daily",
    "visitors_daily",
    "sessions_daily",
    "session_days",
    "event_visitors",
    "api_key_usage",
}


def fill(client, user, key):
    """Events that give the project rows in every table, and a stored last use of its key."""
    events = [
        {
            "name": "pageview",
            "path": "/",
            "referrer": "https://ref.example/",
            "sessionId": "s1",
            "visitorId": "v1",
            "metadata": {"browser": "Firefox"},
        },
        {"name": "pageview", "path": "/b", "sessionId": "s1", "visitorId": "v1"},
        {"name": "signup", "visitorId": "v2", "occurredAt": "2026-01-02T03:04:05Z"},
        {
            "name": "session_end",
            "sessionId": "s1",
            "visitorId": "v1",
            "metadata": {"durationMs": 1200},
        },
    ]
    response = client.post("/api/collect", json={"events": events}, headers={"x-api-key": key})
    assert response.status_code == 202, response.text


def rows_per_table(client, project_id):
    """Rows per table as merged (FINAL), so that background merges do not change the counts."""
    return {
        table: stored(
            client,
            f"SELECT count() FROM {{db}}.{table} WHERE project_id = {{p:String}} "
            "SETTINGS final = 1",
            p=project_id,
        )[0][0]
        for table in sorted(PROJECT_TABLES)
    }


def test_delete_removes_the_projects_rows_from_every_table_and_no_one_elses(client, user):
    from tally.storage.purge import project_tables

    storage = client.app.state.storage
    found = {t.removesuffix("_local") for t in project_tables(storage)}
    assert found == PROJECT_TABLES  # what the service finds: every table, api_keys kept
    doomed, doomed_key = new_project(client, user=user, name="Doomed")
    kept, kept_key = new_project(client, user=user, name="Kept")
    neighbour, neighbour_key = new_project(client, user=f"{user}-b", name="Neighbour")
    for key in (doomed_key, kept_key, neighbour_key):
        fill(client, user, key)
    from tally.domain.ids import utcnow

    for project_id, owner in ((doomed, user), (kept, user), (neighbour, f"{user}-b")):
        (listed,) = client.get(
            f"/api/projects/keys?projectId={project_id}", headers=auth(owner)
        ).json()["keys"]
        client.app.state.store.record_usage({listed["id"]: (project_id, utcnow())})
    before = {p: rows_per_table(client, p) for p in (doomed, kept, neighbour)}
    for project_id, counts in before.items():
        assert all(n > 0 for n in counts.values()), (project_id, counts)

    response = client.delete(f"/api/projects?projectId={doomed}", headers=auth(user))
    assert response.status_code == 204 and response.content == b""

    assert rows_per_table(client, doomed) == dict.fromkeys(PROJECT_TABLES, 0)
    assert rows_per_table(client, kept) == before[kept]
    assert rows_per_table(client, neighbour) == before[neighbour]
    # the key rows stay, revoked: that is how other processes learn of it
    keys = stored(
        client,
        "SELECT count(), countIf(revoked_at IS NOT NULL) FROM {db}.api_keys FINAL "
        "WHERE project_id = {p:String}",
        p=doomed,
    )
    assert keys == [(1, 1)]
    # the project's row stays too, marked
    marked = stored(
        client,
        "SELECT name, deleted_at IS NOT NULL FROM {db}.projects FINAL WHERE id = {p:String}",
        p=doomed,
    )
    assert marked == [("Doomed", 1)]


def test_after_delete_keys_fail_at_once_and_the_project_is_gone(client, user):
    project_id, key = new_project(client, user=user)
    second = client.post(
        "/api/projects/keys", json={"projectId": project_id, "label": "CI"}, headers=auth(user)
    ).json()["apiKey"]
    other_id, other_key = new_project(client, user=user, name="Other")
    for k in (key, second):
        ok = client.post("/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": k})
        assert ok.status_code == 202
    assert (
        client.get(f"/api/dashboard?projectId={project_id}", headers=auth(user)).status_code == 200
    )

    assert (
        client.delete(f"/api/projects?projectId={project_id}", headers=auth(user)).status_code
        == 204
    )

    for k in (key, second):
        refused = client.post(
            "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": k}
        )
        assert (refused.status_code, refused.json()) == (401, {"error": "Invalid API key"})
        beacon = client.post(f"/api/collect?apiKey={k}", content=b'{"events":[{"name":"a"}]}')
        assert beacon.status_code == 401
    not_found = (404, {"error": "Project not found"})
    for response in (
        client.get(f"/api/dashboard?projectId={project_id}", headers=auth(user)),
        client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)),
        client.post("/api/projects/keys", json={"projectId": project_id}, headers=auth(user)),
        client.patch(
            "/api/projects", json={"projectId": project_id, "name": "Back"}, headers=auth(user)
        ),
        client.delete(f"/api/projects?projectId={project_id}", headers=auth(user)),
    ):
        assert (response.status_code, response.json()) == not_found
    assert list(listed_projects(client, user)) == [other_id]
    ok = client.post(
        "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": other_key}
    )
    assert ok.status_code == 202


def test_another_process_refuses_the_keys_after_its_next_refresh(client, user):
    """Other processes learn of the revoked keys from the api_keys rows, with their usual
    refresh (TALLY_KEY_REFRESH_SECONDS)."""
    import asyncio

    from tally.domain.ids import hash_key
    from tally.storage.keys import KeyRegistry
    from tally.storage.projects import ProjectStore

    project_id, key = new_project(client, user=user)
    registry = KeyRegistry(ProjectStore(client.app.state.storage))  # another worker's

    async def resolve():
        await registry.refresh()
        return registry._live.get(hash_key(key))

    assert asyncio.run(resolve()) is not None
    assert (
        client.delete(f"/api/projects?projectId={project_id}", headers=auth(user)).status_code
        == 204
    )
    assert asyncio.run(resolve()) is None


def test_cors_allows_patch(client):
    response = client.options(
        "/api/projects",
        headers={
            "origin": "https://app.example",
            "access-control-request-method": "PATCH",
            "access-control-request-headers": "content-type, authorization",
        },
    )
    assert response.status_code == 204
    assert "PATCH" in response.headers["access-control-allow-methods"]


def test_delete_removes_events_acknowledged_but_not_yet_loaded(make_client, user):
    # A 202 means "in the ingest log"; the log is loaded a seal age later. A site still sending
    # traffic when it is deleted left its last events stored after the purge.
    with make_client(log_seal_age_ms=600_000) as client:
        client.wait_for_load = False  # the loader alone (the seal age: ten minutes)
        doomed, doomed_key = new_project(client, user=user, name="Doomed")
        kept, kept_key = new_project(client, user=user, name="Kept")
        for key in (doomed_key, kept_key):
            fill(client, user, key)
        assert rows_per_table(client, doomed)["events"] == 0  # acknowledged, not loaded yet

        response = client.delete(f"/api/projects?projectId={doomed}", headers=auth(user))
        assert response.status_code == 204

        client.load()
        assert rows_per_table(client, doomed) == dict.fromkeys(PROJECT_TABLES, 0)
        # the other project's acknowledged events were loaded with them, once
        assert rows_per_table(client, kept)["events"] == 4


def test_delete_waits_for_the_log_and_answers_503_while_storage_refuses_it(
    make_client, user, tmp_path, monkeypatch
):
    from tally.http import controllers

    monkeypatch.setattr(controllers, "DELETE_LOAD_TIMEOUT", 1.0)
    fault = tmp_path / "fault"
    with make_client(
        fault_file=str(fault), log_seal_age_ms=600_000, load_retry_min_ms=10, load_retry_max_ms=50
    ) as client:
        client.wait_for_load = False
        project_id, key = new_project(client, user=user)
        fault.write_text("fail")  # every INSERT is refused
        fill(client, user, key)

        refused = client.delete(f"/api/projects?projectId={project_id}", headers=auth(user))
        assert (refused.status_code, refused.json()) == (503, {"error": "Storage unavailable"})
        # its keys stopped working; the project is still listed, so it can be deleted again
        assert (
            client.post(
                "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key}
            ).status_code
            == 401
        )
        listed = client.get("/api/projects", headers=auth(user)).json()["projects"]
        assert [p["id"] for p in listed] == [project_id]

        fault.unlink()
        monkeypatch.setattr(controllers, "DELETE_LOAD_TIMEOUT", 120.0)  # ClickHouse takes it now
        again = client.delete(f"/api/projects?projectId={project_id}", headers=auth(user))
        assert again.status_code == 204
        assert rows_per_table(client, project_id) == dict.fromkeys(PROJECT_TABLES, 0)


def test_a_key_revoked_while_its_request_was_read_is_refused(client, user):
    from tally.domain.ids import hash_key
    from tally.http.auth import Unauthorized
    from tally.http.collect_fast import accept

    project_id, key = new_project(client, user=user)
    state = client.app.state
    record = state.registry.cached(hash_key(key))  # what the request was let in with
    assert record is not None
    (listed,) = client.get(f"/api/projects/keys?projectId={project_id}", headers=auth(user)).json()[
        "keys"
    ]
    revoked = client.delete(
        f"/api/projects/keys?projectId={project_id}&keyId={listed['id']}", headers=auth(user)
    )
    assert revoked.status_code == 204
    acknowledged = state.ingest.acknowledged
    with pytest.raises(Unauthorized, match="Invalid API key"):
        client.blocking_portal.call(accept, state, record, [], "127.0.0.1", "")
    assert state.ingest.acknowledged == acknowledged


# --- changes racing a deletion ------------------------------------------------------------------
def test_patches_and_new_keys_racing_a_deletion_never_outlive_it(tmp_path):
    """PATCHes and key creations sent while the project is being deleted: once the DELETE has
    answered 204 the project stays gone (not listed, 404, also after a restart) and every key
    made meanwhile answers 401. (A PATCH that read the row before the marker and wrote it after
    brought the project back; a key written after the keys were revoked kept working.)"""
    import asyncio

    import httpx

    from conftest import token
    from served import Server

    headers = {"authorization": f"Bearer {token('racer')}"}
    data = tmp_path

    async def race(url: str, project_id: str) -> list[str]:
        made: list[str] = []
        done = asyncio.Event()
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as http:

            async def patcher(bots: bool) -> None:
                while not done.is_set():
                    body = {"projectId": project_id, "excludeBots": bots, "name": f"P{bots}"}
                    answer = await http.patch("/api/projects", json=body)
                    assert answer.status_code in (200, 404), answer.text

            async def key_maker() -> None:
                while not done.is_set():
                    answer = await http.post("/api/projects/keys", json={"projectId": project_id})
                    assert answer.status_code in (201, 404), answer.text
                    if answer.status_code == 201:
                        made.append(answer.json()["apiKey"])

            async def deleter() -> None:
                await asyncio.sleep(0.2)
                answer = await http.delete(f"/api/projects?projectId={project_id}")
                assert answer.status_code == 204, answer.text
                done.set()

            await asyncio.gather(patcher(True), patcher(False), key_maker(), key_maker(), deleter())
        return made

    def gone(url: str, project_id: str, keys: list[str]) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            listed = http.get("/api/projects", headers=headers).json()["projects"]
            assert project_id not in {p["id"] for p in listed}
            dash = http.get(f"/api/dashboard?projectId={project_id}", headers=headers)
            assert dash.status_code == 404
            for key in keys:
                refused = http.post(
                    "/api/collect", json={"events": [{"name": "a"}]}, headers={"x-api-key": key}
                )
                assert refused.status_code == 401, key

    served = Server(data)
    rounds: list[tuple[str, list[str]]] = []
    try:
        for n in range(5):
            project_id, key = served.new_project("racer", f"Race {n}")
            made = asyncio.run(race(served.url, project_id))
            rounds.append((project_id, [key, *made]))
            gone(served.url, project_id, [key, *made])
    finally:
        served.stop()
    again = Server(data)
    try:
        for project_id, keys in rounds:
            gone(again.url, project_id, keys)
    finally:
        again.stop()


def test_a_deletion_outlives_a_stale_patch_of_another_process(client, user, monkeypatch):
    """Another worker read the project before the deletion and writes its PATCH after it: the
    deleted marker's version is higher than any later write's, so the project stays deleted,
    in FINAL reads and after merges."""
    from tally.storage.projects import ProjectStore

    project_id, _ = new_project(client, user=user)
    other = ProjectStore(client.app.state.storage)  # another worker's
    stale = other.get_project(user, project_id)
    deleted = client.delete(f"/api/projects?projectId={project_id}", headers=auth(user))
    assert deleted.status_code == 204
    monkeypatch.setattr(other, "get_project", lambda owner, pid: stale)  # its read came first
    assert other.update_project(user, project_id, name="Back again") is not None
    monkeypatch.undo()
    storage = client.app.state.storage
    # merged: still deleted (in cluster mode the rows sit in the local table)
    local = "projects_local" if storage.cluster else "projects"
    storage.command(f"OPTIMIZE TABLE {storage.database}.{local} FINAL")
    assert other.get_project(user, project_id) is None
    assert project_id not in listed_projects(client, user)
    response = client.get(f"/api/dashboard?projectId={project_id}", headers=auth(user))
    assert response.status_code == 404


def test_a_key_made_while_another_process_deletes_the_project_is_revoked(client, user):
    """The key is written after another worker's deletion revoked the project's keys (its
    ownership check came first): the key is revoked at once and the answer is 404."""
    from tally.storage.projects import ProjectStore

    project_id, _ = new_project(client, user=user)
    store = client.app.state.store
    project = store.get_project(user, project_id)
    write_key = store.create_key

    def deleted_meanwhile(pid: str, label: str):
        ProjectStore(store.storage).mark_deleted(user, project)  # the other worker's marker
        return write_key(pid, label)

    store.create_key = deleted_meanwhile
    try:
        body = {"projectId": project_id, "label": "late"}
        response = client.post("/api/projects/keys", json=body, headers=auth(user))
    finally:
        del store.create_key
    assert (response.status_code, response.json()) == (404, {"error": "Project not found"})
    late = stored(
        client,
        "SELECT count(), countIf(revoked_at IS NOT NULL) FROM {db}.api_keys FINAL "
        "WHERE project_id = {p:String} AND label = 'late'",
        p=project_id,
    )
    assert late == [(1, 1)]
