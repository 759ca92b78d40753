"""The site owner's files over HTTP: the tracker script, the dashboard page and its assets, with
their caching and security headers. What they do in a browser is tested in tests/browser."""

from __future__ import annotations

import gzip
import re
from importlib import resources
from pathlib import Path

import pytest

from tally.http.pages import PAGE_CSP, tracker_script_bytes

WEB = resources.files("tally") / "web"
STRICT_CSP = "default-src 'none'; frame-ancestors 'none'"


def test_tracker_is_small():
    """The README states the size; keep it under 3 KB gzipped, as served (without the source's
    comments and indentation)."""
    size = len(gzip.compress(tracker_script_bytes(), compresslevel=9))
    assert size < 3072, f"tally.js is {size} bytes gzipped"


def test_the_tracker_is_served_without_its_comments(client):
    """What visitors download is the source less its comments and indentation, the /*! header
    naming the script and its options kept."""
    source = WEB.joinpath("tally.js").read_text()
    served = client.get("/tally.js").text
    assert served.startswith(source[: source.index("*/") + 2])
    assert "//" not in served.replace("://", "") and len(served) < len(source) * 0.7
    assert "sendBeacon" in served and "tally_optout" in served


def test_readme_states_the_tracker_size():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    size = len(gzip.compress(tracker_script_bytes(), compresslevel=9))
    stated = re.search(r"tally\.js` is ([\d,]+) bytes gzipped", readme)
    assert stated, "README should say: tally.js` is N bytes gzipped"
    # Within 64 bytes: small edits need not touch the README, a rewrite must.
    assert abs(int(stated.group(1).replace(",", "")) - size) <= 64


def test_tracker_script_can_be_embedded_by_any_site(client):
    response = client.get("/tally.js", headers={"origin": "https://shop.example"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.headers["cross-origin-resource-policy"] == "cross-origin"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["cache-control"] == "public, max-age=3600"
    assert response.content == tracker_script_bytes()
    assert "set-cookie" not in response.headers
    etag = response.headers["etag"]
    again = client.get("/tally.js", headers={"if-none-match": etag})
    assert again.status_code == 304 and again.content == b""


def test_responses_are_gzipped_when_accepted(client):
    zipped = client.get("/tally.js", headers={"accept-encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.headers["vary"] == "accept-encoding"
    plain = client.get("/tally.js", headers={"accept-encoding": "identity"})
    assert "content-encoding" not in plain.headers
    assert zipped.content == plain.content  # httpx decodes


def test_page_has_its_own_csp_and_loads_only_its_own_files(client):
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"] == PAGE_CSP
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cross-origin-opener-policy"] == "same-origin"
    html = response.text
    assert "<script>" not in html and "style=" not in html and "<style" not in html
    # Every file the page loads is its own; the one outbound link is DB-IP's attribution.
    sources = [s for s in re.findall(r'(?:src|href)="([^"]+)"', html) if s != "https://db-ip.com"]
    assert sources and all(s.startswith("/assets/") or s == "/" for s in sources)
    for src in sources:
        if src == "/":
            continue
        asset = client.get(src)
        assert asset.status_code == 200, src
        # versioned URLs: the content may be cached for good
        assert asset.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert "{{" not in html


def test_api_keeps_the_strict_csp(client):
    for response in (client.get("/api/health"), client.get("/api/projects")):
        assert response.headers["content-security-policy"] == STRICT_CSP
        assert response.headers["cache-control"] == "no-store"


def test_page_csp_allows_no_inline_code():
    directives = dict(d.strip().split(" ", 1) for d in PAGE_CSP.split(";"))
    assert directives["script-src"] == "'self'"
    assert "unsafe" not in PAGE_CSP
    assert directives["frame-ancestors"] == "'none'"
    assert directives["connect-src"] == "'self'"


def test_charting_library_is_served_from_the_python_package(client):
    response = client.get("/assets/plotly.min.js", headers={"accept-encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["content-encoding"] == "gzip"
    assert response.content.startswith(b"/**\n* plotly.js v")
    unversioned = client.get("/assets/plotly.min.js")
    assert unversioned.headers["cache-control"] == "no-cache"


def test_world_map_shapes_are_served_from_the_package(client):
    """plotly.js fetches <topojsonURL>world_110m.json; the page points topojsonURL at /assets/,
    so the map needs nothing from plotly's CDN (tests/browser/test_panels.py watches the wire)."""
    response = client.get("/assets/world_110m.json", headers={"accept-encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["content-encoding"] == "gzip"
    topology = response.json()
    assert topology["type"] == "Topology"
    assert {"countries", "land", "ocean", "coastlines"} <= set(topology["objects"])
    ids = {g.get("id") for g in topology["objects"]["countries"]["geometries"]}
    assert {"DEU", "USA", "NPL", "AUS", "BRA"} <= ids
    app_js = WEB.joinpath("app.js").read_text()
    assert "topojsonURL: '/assets/'" in app_js


@pytest.mark.parametrize("path", ["/assets/nope.js", "/assets/..%2Fpages.py", "/assets/index.html"])
def test_only_known_assets_are_served(client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert response.json() == {"error": "Not found"}


def test_head_requests(client):
    response = client.head("/")
    assert response.status_code == 200 and response.content == b""


def test_pages_are_not_in_the_api_document(client):
    paths = client.get("/api/schema/openapi.json").json()["paths"]
    assert all(p.startswith("/api/") for p in paths)
