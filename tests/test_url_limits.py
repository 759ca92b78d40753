"""The documented filter limits can be sent: the largest ``filters`` the limits table admits (20
filters, 16 KiB of JSON text in all) fits in a URL granian takes, percent-encoded byte by byte,
with every other parameter at its longest, and is answered (200) by a real ``tally serve``; one
byte more is the documented 400 naming ``$.filters``; a URL over granian's fixed 65,534-byte
request target is 414 with an empty body. The v2 body's filters count the same way and fit in
its 64 KiB body cap.

Before: the table allowed 20 x 100 x 2048 characters (up to 12 MB percent-encoded), a URL over
about 64 KB was 414 with an empty body, and a v2 body over 64 KiB 413."""

from __future__ import annotations

import json
import socket
from urllib.parse import quote

import httpx
import pytest

from conftest import token
from served import Server
from tally.domain.filters import MAX_FILTERS, MAX_VALUE_LENGTH, MAX_VALUES, parse_filters
from tally.http.limits import MAX_FILTERS_BYTES, MAX_TARGET_BYTES, SMALL_BODY_BYTES
from tally.http.limits_doc import markdown


def largest_filters(extra: int = 0, names: tuple[str, str] = ("path", "utmCampaign")) -> list:
    """Valid filters whose compact UTF-8 JSON is ``MAX_FILTERS_BYTES + extra`` bytes, made of
    two-byte characters (each percent-encoded to 6 bytes: the worst case)."""
    filters = [["contains_not", names[i % 2], [""]] for i in range(MAX_FILTERS)]

    def size() -> int:
        return len(json.dumps(filters, ensure_ascii=False, separators=(",", ":")).encode())

    target = MAX_FILTERS_BYTES + extra
    i = 0
    while size() + 2 * MAX_VALUE_LENGTH + 3 <= target:  # ',"é...é"': whole values
        values = filters[i % MAX_FILTERS][2]
        if len(values) < MAX_VALUES:
            values.append("é" * MAX_VALUE_LENGTH)
        i += 1
    rest = target - size()
    if rest > 2 * MAX_VALUE_LENGTH:
        next(f[2] for f in filters if len(f[2]) < MAX_VALUES).append("")  # 3 bytes
        rest -= 3
    filters[0][2][0] = "é" * (rest // 2) + "x" * (rest % 2)
    assert size() == target
    return filters


def test_the_largest_filters_are_valid_and_fit_in_a_url():
    text = json.dumps(largest_filters(), ensure_ascii=False, separators=(",", ":"))
    assert len(parse_filters(text)) == MAX_FILTERS
    encoded = quote(text, safe="")
    assert 2.9 * MAX_FILTERS_BYTES < len(encoded) <= 3 * MAX_FILTERS_BYTES < MAX_TARGET_BYTES - 1024
    # The table says the same figures.
    table = markdown()
    assert f"at most {MAX_FILTERS_BYTES:,} bytes" in table and f"{MAX_TARGET_BYTES:,}" in table


def _target(project_id: str, filters: str, endpoint: str = "/api/breakdown") -> str:
    query = (
        f"projectId={project_id}&by=utmCampaign&limit=1000&from=2026-01-01&to=2026-12-31"
        "&compare=previous_period&filters=" + quote(filters, safe="")
    )
    if endpoint == "/api/dashboard":
        query = query.replace("&by=utmCampaign&limit=1000", "")
    return f"{endpoint}?{query}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = Server(tmp_path_factory.mktemp("url-limits"))
    yield served
    served.stop()


def test_the_largest_documented_filters_are_answered_and_one_byte_more_is_400(server):
    project_id, _ = server.new_project("urls", "Site")
    headers = {"authorization": f"Bearer {token('urls')}"}
    largest = json.dumps(largest_filters(), ensure_ascii=False, separators=(",", ":"))
    over = json.dumps(largest_filters(1), ensure_ascii=False, separators=(",", ":"))
    with httpx.Client(base_url=server.url, headers=headers, timeout=120) as http:
        for endpoint in ("/api/breakdown", "/api/dashboard"):
            target = _target(project_id, largest, endpoint)
            assert 2.9 * MAX_FILTERS_BYTES < len(target) < MAX_TARGET_BYTES
            answer = http.get(target)
            assert answer.status_code == 200, answer.text[:300]
            refused = http.get(_target(project_id, over, endpoint))
            assert refused.status_code == 400, refused.text[:300]
            assert refused.json()["error"] == "Invalid query"
            [detail] = refused.json()["details"]
            assert detail["path"] == "$.filters"
            assert detail["message"].startswith(
                f"must be at most {MAX_FILTERS_BYTES:,} bytes of JSON text in all (UTF-8), "
                f"got {MAX_FILTERS_BYTES + 1:,}"
            )
    # Over the request target's fixed limit: granian's 414, empty (README "Errors"); at it, the
    # request reaches Tally. A raw request: httpx refuses URLs this long itself.
    at_limit = "/api/health/live?x=" + "a" * (MAX_TARGET_BYTES - len("/api/health/live?x="))
    assert _raw_get(server.port, at_limit).startswith(b"HTTP/1.1 200 ")
    answer = _raw_get(server.port, at_limit + "a")
    assert answer.startswith(b"HTTP/1.1 414 ") and answer.endswith(b"\r\n\r\n"), answer


def test_routes_without_filters_ignore_a_long_filters_parameter(server):
    """Only the dashboard and the breakdown take ``filters``: elsewhere the parameter is
    ignored whatever its length, as a short one always was (a long one was refused with the
    dashboard's message on health, projects, export, live and collect)."""
    project_id, key = server.new_project("urls-other", "Site")
    over = quote(json.dumps(largest_filters(1), separators=(",", ":")), safe="")
    headers = {"authorization": f"Bearer {token('urls-other')}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=120) as http:
        for target in (
            "/api/health",
            "/api/projects",
            f"/api/live?projectId={project_id}",
            f"/api/export?projectId={project_id}&from=2026-01-01&to=2026-01-02",
        ):
            answer = http.get(f"{target}{'&' if '?' in target else '?'}filters={over}")
            assert answer.status_code == 200, (target, answer.text[:300])
        collected = http.post(
            f"/api/collect?apiKey={key}&filters={over}", json={"events": [{"name": "x"}]}
        )
        assert collected.status_code == 202, collected.text[:300]


def test_cleartext_http2_is_refused_where_the_header_deadline_would_not_hold(server):
    """Tally speaks HTTP/1 (HTTP/2 to browsers is a TLS proxy's side). granian's default also
    took cleartext HTTP/2 by prior knowledge, without the header deadline: a connection that
    sent part of its headers, or nothing after the preface, stayed open for good (a review held
    one for 120 s). The preface now gets the connection closed, not a SETTINGS frame."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        answer = sock.recv(100)
    settings_frame = len(answer) >= 9 and answer[3] == 0x04  # HTTP/2's frame type 4
    assert not settings_frame, answer
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer


def _raw_get(port: int, target: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def test_the_largest_v2_filters_fit_in_its_body_cap(server):
    project_id, _ = server.new_project("urls-v2", "Site")
    headers = {
        "authorization": f"Bearer {token('urls-v2')}",
        "content-type": "application/json",
    }
    body = {
        "site_id": project_id,
        "metrics": ["visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration"],
        "date_range": ["2026-01-01", "2026-12-31"],
        "dimensions": ["visit:utm_campaign", "visit:entry_page", "visit:exit_page", "time:day"],
        "order_by": [["visit_duration", "desc"], ["visits", "asc"]],
        "pagination": {"limit": 10000, "offset": 1000000},
    }
    largest = largest_filters(names=("visit:entry_page", "visit:utm_campaign"))
    with httpx.Client(base_url=server.url, headers=headers, timeout=120) as http:
        # json.dumps escapes every non-ASCII character (\u00e9: 6 bytes for 2): still in the cap.
        sent = json.dumps({**body, "filters": largest}).encode()
        assert 2.9 * MAX_FILTERS_BYTES < len(sent) < SMALL_BODY_BYTES
        answer = http.post("/api/v2/query", content=sent)
        assert answer.status_code == 200, answer.text[:300]
        over = json.dumps({**body, "filters": largest_filters(1)}).encode()
        refused = http.post("/api/v2/query", content=over)
        assert refused.status_code == 400, refused.text[:300]
        assert refused.json()["error"] == "Invalid payload"
        assert refused.json()["details"][0]["path"] == "$.filters"


def test_the_old_documented_maximum_is_refused_plainly_not_with_an_empty_414(server):
    """20 x 100 values of 2048 characters: past any URL; a GET of a size a URL holds but over
    the filters' cap gets the 400 that says so, never an empty answer."""
    project_id, _ = server.new_project("urls-old", "Site")
    headers = {"authorization": f"Bearer {token('urls-old')}"}
    filters = [["is", "path", ["/p" + "x" * 30 for _ in range(100)]] for _ in range(12)]
    text = json.dumps(filters, separators=(",", ":"))
    assert len(text) > MAX_FILTERS_BYTES and len(_target(project_id, text)) < MAX_TARGET_BYTES
    answer = httpx.get(server.url + _target(project_id, text), headers=headers, timeout=60)
    assert answer.status_code == 400 and answer.json()["details"][0]["path"] == "$.filters"


def test_the_cap_counts_url_decoded_bytes():
    """The same filters written with '+' or %20 for spaces count the same."""
    from tally.http.limits import check_filters_param

    value = ('[["is","path",["' + " " * (MAX_FILTERS_BYTES - 20) + '"]]]').encode()
    assert len(value) == MAX_FILTERS_BYTES
    check_filters_param(b"filters=" + value.replace(b" ", b"+"))
    check_filters_param(b"a=1&filters=" + value.replace(b" ", b"%20"))
    with pytest.raises(Exception, match="got 16,386"):
        check_filters_param(b"filters=" + value.replace(b" ", b"+") + b"%C3%A9")
