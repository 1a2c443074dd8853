"""The browser playground: `GET /` and its static files under `/static`.

Serves files that ship inside the package (`voxserve/static`) and nothing else. The page
is a client of the public API like any other, so it needs no handler logic here. These
routes stay out of the OpenAPI document and need no API key (RequireKey guards `/v1`
only); the page asks for the key and sends it itself.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

__all__ = ["STATIC_DIR", "playground_routes"]

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

_PAGE_HEADERS = {
    # Same origin only: the page loads nothing from elsewhere and talks only to this server.
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
        "form-action 'none'; frame-ancestors 'none'"
    ),
    "cache-control": "no-cache",
}


async def index(request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html", headers=_PAGE_HEADERS)


def playground_routes() -> list[BaseRoute]:
    """`/` and `/static/...`, to append to the app's routes."""
    return [
        Route("/", index, methods=["GET"], include_in_schema=False),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
