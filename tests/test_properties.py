"""Property tests (hypothesis): for random valid event batches the dashboard equals the reference
model of CONTRACT.md; random invalid batches are refused with details and store nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import auth, new_project, stored
from reference import Sent, dashboard

# Events are placed before this midnight (UTC) and asked for by whole past days (from/to): the
# days do not move while the test runs, whatever the time (the module was skipped, all 19 tests,
# within 30 minutes after and 10 before midnight, when it asked for the last ``days`` days).
MIDNIGHT = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)

# Text as users send it: unicode of every kind, including RTL, emoji and NUL.
text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=24
)
names = st.one_of(
    st.sampled_from(["pageview", "pageview", "session_end", "signup"]), text.filter(bool)
)
durations = st.one_of(
    st.none(),
    st.integers(-10, 10**7),
    st.floats(0, 1e7, allow_nan=False, allow_infinity=False),
    st.just("long"),
)


@st.composite
def events(draw) -> list[Sent]:
    offsets = draw(
        st.lists(st.integers(60_000, 6 * 86_400_000), min_size=1, max_size=60, unique=True)
    )
    out = []
    for offset in offsets:
        name = draw(names)
        metadata = {}
        if name == "session_end":
            duration = draw(durations)
            if duration is not None:
                metadata["durationMs"] = duration
        out.append(
            Sent(
                name=name,
                occurred_at=MIDNIGHT - timedelta(milliseconds=offset),
                path=draw(st.one_of(st.just(""), st.sampled_from(["/", "/a", "/ü"]), text)),
                referrer=draw(st.one_of(st.just(""), text)),
                session_id=draw(
                    st.sampled_from(["", "s1", "s2", "s3", "s\u05e9\u05dc\u05d5\u05dd"])
                ),
                visitor_id=draw(st.sampled_from(["", "v1", "v2", "🦊"])),
                browser=draw(st.sampled_from(["Chrome", "Firefox", "Ünï"])),
                device_type=draw(st.sampled_from(["desktop", "mobile"])),
                metadata=metadata,
            )
        )
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(batch=events(), days=st.sampled_from([1, 3, 7]))
def test_dashboard_equals_reference_model(client, batch, days):
    project_id, key = new_project(client, user="prop")
    sent = datetime.now(UTC).replace(microsecond=0)
    response = client.post(
        "/api/collect", json={"events": [e.payload() for e in batch]}, headers={"x-api-key": key}
    )
    assert response.status_code == 202, response.text
    # The ``days`` whole days before MIDNIGHT: the reference's window of ``days`` days ending
    # with the day of an instant just before it.
    first, last = (MIDNIGHT - timedelta(days=days)).date(), (MIDNIGHT - timedelta(days=1)).date()
    result = client.get(
        f"/api/dashboard?projectId={project_id}&from={first}&to={last}", headers=auth("prop")
    ).json()
    for event in result["recentEvents"]:
        del event["id"]
    # Everything acknowledged is loaded (the test client waits for it): the dashboard says it
    # includes every event acknowledged up to at least the moment the batch was sent.
    assert datetime.fromisoformat(result.pop("dataThrough")) >= sent
    expected = dashboard(batch, MIDNIGHT - timedelta(milliseconds=1), days)
    # Live visitors are of the last 5 minutes by the real clock (tests/test_live.py): none of
    # these events is later than MIDNIGHT - 1 minute, so the count depends on when this runs.
    result.pop("liveVisitors"), expected.pop("liveVisitors")
    assert result == expected


invalid_events = st.one_of(
    st.fixed_dictionaries({"name": st.just("")}),
    st.fixed_dictionaries({"name": st.text(min_size=101, max_size=120)}),
    st.fixed_dictionaries({"name": st.integers()}),
    st.fixed_dictionaries({"name": st.just("a"), "path": st.text(min_size=2049, max_size=2060)}),
    st.fixed_dictionaries(
        {
            "name": st.just("a"),
            "metadata": st.dictionaries(
                text.filter(bool),
                st.recursive(st.integers(), lambda c: st.lists(c, min_size=1)),
                min_size=1,
                max_size=3,
            ).filter(lambda d: any(isinstance(v, list) for v in d.values())),
        }
    ),
    st.fixed_dictionaries({"name": st.just("a"), "occurredAt": st.integers()}),
    st.fixed_dictionaries({"name": st.just("a"), "unknownField": text}),
)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    good=st.lists(st.just({"name": "ok"}), max_size=5),
    bad=invalid_events,
    position=st.integers(0, 5),
)
def test_invalid_batches_are_refused_whole(client, good, bad, position):
    project_id, key = new_project(client, user="prop")
    batch = [*good[:position], bad, *good[position:]]
    response = client.post(
        "/api/collect",
        content=json.dumps({"events": batch}),
        headers={"x-api-key": key, "content-type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "Invalid payload" and response.json()["details"]
    assert (
        stored(
            client, "SELECT count() FROM {db}.events WHERE project_id = {p:String}", p=project_id
        )[0][0]
        == 0
    )


def test_duplicate_json_keys_are_refused(client):
    """JSON leaves duplicate keys to the reader; Tally refuses them rather than pick a reading."""
    project_id, key = new_project(client, user="prop")
    for raw in (
        b'{"events": [{"name": "first", "name": "second", "path": "/x"}]}',
        b'{"events": [{"name": "a", "metadata": {"k": 1, "k": 2}}]}',
        b'{"events": [{"name": "a"}], "events": [{"name": "b"}]}',
    ):
        response = client.post(
            "/api/collect",
            content=raw,
            headers={"x-api-key": key, "content-type": "application/json"},
        )
        assert response.status_code == 400, raw
        assert response.json()["error"] == "Invalid payload"
        assert "twice" in response.json()["details"][0]["message"]
    assert stored(
        client, "SELECT count() FROM {db}.events WHERE project_id = {p:String}", p=project_id
    ) == [(0,)]


def test_sql_looking_strings_are_stored_verbatim(client):
    project_id, key = new_project(client, user="prop")
    nasty = "'); DROP TABLE events; -- {p:String} \\' \" `x` \u0000"
    event = {
        "name": nasty,
        "path": nasty,
        "referrer": nasty,
        "sessionId": nasty,
        "visitorId": nasty,
        "metadata": {nasty: nasty},
    }
    assert (
        client.post(
            "/api/collect", json={"events": [event]}, headers={"x-api-key": key}
        ).status_code
        == 202
    )
    row = stored(
        client,
        "SELECT name, path, referrer, session_id, visitor_id, metadata "
        "FROM {db}.events WHERE project_id = {p:String}",
        p=project_id,
    )[0]
    assert row[:5] == (nasty,) * 5 and json.loads(row[5]) == {nasty: nasty}


@pytest.mark.parametrize(
    "raw",
    [
        b"1e308",
        b"-1e308",
        b"18446744073709551615",
        b"-9223372036854775808",
        b"1000000000000000000000000000000",
        b"1e-320",
        b"0.1",
    ],
)
def test_huge_numbers_in_metadata_are_stored(client, raw):
    project_id, key = new_project(client, user="prop")
    body = (
        b'{"events": [{"name": "n", "metadata": {"x": ' + raw + b', "durationMs": ' + raw + b"}}]}"
    )
    response = client.post(
        "/api/collect", content=body, headers={"x-api-key": key, "content-type": "application/json"}
    )
    assert response.status_code == 202, response.text
    (metadata,) = stored(
        client, "SELECT metadata FROM {db}.events WHERE project_id = {p:String}", p=project_id
    )[0]
    assert float(json.loads(metadata)["x"]) == float(raw)


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_non_finite_numbers_are_refused(client, raw):
    project_id, key = new_project(client, user="prop")
    body = b'{"events": [{"name": "n", "metadata": {"x": ' + raw + b"}}]}"
    response = client.post(
        "/api/collect", content=body, headers={"x-api-key": key, "content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    assert (
        stored(
            client, "SELECT count() FROM {db}.events WHERE project_id = {p:String}", p=project_id
        )[0][0]
        == 0
    )
