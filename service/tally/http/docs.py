"""The interactive API docs at ``/api/schema`` (and ``/api/schema/swagger``): Swagger UI, served by
Tally from the ``swagger-ui-py`` package's built files, so the page opens with no internet and
under a Content-Security-Policy as strict as the dashboard page's (scripts, styles and requests
from Tally's origin only; no inline script).

Litestar's own render plugins write an inline script that carries the whole document and load
Swagger UI from a CDN; this one writes a page (web/docs.html) whose scripts are files under
``/assets`` with hashed URLs, and whose script (web/docs.js) fetches ``/api/schema/openapi.json``.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, Router
from litestar.exceptions import NotFoundException
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin

from .pages import WebFiles

# The dashboard page's policy, without the hash plotly.js needs.
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class SwaggerPage(OpenAPIRenderPlugin):
    """Swagger UI from Tally's own files."""

    def __init__(self) -> None:
        super().__init__(path=["/", "/swagger"])

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        files: WebFiles = request.app.state.web_files
        return files.get_sync("docs.html").body


def render_plugins() -> list[OpenAPIRenderPlugin]:
    return [SwaggerPage(), JsonRenderPlugin()]


def json_not_found(response: Response[Any]) -> Response[Any]:
    """Litestar answers an unknown path under the docs (``/api/schema/redoc``) with an HTML page
    of its own; it is the JSON ``Not found`` of every other unknown route here."""
    if response.status_code == 404:
        raise NotFoundException
    return response


def docs_router(path: str) -> Router:
    """The router of the OpenAPI routes, with the docs page's headers. The JSON document under it
    gets them too; a policy for scripts means nothing to a JSON response, and it is still never
    framed, sniffed or cached."""
    return Router(
        path,
        route_handlers=[],
        include_in_schema=False,
        dto=None,
        return_dto=None,
        after_request=json_not_found,
        response_headers={
            "content-security-policy": DOCS_CSP,
            "cross-origin-opener-policy": "same-origin",
        },
    )
