"""The site owner's side of Tally: the tracker script (``/tally.js``), the dashboard page (``/``)
and the page's assets (``/assets/<name>``).

The files live in ``tally/web`` (shipped in the wheel); the charting library is plotly.js, read
from the ``plotly`` package's data, so ``pip install`` alone gives a working page with no node.
Each file is read on its first request, in a worker thread, and kept with its gzip form and ETag.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import rjsmin
from litestar import HttpMethod, Request, Response, route
from litestar.exceptions import NotFoundException
from litestar.params import FromPath
from litestar.status_codes import HTTP_304_NOT_MODIFIED

from .compression import NO_COMPRESSION, accepts_gzip

# The page loads only its own files and talks only to its own origin: no inline script or style.
# The one hash allows an *empty* <style> element: plotly.js appends one and fills it through the
# CSSOM (which CSP does not govern); without it Chromium refuses the element and logs an error.
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; "
    "style-src 'self' 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
PAGE_HEADERS = {"content-security-policy": PAGE_CSP, "cross-origin-opener-policy": "same-origin"}
GET_HEAD = [HttpMethod.GET, HttpMethod.HEAD]
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"
# Sites embed the tracker's unversioned URL: browsers pick up a new version within the hour.
TRACKER_CACHE = "public, max-age=3600"

MEDIA_TYPES = {
    # Litestar adds "; charset=utf-8" to text types.
    ".js": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}
# name under /assets -> (package, path inside it)
ASSETS = {
    "app.js": ("tally", "web/app.js"),
    "app.css": ("tally", "web/app.css"),
    "favicon.svg": ("tally", "web/favicon.svg"),
    "plotly.min.js": ("plotly", "package_data/plotly.min.js"),
    # The world map's country shapes (Natural Earth, 1:110m), which plotly.js otherwise fetches
    # from its CDN: the page sets plotly's topojsonURL to /assets/ (tally/data/README.md).
    "world_110m.json": ("tally", "data/world_110m.json"),
    # The interactive API docs (/api/schema, http/docs.py): Swagger UI's built files, from the
    # swagger-ui-py package's data.
    "docs.js": ("tally", "web/docs.js"),
    "docs.css": ("tally", "web/docs.css"),
    "swagger-ui-bundle.js": ("swagger_ui", "static/swagger-ui-bundle.js"),
    "swagger-ui.css": ("swagger_ui", "static/swagger-ui.css"),
}
# Pages rendered from a template in tally/web, with the hashed URLs of ASSETS filled in.
PAGES = {"index.html", "docs.html"}


# plotly.js bundles the stylesheet of its map library (maplibre) and appends it as an inline <style>
# on load unless an element with the stylesheet's id is already there. The page draws no maplibre
# maps (its world map is a geo trace, drawn as SVG) and its CSP refuses inline styles (which
# Chromium reports as a console error), so the page carries an empty element with each such id.
PLOTLY_INLINE_STYLE = re.compile(
    rb'getElementById\("([0-9a-f]{16,128})"\)\)\{var \w+=document\.createElement\("style"\)'
)


@dataclass(frozen=True)
class Asset:
    body: bytes
    gzipped: bytes
    etag: str
    media_type: str

    @property
    def version(self) -> str:
        return self.etag.strip('"')[:16]

    @classmethod
    def of(cls, body: bytes, name: str) -> Asset:
        suffix = name[name.rfind(".") :]
        return cls(
            body=body,
            gzipped=gzip.compress(body, compresslevel=6, mtime=0),
            etag='"' + hashlib.sha256(body).hexdigest()[:32] + '"',
            media_type=MEDIA_TYPES[suffix],
        )


def _read(package: str, path: str) -> bytes:
    return resources.files(package).joinpath(path).read_bytes()


def tracker_script_bytes() -> bytes:
    """``/tally.js`` as served: web/tally.js, commented for its readers, without its comments
    and indentation (rjsmin; the leading ``/*!`` comment, naming the script and its options,
    stays)."""
    source = _read("tally", "web/tally.js").decode()
    return str(rjsmin.jsmin(source, keep_bang_comments=True)).encode()


class WebFiles:
    """The files behind the page routes, loaded once each on first use."""

    def __init__(self) -> None:
        self._cache: dict[str, Asset] = {}
        self._lock = asyncio.Lock()

    async def get(self, name: str) -> Asset:
        asset = self._cache.get(name)
        if asset is None:
            async with self._lock:
                asset = self._cache.get(name)
                if asset is None:
                    asset = await asyncio.to_thread(self._load, name)
                    self._cache[name] = asset
        return asset

    def get_sync(self, name: str) -> Asset:
        """``get`` for synchronous callers (a racing first load only reads the file twice)."""
        return self._cached(name)

    def _load(self, name: str) -> Asset:
        if name in PAGES:
            return self._page(name)
        if name == "tally.js":
            return Asset.of(tracker_script_bytes(), name)
        package, path = ASSETS[name]
        return Asset.of(_read(package, path), name)

    def _page(self, page: str) -> Asset:
        # Asset URLs carry the content's hash, so they can be cached for good.
        html = _read("tally", f"web/{page}").decode()
        for name in ASSETS:
            if "{{" + name + "}}" in html:
                html = html.replace(
                    "{{" + name + "}}", f"/assets/{name}?v={self._cached(name).version}"
                )
        if "{{plotly-style-markers}}" in html:
            markers = "".join(
                f'<template id="{m.decode()}"></template>'
                for m in PLOTLY_INLINE_STYLE.findall(self._cached("plotly.min.js").body)
            )
            html = html.replace("{{plotly-style-markers}}", markers)
        return Asset.of(html.encode(), page)

    def _cached(self, name: str) -> Asset:
        if name not in self._cache:
            self._cache[name] = self._load(name)
        return self._cache[name]


def serve(
    request: Request[Any, Any, Any], asset: Asset, cache: str, **headers: str
) -> Response[bytes]:
    """The asset, gzipped when the client takes it; 304 when its ETag is current."""
    headers = {"cache-control": cache, "etag": asset.etag, "vary": "accept-encoding", **headers}
    if asset.etag in request.headers.get("if-none-match", ""):
        return Response(b"", status_code=HTTP_304_NOT_MODIFIED, headers=headers)
    body = asset.body
    if accepts_gzip(request.headers.get("accept-encoding", "")) and len(asset.gzipped) < len(body):
        body = asset.gzipped
        headers["content-encoding"] = "gzip"
    return Response(body, media_type=asset.media_type, headers=headers)


def _files(request: Request[Any, Any, Any]) -> WebFiles:
    files: WebFiles = request.app.state.web_files
    return files


@route("/", http_method=GET_HEAD, include_in_schema=False, opt=NO_COMPRESSION)
async def dashboard_page(request: Request[Any, Any, Any]) -> Response[bytes]:
    asset = await _files(request).get("index.html")
    return serve(request, asset, REVALIDATE, **PAGE_HEADERS)


@route("/tally.js", http_method=GET_HEAD, include_in_schema=False, opt=NO_COMPRESSION)
async def tracker_script(request: Request[Any, Any, Any]) -> Response[bytes]:
    asset = await _files(request).get("tally.js")
    # Loaded by other sites' pages: any origin may embed it, even under COEP require-corp.
    return serve(request, asset, TRACKER_CACHE, **{"cross-origin-resource-policy": "cross-origin"})


@route("/assets/{name:str}", http_method=GET_HEAD, include_in_schema=False, opt=NO_COMPRESSION)
async def page_asset(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    if name not in ASSETS:
        raise NotFoundException()
    asset = await _files(request).get(name)
    cache = IMMUTABLE if request.query_params.get("v") == asset.version else REVALIDATE
    return serve(request, asset, cache, **{"content-security-policy": PAGE_CSP})


PAGE_HANDLERS = [dashboard_page, tracker_script, page_asset]
