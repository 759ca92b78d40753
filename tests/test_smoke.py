"""The shortest path through the service: create a project, send events, read them back."""

from conftest import auth, new_project


def test_collect_then_dashboard(client):
    project_id, key = new_project(client)
    response = client.post(
        "/api/collect",
        json={"events": [{"name": "pageview", "path": "/", "visitorId": "v1", "sessionId": "s1"}]},
        headers={"x-api-key": key},
    )
    assert response.status_code == 202, response.text
    assert response.json() == {"accepted": 1}
    dashboard = client.get(f"/api/dashboard?projectId={project_id}", headers=auth("alice")).json()
    assert dashboard["summary"]["totalEvents"] == 1
    assert dashboard["topPaths"] == [{"path": "/", "views": 1}]
