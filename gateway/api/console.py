"""`GET /console`: the web console, a page of static files that calls the public /v1 API from
the browser with the credentials the user gives it (nothing is kept server-side)."""

from __future__ import annotations

import mimetypes

from aiohttp import web

from gateway.console import ASSET_ROUTE, INDEX_ROUTE, SLASHED_ROUTE, STATIC
from gateway.http.problem import Problem

# The page loads only its own files and talks only to this node.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # revalidated (ETag) so an upgraded node serves its own page
}
_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".svg": "image/svg+xml",
}


def _assets() -> dict[str, str]:
    """Every file of the static folder by name, with its media type: the only names served."""
    found = {}
    for path in sorted(STATIC.iterdir()):
        if path.is_file():
            kind = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0]
            found[path.name] = f"{kind or 'application/octet-stream'}; charset=utf-8"
    return found


ASSETS = _assets()


def add_routes(app: web.Application) -> None:
    app.router.add_get(INDEX_ROUTE, index)
    app.router.add_get(SLASHED_ROUTE, slashed)
    app.router.add_get(ASSET_ROUTE, asset)


async def index(request: web.Request) -> web.FileResponse:
    """The console's page; its routes are in the URL's fragment (`/console#/topics/orders`),
    so a deep link reloads this same page."""
    return _file("index.html")


async def slashed(request: web.Request) -> web.Response:
    """`/console/` to the page (relative, so that it holds behind a proxy's path prefix): served
    there, its relative `console/app.js` would miss."""
    raise web.HTTPPermanentRedirect("../console")


async def asset(request: web.Request) -> web.FileResponse:
    """One of the console's files, by its name in the static folder; 404 for any other."""
    name = request.match_info["asset"]
    if name not in ASSETS:
        raise Problem(404, "NOT_FOUND", f"the console has no file {name[:100]!r}")
    return _file(name)


def _file(name: str) -> web.FileResponse:
    return web.FileResponse(
        STATIC / name, headers={"Content-Type": ASSETS[name], **_SECURITY_HEADERS}
    )
