"""GET /api/export: each format gives back exactly the events collected in the range, parsed by an
independent reader (csv, json, pyarrow); owners only; ip hidden under hashing; bad queries 400;
a client that goes away stops the query."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from conftest import auth, new_project, stored
from served import Server
from storage_modes import CLUSTER
from tally.storage.export import EMBEDDED_SETTINGS, csv_header, spool_root
from tally.storage.export import columns as export_columns

FIRST, LAST = date(2026, 1, 10), date(2026, 1, 12)
RANGE = f"from={FIRST}&to={LAST}"
TRICKY = [
    "/a,b",
    '/quote"d',
    "/line\nbreak",
    "/tab\there",
    "/日本語",
    "/emoji/🎉",
    "/back\\slash",
    "",
    "\\N",
    "/semi;colon",
]


def ms(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def sent_events(project_seed: int = 0) -> list[dict[str, Any]]:
    """Events on and around the range, boundaries included, with awkward strings."""
    start = datetime(2026, 1, 10, tzinfo=UTC)
    end = datetime(2026, 1, 13, tzinfo=UTC)  # exclusive
    times = [
        start - timedelta(milliseconds=1),  # out
        start,  # in
        end - timedelta(milliseconds=1),  # in
        end,  # out
        start - timedelta(days=3),  # out
        end + timedelta(days=3),  # out
    ]
    times += [
        start + timedelta(minutes=37 * i + 1 + project_seed, milliseconds=i) for i in range(40)
    ]
    events = []
    for i, t in enumerate(times):
        event: dict[str, Any] = {
            "name": ["pageview", "session_end", "signup"][i % 3],
            "path": TRICKY[i % len(TRICKY)],
            "url": f"https://example.com{TRICKY[i % len(TRICKY)]}?utm_source=n{i}",
            "referrer": "https://news.example/" if i % 4 == 0 else "",
            "visitorId": f"v{i % 7}",
            "sessionId": f"s{i % 11}",
            "occurredAt": ms(t),
            "metadata": {"i": i, "plan": 'pro,"x"', "ok": i % 2 == 0, "none": None},
        }
        if event["name"] == "session_end":
            event["metadata"]["durationMs"] = 1000 * i + 0.5
        events.append(event)
    return events


def in_range(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lo, hi = "2026-01-10T00:00:00.000Z", "2026-01-13T00:00:00.000Z"
    return [e for e in events if lo <= e["occurredAt"] < hi]


def collect(client: Any, key: str, events: list[dict[str, Any]]) -> None:
    for i in range(0, len(events), 100):
        r = client.post(
            "/api/collect", json={"events": events[i : i + 100]}, headers={"x-api-key": key}
        )
        assert r.status_code == 202, r.text


def export(client: Any, user: str, query: str) -> Any:
    return client.get(f"/api/export?{query}", headers=auth(user))


# --- readers: each format back into the same Python values ------------------------------------


def column_types(client: Any) -> dict[str, str]:
    rows = stored(
        client,
        # The columns of SELECT *: not the engine's MATERIALIZED keys (schema 009).
        "SELECT name, type FROM system.columns WHERE database = {d:String} AND table = 'events' "
        "AND default_kind NOT IN ('MATERIALIZED', 'ALIAS', 'EPHEMERAL')",
        d=client.app.state.storage.database,
    )
    return dict(rows)


def typed(value: Any, kind: str) -> Any:
    """A text value (CSV, JSON) as the Python value clickhouse-connect gives for ``kind``."""
    if value is None or (kind.startswith("Nullable") and value == "\\N"):
        return None
    if kind.startswith("DateTime64"):
        # ISO 8601 UTC with milliseconds and Z, as every time Tally gives out (CONTRACT.md)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", value), value
        return datetime.fromisoformat(value)
    if kind == "UUID":
        return uuid.UUID(value)
    if "Float" in kind:
        return float(value)
    if "Int" in kind:
        return int(value)
    return value


def read_csv(body: bytes, types: dict[str, str]) -> list[dict[str, Any]]:
    reader = csv.reader(io.StringIO(body.decode(), newline=""))
    header = next(reader)
    return [
        {name: typed(value, types[name]) for name, value in zip(header, row, strict=True)}
        for row in reader
    ]


def read_ndjson(body: bytes, types: dict[str, str]) -> list[dict[str, Any]]:
    lines = body.decode().split("\n")
    assert lines[-1] == ""  # every object ends its line
    return [{k: typed(v, types[k]) for k, v in json.loads(line).items()} for line in lines[:-1]]


def read_parquet(body: bytes, types: dict[str, str]) -> list[dict[str, Any]]:
    rows = pq.read_table(io.BytesIO(body)).to_pylist()
    out = []
    for row in rows:
        values = {}
        for k, v in row.items():
            if isinstance(v, bytes):
                v = uuid.UUID(bytes=v) if types[k] == "UUID" else v.decode()
            if isinstance(v, datetime):
                v = v.astimezone(UTC)
            values[k] = v
        out.append(values)
    return out


READERS = {"csv": read_csv, "ndjson": read_ndjson, "parquet": read_parquet}


def stored_rows(client: Any, project_id: str, names: list[str]) -> list[dict[str, Any]]:
    cols = ", ".join(f"`{n}`" for n in names)
    rows = stored(
        client,
        f"SELECT {cols} FROM {{db}}.events WHERE project_id = {{p:String}} "
        "AND occurred_at >= '2026-01-10' AND occurred_at < '2026-01-13'",
        p=project_id,
    )
    result = []
    for row in rows:
        values = dict(zip(names, row, strict=True))
        for k, v in values.items():
            if isinstance(v, datetime):
                values[k] = v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)
        result.append(values)
    return result


def key(row: dict[str, Any]) -> Any:
    return str(row["event_id"])


# --- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csv", "ndjson", "parquet"])
def test_each_format_gives_back_exactly_the_events_of_the_range(
    client: Any, user: str, fmt: str
) -> None:
    project, api_key = new_project(client, user)
    events = sent_events()
    collect(client, api_key, events)
    response = export(client, user, f"projectId={project}&{RANGE}&format={fmt}")
    assert response.status_code == 200, response.text
    media = {"csv": "text/csv", "ndjson": "application/x-ndjson"}.get(
        fmt, "application/vnd.apache.parquet"
    )
    assert response.headers["content-type"].startswith(media)
    assert response.headers["content-disposition"] == (
        f'attachment; filename="tally-{project}-2026-01-10-2026-01-12.{fmt}"'
    )
    types = column_types(client)
    rows = READERS[fmt](response.content, types)

    # What was sent, independently of the storage: the events in the range, each once.
    expected = in_range(events)
    assert len(rows) == len(expected) == 42
    sent_view = sorted(
        (e["name"], e["path"], e["url"], e["visitorId"], e["sessionId"], e["occurredAt"])
        for e in expected
    )
    got_view = sorted(
        (r["name"], r["path"], r["url"], r["visitor_id"], r["session_id"], ms(r["occurred_at"]))
        for r in rows
    )
    assert got_view == sent_view
    by_time = {e["occurredAt"]: e for e in expected}
    for r in rows:
        sent = by_time[ms(r["occurred_at"])]
        metadata = json.loads(r["metadata"])
        assert all(metadata[k] == v for k, v in sent["metadata"].items())
        assert r["project_id"] == project
        assert r["duration_ms"] == sent["metadata"].get("durationMs")
    # Oldest first.
    assert [r["occurred_at"] for r in rows] == sorted(r["occurred_at"] for r in rows)

    # Every stored column, with the stored values.
    names = list(rows[0].keys())
    assert names == list(types)  # table order, nothing left out (ip is stored here)
    assert sorted(rows, key=key) == sorted(stored_rows(client, project, names), key=key)


def test_csv_header_is_clickhouses_own(client: Any, user: str) -> None:
    """The header written by Tally (the embedded engine streams plain CSV) is byte for byte the
    one CSVWithNames writes."""
    project, api_key = new_project(client, user)
    collect(client, api_key, sent_events()[:3])
    body = export(client, user, f"projectId={project}&{RANGE}&format=csv").content
    storage = client.app.state.storage
    with storage.client() as ch:
        reference = ch.raw_query(
            f"SELECT * FROM {storage.database}.events LIMIT 0", fmt="CSVWithNames"
        )
    assert body.split(b"\n", 1)[0] + b"\n" == reference


def test_format_defaults_to_csv_and_an_empty_range_is_a_header(client: Any, user: str) -> None:
    project, _ = new_project(client, user)
    response = export(client, user, f"projectId={project}&{RANGE}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert response.content.count(b"\n") == 1 and response.content.startswith(b'"project_id"')
    assert export(client, user, f"projectId={project}&{RANGE}&format=ndjson").content == b""


def test_a_range_past_the_stored_days_reads_what_is_inside(client: Any, user: str) -> None:
    project, api_key = new_project(client, user)
    events = sent_events()
    collect(client, api_key, events)
    body = export(client, user, f"projectId={project}&from=0001-01-01&to=9999-12-31&format=ndjson")
    assert body.status_code == 200
    assert len(body.content.splitlines()) == len(events)


@pytest.mark.parametrize("fmt", ["csv", "ndjson", "parquet"])
def test_a_range_wholly_outside_the_stored_days_is_an_empty_export(
    client: Any, user: str, fmt: str
) -> None:
    """Nothing is stored before 1970 or after 2299: a range wholly outside those days is an
    empty file of its format (it was cut to the first or last stored day at each end, so that
    1969 gave the events of 1970-01-01); a range reaching into them reads what is inside."""
    project, api_key = new_project(client, user)
    collect(
        client,
        api_key,
        [
            {"name": "pageview", "path": "/epoch", "occurredAt": "1970-01-01T00:00:00.000Z"},
            {"name": "pageview", "path": "/day-end", "occurredAt": "1970-01-01T23:59:59.999Z"},
        ],
    )
    types = column_types(client)
    for outside in (
        "from=1969-01-01&to=1969-12-31",
        "from=0001-01-01&to=1969-12-31",
        "from=2299-12-31&to=2299-12-31",
        "from=2300-01-01&to=9999-12-31",
    ):
        response = export(client, user, f"projectId={project}&{outside}&format={fmt}")
        assert response.status_code == 200, response.text
        assert READERS[fmt](response.content, types) == [], outside
        if fmt == "csv":
            assert (
                response.content.startswith(b'"project_id"') and response.content.count(b"\n") == 1
            )
        if fmt == "parquet":
            assert pq.read_table(io.BytesIO(response.content)).column_names == list(types)
        begin, end = outside.replace("from=", "").split("&to=")
        assert response.headers["content-disposition"] == (
            f'attachment; filename="tally-{project}-{begin}-{end}.{fmt}"'
        )
    for overlapping in ("from=1969-12-31&to=1970-01-01", "from=0001-01-01&to=9999-12-31"):
        response = export(client, user, f"projectId={project}&{overlapping}&format={fmt}")
        rows = READERS[fmt](response.content, types)
        assert sorted(r["path"] for r in rows) == ["/day-end", "/epoch"], overlapping


def test_a_user_exports_only_their_own_projects(client: Any, user: str) -> None:
    mine, my_key = new_project(client, user)
    _, other_key = new_project(client, user, name="Other site")
    theirs, their_key = new_project(client, f"{user}-b")
    collect(client, my_key, sent_events(0))
    collect(client, other_key, sent_events(1))
    collect(client, their_key, sent_events(2))
    body = export(client, user, f"projectId={mine}&{RANGE}&format=ndjson").content
    rows = [json.loads(line) for line in body.splitlines()]
    assert len(rows) == 42 and {r["project_id"] for r in rows} == {mine}
    # Another user's project and an unknown one answer alike.
    for project in (theirs, "0" * 24):
        response = export(client, user, f"projectId={project}&{RANGE}")
        assert response.status_code == 404
        assert response.json() == {"error": "Project not found"}
    assert client.get(f"/api/export?projectId={mine}&{RANGE}").status_code == 401


_WRITER = """
import os, sys, tempfile, time
root = sys.argv[1]
os.makedirs(root, exist_ok=True)
folder = tempfile.mkdtemp(prefix=f"export-{os.getpid()}-", dir=root)
with open(os.path.join(folder, "export.parquet"), "wb") as file:
    file.write(b"PAR1" * 250_000)
print(folder, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(bool(CLUSTER), reason="only the embedded engine writes Parquet to a file")
def test_files_of_exports_killed_midway_are_removed_at_the_next_start(make_client: Any) -> None:
    """A process killed while the engine wrote its Parquet file (kill -9, the OOM killer) left
    the file, as large as the export, in the spool for good; the next start removes it, and
    leaves the files of processes still running (another worker's export under way)."""
    with make_client() as client:
        root = spool_root(client.app.state.storage)

    def writer() -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, root], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        return proc, proc.stdout.readline().strip()

    killed, dead_folder = writer()
    killed.kill()
    killed.wait()
    running, live_folder = writer()
    try:
        older = os.path.join(root, "export-k2j3h4q_")  # named before folders carried the PID
        os.makedirs(older)
        # A file at the top was logged as removed at every start, and stayed.
        stray = os.path.join(root, "leftover.parquet")
        with open(stray, "wb") as fh:
            fh.write(b"PAR1")
        with make_client() as client:
            assert client.get("/api/health").status_code == 200
        assert not os.path.exists(dead_folder) and not os.path.exists(older)
        assert not os.path.exists(stray)
        assert os.path.exists(os.path.join(live_folder, "export.parquet"))
    finally:
        running.kill()
        running.wait()
        shutil.rmtree(live_folder, ignore_errors=True)


def test_ip_is_left_out_when_hashed(make_client: Any, user: str) -> None:
    with make_client(ip_privacy="hash") as client:
        project, api_key = new_project(client, user)
        collect(client, api_key, sent_events()[:5])
        for fmt in ("csv", "ndjson", "parquet"):
            body = export(client, user, f"projectId={project}&{RANGE}&format={fmt}").content
            rows = READERS[fmt](body, column_types(client))
            assert rows and all("ip" not in r for r in rows)
            assert "user_agent" in rows[0] and "key_id" in rows[0]


@pytest.mark.skipif(
    bool(CLUSTER), reason="a column is added to the Distributed and the local tables alike there"
)
def test_columns_added_later_come_along(make_client: Any, user: str) -> None:
    with make_client() as client:
        project, api_key = new_project(client, user)
        collect(client, api_key, sent_events()[:5])
        storage = client.app.state.storage
        storage.command(
            f"ALTER TABLE {storage.database}.events ADD COLUMN later String DEFAULT 'x'"
        )
        storage.command(
            f"ALTER TABLE {storage.database}.events ADD COLUMN ip_hash String DEFAULT 'secret'"
        )
        rows = read_ndjson(
            export(client, user, f"projectId={project}&{RANGE}&format=ndjson").content,
            column_types(client),
        )
        assert rows and all(r["later"] == "x" and "ip_hash" not in r for r in rows)


@pytest.mark.parametrize(
    ("query", "details"),
    [
        ("", {"$.projectId": "is required", "$.from": "is required", "$.to": "is required"}),
        (
            "projectId=XYZ&from=2026-01-01&to=2026-01-02",
            {"$.projectId": "must be a 24-character id (lowercase hex digits)"},
        ),
        (
            "projectId={p}&from=2026-1-1&to=2026-02-30",
            {
                "$.from": "must be a date as YYYY-MM-DD",
                "$.to": "must be a date as YYYY-MM-DD",
            },
        ),
        (
            "projectId={p}&from=2026-01-01T00:00:00Z&to=2026-01-02",
            {"$.from": "must be a date as YYYY-MM-DD"},
        ),
        ("projectId={p}&from=2026-01-03&to=2026-01-02", {"$.to": "must not be before from"}),
        ("projectId={p}&from=2300-01-02&to=2300-01-01", {"$.to": "must not be before from"}),
        (
            "projectId={p}&from=2026-01-01&to=2026-01-02&format=xlsx",
            {"$.format": "must be one of csv, ndjson, parquet"},
        ),
        # Given empty is not absent: `format=` was read as csv, and the others said "required".
        (
            "projectId={p}&from=2026-01-01&to=2026-01-02&format=",
            {"$.format": "must be one of csv, ndjson, parquet"},
        ),
        (
            "projectId=&from=&to=",
            {
                "$.projectId": "must be a 24-character id (lowercase hex digits)",
                "$.from": "must be a date as YYYY-MM-DD",
                "$.to": "must be a date as YYYY-MM-DD",
            },
        ),
    ],
)
def test_bad_queries_are_400_in_plain_words(
    client: Any, user: str, query: str, details: dict[str, str]
) -> None:
    project, _ = new_project(client, user)
    response = export(client, user, query.replace("{p}", project))
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "Invalid query"
    assert {d["path"]: d["message"] for d in body["details"]} == details


def test_exports_are_rate_limited_per_user(make_client: Any, user: str) -> None:
    # An hour's budget, not a minute's: the sliding-window counter weighs the last window's
    # requests by how much of it is left, so a third request just past a minute's start was let
    # through (a clean-clone CI run saw it); an hour's window is not crossed within the test.
    with make_client(export_limit_per_user="2/hour") as client:
        project, _ = new_project(client, user)
        for _ in range(2):
            assert export(client, user, f"projectId={project}&{RANGE}").status_code == 200
        limited = export(client, user, f"projectId={project}&{RANGE}")
        assert limited.status_code == 429
        assert limited.json() == {"error": "Too many requests"}
        assert int(limited.headers["retry-after"]) >= 1
        # Another user has a budget of their own.
        other, _ = new_project(client, f"{user}-b")
        assert export(client, f"{user}-b", f"projectId={other}&{RANGE}").status_code == 200


def test_a_head_asks_the_export_limit_without_using_it(make_client: Any, user: str) -> None:
    # The dashboard page sends a HEAD before each download to learn whether the GET will be
    # answered: it is answered as the GET would be, and not counted (each page download cost
    # two of the budget, and a HEAD could take the last of it and pass while its GET got 429).
    with make_client(export_limit_per_user="2/hour") as client:
        project, _ = new_project(client, user)
        query = f"/api/export?projectId={project}&{RANGE}"
        for _ in range(2):
            for _ in range(5):
                assert client.head(query, headers=auth(user)).status_code == 200
            assert export(client, user, f"projectId={project}&{RANGE}").status_code == 200
        head = client.head(query, headers=auth(user))
        assert head.status_code == 429 and int(head.headers["retry-after"]) >= 1
        assert export(client, user, f"projectId={project}&{RANGE}").status_code == 429


def test_openapi_documents_the_export(client: Any) -> None:
    doc = client.get("/api/schema/openapi.json").json()
    operation = doc["paths"]["/api/export"]["get"]
    params = {p["name"]: p for p in operation["parameters"]}
    assert set(params) == {"projectId", "from", "to", "format"}
    assert all(params[n]["required"] for n in ("projectId", "from", "to"))
    assert params["format"]["schema"]["enum"] == ["csv", "ndjson", "parquet"]
    assert {"200", "400", "401", "404", "429"} <= set(operation["responses"])


# --- block boundaries ---------------------------------------------------------------------------


def _insert_at(client: Any, project: str, rows: int, first: str, step_ms: int, tag: str) -> None:
    """``rows`` events from ``first`` (a DateTime64 literal), ``step_ms`` apart (0: all in the
    same millisecond), in one INSERT: a part of its own."""
    storage = client.app.state.storage
    storage.command(
        f"INSERT INTO {storage.database}.events (project_id, name, occurred_at, received_at, "
        "path, url) SELECT {p:String}, 'pageview', "
        "toDateTime64({t:String}, 3, 'UTC') + toIntervalMillisecond(number * {s:UInt64}), "
        "now64(3), concat({tag:String}, toString(number)), 'https://example.com/a,\"b\"' "
        "FROM numbers({n:UInt64})",
        {"p": project, "t": first, "s": step_ms, "tag": f"/{tag}/", "n": rows},
    )


@pytest.mark.parametrize("fmt", ["csv", "ndjson"])
def test_every_event_comes_once_across_the_engines_blocks(client: Any, user: str, fmt: str) -> None:
    """The embedded engine makes the file a block of 1,024 rows at a time (storage/export.py:
    EMBEDDED_SETTINGS), merging the project's parts oldest first. 2,500 events in one
    millisecond, over two parts, span several blocks; a third part's events, a millisecond apart,
    run through that millisecond (one of them in it). The file is what one query with the
    engine's default blocks writes: the same lines, each event once, oldest first, the events of
    distinct times in the same order. Events of the same millisecond come in the engine's order
    (not defined)."""
    assert EMBEDDED_SETTINGS["max_block_size"] * 2 < 2500  # the tie spans blocks
    project, _ = new_project(client, user)
    tie = "2026-01-11 12:00:00.000"
    _insert_at(client, project, 1200, tie, 0, "tie-a")
    _insert_at(client, project, 1300, tie, 0, "tie-b")
    _insert_at(client, project, 3000, "2026-01-11 11:59:58.500", 1, "spread")
    response = export(client, user, f"projectId={project}&{RANGE}&format={fmt}")
    assert response.status_code == 200, response.text

    storage = client.app.state.storage
    names = export_columns(storage, hide_ip=False)
    settings = " SETTINGS date_time_output_format = 'iso'"
    if fmt == "ndjson":
        settings += ", output_format_json_escape_forward_slashes = 0"
    with storage.own_client() as own:
        whole = own.raw_query(
            f"SELECT {', '.join(f'`{n}`' for n in names)} FROM {storage.database}.events "
            "WHERE project_id = {p:String} ORDER BY occurred_at" + settings,
            parameters={"p": project},
            fmt="CSV" if fmt == "csv" else "JSONEachRow",
        )
    body = response.content
    if fmt == "csv":
        assert body.startswith(csv_header(names))
        body = body[len(csv_header(names)) :]
    lines, expected = body.split(b"\n"), whole.split(b"\n")
    assert lines[-1] == expected[-1] == b""
    lines, expected = lines[:-1], expected[:-1]
    assert len(lines) == 5500
    assert sorted(lines) == sorted(expected)  # the same rows, none twice, none missing
    types = column_types(client)
    rows = READERS[fmt](response.content, types)
    assert len({r["event_id"] for r in rows}) == 5500
    times = [r["occurred_at"] for r in rows]
    assert times == sorted(times)
    assert sum(1 for r in rows if r["path"].startswith("/tie-")) == 2500
    tied = datetime(2026, 1, 11, 12, tzinfo=UTC)
    untied = [line for line, t in zip(lines, times, strict=True) if t != tied]
    assert untied == [line for line in expected if line in set(untied)]
    assert len(untied) == 2999


# --- a client that goes away --------------------------------------------------------------------


def _fill(client: Any, project: str, rows: int) -> None:
    storage = client.app.state.storage
    storage.command(
        f"INSERT INTO {storage.database}.events (project_id, name, occurred_at, received_at, "
        "path, url, user_agent) SELECT {p:String}, 'pageview', "
        "toDateTime64('2026-01-10 00:00:00', 3, 'UTC') + toIntervalMillisecond(number), now64(3), "
        "concat('/page/', toString(number)), repeat('u', 200), repeat('a', 200) "
        "FROM numbers({n:UInt64})",
        {"p": project, "n": rows},
    )


def _running_exports(client: Any) -> int:
    return stored(
        client,
        "SELECT count() FROM system.processes "
        "WHERE startsWith(Settings['log_comment'], 'tally-export ')",
    )[0][0]


def _scope(path: str, query: str, headers: dict[str, str]) -> dict[str, Any]:
    """An ASGI GET request's scope, as a server hands it to the application."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
        "state": {},
    }


def _asgi_get(client: Any, path: str, query: str, headers: dict[str, str], chunks: int) -> int:
    """GET through the ASGI interface; the client goes away after ``chunks`` body messages, or
    with ``chunks=0`` once the export's query runs. Returns the bytes received."""
    app = client.app
    received = 0
    messages = 0
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if chunks == 0:
            while not await asyncio.to_thread(_running_exports, client):
                await asyncio.sleep(0.05)
            gone.set()
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal received, messages
        if message["type"] == "http.response.start":
            assert message["status"] == 200, message
        if message["type"] == "http.response.body":
            received += len(message.get("body", b""))
            messages += 1
            if messages >= chunks:
                gone.set()
            if gone.is_set():
                raise OSError("client went away")

    async def main() -> None:
        # A server's send fails once the client went away; Litestar reports that as an error
        # after the response started.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(app(_scope(path, query, headers), receive, send), timeout=120)

    asyncio.run(main())
    return received


@pytest.mark.slow
def test_a_client_that_goes_away_stops_the_query(
    make_client: Any, user: str, caplog: pytest.LogCaptureFixture
) -> None:
    """In each format, on one tenant of 2M events (filled once: a fill per format was most of
    the time)."""
    caplog.set_level(logging.INFO, logger="tally.export")
    rows = 2_000_000
    with make_client() as client:
        project, _ = new_project(client, user)
        _fill(client, project, rows)
        for fmt in ("csv", "ndjson", "parquet"):
            caplog.clear()
            # Parquet is written whole before it is sent: the client leaves while it is written.
            received = _asgi_get(
                client,
                "/api/export",
                f"projectId={project}&{RANGE}&format={fmt}",
                auth(user),
                chunks=0 if fmt == "parquet" else 2,
            )
            assert received < rows * 100, fmt  # a small part of an export of over 800 MB
            deadline = time.monotonic() + 60
            while _running_exports(client) or (
                fmt == "parquet" and "query cancelled" not in caplog.text
            ):
                # Parquet: the file was still being written; the query is killed, not left to
                # finish.
                assert time.monotonic() < deadline, f"the {fmt} export's query still runs"
                time.sleep(0.2)


def test_an_export_whose_query_fails_midway_is_cut_off_never_ended_as_whole(
    make_client: Any, user: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The 200 and part of the file are out when the engine fails the export's query (here it is
    killed, as an operator's KILL QUERY would). The body is never ended as whole: no last
    message says so, the application raises, and the ASGI server closes the connection short of
    the chunked body's end (curl exits 18, httpx raises RemoteProtocolError, a browser reports
    the download failed) rather than the downloader keeping a shorter file that looks complete.
    The operator gets a line saying where it was cut off."""
    caplog.set_level(logging.INFO, logger="tally.export")
    rows = 300_000
    with make_client() as client:
        project, _ = new_project(client, user)
        _fill(client, project, rows)
        storage = client.app.state.storage
        bodies: list[tuple[int, bool]] = []
        never = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await never.wait()  # the client stays
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] != "http.response.body":
                assert message["status"] == 200, message
                return
            bodies.append((len(message.get("body", b"")), bool(message.get("more_body"))))
            if len(bodies) == 2:  # the header and the first chunk are out
                await asyncio.to_thread(
                    storage.command,
                    "KILL QUERY WHERE startsWith(Settings['log_comment'], 'tally-export ') ASYNC",
                )

        async def main() -> BaseException | None:
            query = f"projectId={project}&{RANGE}&format=csv"
            try:
                await asyncio.wait_for(
                    client.app(_scope("/api/export", query, auth(user)), receive, send), 120
                )
            except Exception as exc:
                return exc
            return None

        failure = asyncio.run(main())
        assert failure is not None, "the export ended as if whole"
        assert bodies and all(more for _, more in bodies), bodies
        sent = sum(size for size, _ in bodies)
        assert 0 < sent < rows * 400  # each row is over 400 bytes
        (line,) = [r.getMessage() for r in caplog.records if "cut off" in r.getMessage()]
        assert f"cut off after {sent} bytes" in line, line
        assert "QUERY_WAS_CANCELLED" in line, line
        assert _running_exports(client) == 0


class _Download:
    """An export read through the ASGI interface by a client that stays to its end: ``send``
    records each body message, sets ``first_chunk`` once the CSV header and the first chunk are
    out, waits ``pause`` seconds after each (a reader slower than the engine) and sets ``done``
    at the last. The test's ``receive`` plays the server's side."""

    def __init__(self, pause: float) -> None:
        self.pause = pause
        self.first_chunk = asyncio.Event()
        self.done = asyncio.Event()
        self.bodies: list[tuple[int, bool]] = []

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] != "http.response.body":
            assert message["status"] == 200, message
            return
        self.bodies.append((len(message.get("body", b"")), bool(message.get("more_body"))))
        if len(self.bodies) == 2:
            self.first_chunk.set()
        await asyncio.sleep(self.pause)
        if not message.get("more_body"):
            self.done.set()

    def run(self, client: Any, user: str, project: str, receive: Any, **scope: Any) -> int:
        """The bytes received, once the export has ended whole."""
        query = f"projectId={project}&{RANGE}&format=csv"

        async def main() -> None:
            request = _scope("/api/export", query, auth(user)) | scope
            await asyncio.wait_for(client.app(request, receive, self.send), 120)

        asyncio.run(main())
        assert self.bodies[-1][1] is False, "the export was not ended"
        return sum(size for size, _ in self.bodies)


# Over HTTP/2 the deadline runs until the answer starts, so it must outlast the first chunk's
# query even on a loaded machine (a CI run took over 50 ms and was answered 499, rightly: the
# body had not come in time); the download then lasts past it.
@pytest.mark.parametrize(("http_version", "deadline"), [("1.1", 0.05), ("2", 1.0)])
def test_an_export_is_not_cut_off_when_the_server_hands_over_the_empty_body_late(
    make_client: Any, user: str, http_version: str, deadline: float
) -> None:
    """A GET has no body, yet the ASGI server hands the application an empty one; under load
    granian may not have handed it over when the export's first chunk is read, and the watch for
    a client going away, which asked for it, is stopped then. The body deadline started with
    that first ask. It bounded the streamed response's later wait for a disconnect as well: past
    the deadline the export was cut off mid-body (an "incomplete chunked read" at the client; a
    clean-clone CI run saw it). Here the server hands the empty body over only after the first
    chunk and after the deadline; the export still comes whole. Over HTTP/2 a request without
    Content-Length may have a body, so there the deadline ends when the answer starts."""
    rows = 20_000
    with make_client(body_timeout_seconds=deadline) as client:
        project, _ = new_project(client, user)
        _fill(client, project, rows)
        download = _Download(pause=deadline / 6)  # past the deadline, in all (14 messages)
        handed_over = False

        async def receive() -> dict[str, Any]:
            nonlocal handed_over
            if not handed_over:
                await download.first_chunk.wait()  # the watch asking first is stopped before
                await asyncio.sleep(deadline + 0.15)  # past the body deadline
                handed_over = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await download.done.wait()  # the client stays until the whole file is sent
            return {"type": "http.disconnect"}

        sent = download.run(client, user, project, receive, http_version=http_version)
        assert handed_over
        assert len(download.bodies) > 10, len(download.bodies)  # so it lasted past the deadline
        assert sent > rows * 400  # each row is over 400 bytes


def test_an_export_is_not_cut_off_by_a_server_that_answers_a_cancelled_receive_as_gone(
    make_client: Any, user: str
) -> None:
    """granian answers the receive() after a cancelled, unanswered one with http.disconnect
    though the client is still there. The export's watch for the client going away is
    cancelled once the first chunk is read; under load granian had not yet answered it (with
    the GET's empty body), and the streamed response's own watch was then told the client had
    gone: the download was cut off after its CSV header (a clean-clone CI run saw it). This
    server behaves so; the export still comes whole."""
    rows = 20_000
    with make_client() as client:
        project, _ = new_project(client, user)
        _fill(client, project, rows)
        download = _Download(pause=0)
        unanswered_cancel = asyncio.Event()  # then every receive() answers http.disconnect
        answered = False

        async def first_of(*events: asyncio.Event) -> None:
            waits = [asyncio.ensure_future(event.wait()) for event in events]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()

        async def receive() -> dict[str, Any]:
            nonlocal answered
            if not answered:
                try:
                    await first_of(download.first_chunk, unanswered_cancel)
                except asyncio.CancelledError:
                    unanswered_cancel.set()
                    raise
                if not unanswered_cancel.is_set():
                    answered = True
                    return {"type": "http.request", "body": b"", "more_body": False}
            await first_of(download.done, unanswered_cancel)  # the client stays to the end
            return {"type": "http.disconnect"}

        assert download.run(client, user, project, receive) > rows * 400


# --- a slow reader ----------------------------------------------------------------------------


def test_a_slow_reader_gets_the_whole_export(tmp_path: Any) -> None:
    """TALLY_BODY_TIMEOUT_SECONDS bounds reading a request's body, not the time a response
    takes to stream: a real ``tally serve`` with a 1 s deadline streams an export of about 25 MB
    whole to a client that stops reading for longer than that after its first chunk (the
    server's sends wait meanwhile on full socket buffers). A deadline that also bounded the
    streamed response's wait for a disconnect cut such an export off mid-body, as an
    "incomplete chunked read" at the client."""
    server = Server(tmp_path, TALLY_BODY_TIMEOUT_SECONDS="1")
    try:
        project, key = server.new_project("slow", "slow")
        server.collect(key, _long_events(datetime(2026, 1, 11, tzinfo=UTC), 4000))
        with (
            httpx.Client(timeout=60) as http,
            http.stream(
                "GET", f"{server.url}/api/export?projectId={project}&{RANGE}", headers=auth("slow")
            ) as response,
        ):
            assert response.status_code == 200
            chunks = response.iter_bytes()
            body = next(chunks)
            time.sleep(2.5)  # past the body deadline, with the server's sends waiting
            body += b"".join(chunks)
        lines = body.decode().splitlines()
        assert len(body) > 20_000_000
        assert len(lines) == 1 + 4000  # the header and every event
    finally:
        server.stop()


def _long_events(start: datetime, count: int) -> list[dict[str, Any]]:
    """``count`` pageviews of about 6 KB of CSV each: an export larger than socket buffers."""
    long_path = "/" + "p" * 2000
    return [
        {
            "name": "pageview",
            "path": long_path,
            "url": "https://example.com" + long_path + "?q=" + "u" * 2000,
            "occurredAt": ms(start + timedelta(seconds=i)),
        }
        for i in range(count)
    ]


def test_slow_downloads_hold_no_client_the_rest_of_tally_waits_for(tmp_path: Any) -> None:
    """An export is read at its downloader's pace, for as long as that takes. A real ``tally
    serve`` with the smallest pool (two clients: one for the report lane, one for the rest)
    streams three exports whose readers stop after the first chunk; meanwhile health answers,
    a collected event is loaded, a dashboard and a fourth export are answered, and then the
    three downloads finish whole. Exports took their client from the pool before: the first held
    download left none for health, the loader or the next export until it ended."""
    server = Server(tmp_path, TALLY_CLICKHOUSE_POOL_SIZE="2")
    try:
        project, key = server.new_project("slow", "slow")
        server.collect(key, _long_events(datetime(2026, 1, 11, tzinfo=UTC), 4000))
        url = f"{server.url}/api/export?projectId={project}&{RANGE}"
        with contextlib.ExitStack() as held, httpx.Client(timeout=20) as http:
            downloads = []
            for _ in range(3):
                client = held.enter_context(httpx.Client(timeout=20))
                response = held.enter_context(client.stream("GET", url, headers=auth("slow")))
                assert response.status_code == 200
                chunks = response.iter_bytes()
                downloads.append((next(chunks), chunks))  # then it stops reading
            time.sleep(1)  # the server's sends wait on full socket buffers
            assert http.get(f"{server.url}/api/health").status_code == 200
            server.collect(key, [{"name": "pageview", "path": "/while-downloading"}])
            dashboard = http.get(
                f"{server.url}/api/dashboard?projectId={project}&days=90", headers=auth("slow")
            )
            assert dashboard.status_code == 200, dashboard.text
            fourth = http.get(url, headers=auth("slow"))
            assert fourth.status_code == 200
            assert len(fourth.text.splitlines()) == 1 + 4000
            for first, rest in downloads:
                body = first + b"".join(rest)
                assert len(body.decode().splitlines()) == 1 + 4000
    finally:
        server.stop()


def test_a_parquet_file_slower_to_write_than_the_body_deadline_is_sent(
    make_client: Any, user: str
) -> None:
    """On the embedded engine a Parquet file is written whole before its first byte is sent;
    meanwhile the export watches for the client going away. That wait has no deadline either:
    with a body deadline of 50 ms, a 300,000-event file (longer than that to write) still comes
    back whole, not as a 499 for a client that never left."""
    rows = 300_000
    with make_client(body_timeout_seconds=0.05) as client:
        project, _ = new_project(client, user)
        _fill(client, project, rows)
        response = export(client, user, f"projectId={project}&{RANGE}&format=parquet")
        assert response.status_code == 200, response.text
        assert pq.ParquetFile(io.BytesIO(response.content)).metadata.num_rows == rows


def test_a_body_declared_and_not_sent_in_time_is_a_408_not_a_client_gone() -> None:
    """A request that declares a body (Content-Length) the handler does not read: the watch for
    the client going away asks for it, under the body deadline. When the deadline passed
    before the work was done, the answer was 499, "Client closed request", and the operator's
    log said the client had left; it is the deadline's 408. Through the body deadline
    middleware and the watch that dashboards, breakdowns, the query API and exports use."""
    from litestar import Request

    from tally.http.gone import while_connected
    from tally.http.timeouts import BodyTimeout, body_deadline

    raised: list[BaseException] = []

    async def handler(scope: Any, receive: Any, send: Any) -> None:
        try:
            await while_connected(Request(scope, receive), asyncio.sleep(5))
        except BaseException as exc:
            raised.append(exc)

    async def never() -> dict[str, Any]:
        await asyncio.sleep(60)  # the client sends no byte of its body
        return {"type": "http.disconnect"}

    async def main() -> None:
        scope = _scope("/api/dashboard", "", {"content-length": "5"})
        await asyncio.wait_for(body_deadline(0.05)(handler)(scope, never, None), 10)

    asyncio.run(main())
    assert [type(e) for e in raised] == [BodyTimeout]
