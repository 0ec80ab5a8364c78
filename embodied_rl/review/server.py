"""The live review server: a read-only FastAPI app over the given run directories.

Routes (GET/HEAD only): `/` the page, `/static/*` its JS/CSS, `/api/catalog` the catalog
(rescanned per request so a running training shows new videos on reload), and
`/files/<run id>/<path>` for videos, sidecars, metrics and config, with HTTP range support
(Starlette's FileResponse) so the browser can seek. Every file path is checked by
`paths.resolve_inside` on its real path.
"""
from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from urllib.parse import quote

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from embodied_rl.errors import UserError
from embodied_rl.review.catalog import Run, build_catalog
from embodied_rl.review.paths import VIDEO_TYPES, PathRefused, resolve_inside

STATIC_DIR = Path(__file__).parent / "static"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
_CSP = ("default-src 'self'; media-src 'self'; img-src 'self' data:; style-src 'self'; "
        "script-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def server_url_for(run: Run, rel: str) -> str:
    # Relative URL (no leading slash) so the page also works behind a path prefix.
    return f"files/{run.id}/{quote(rel)}"


def _host_name(scope: Scope) -> str:
    """The Host header without its port ('[::1]:8765' -> '::1')."""
    raw = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
    if raw.startswith("["):
        return raw[1:raw.find("]")] if "]" in raw else raw
    return raw.rsplit(":", 1)[0] if raw.count(":") == 1 else raw


class Guard:
    """Refuse every method but GET/HEAD and add hardening headers to every response.

    With `loopback_only`, requests whose Host header is not a loopback name are refused:
    a web page the user visits cannot read the runs through DNS rebinding.
    """

    def __init__(self, app: ASGIApp, loopback_only: bool) -> None:
        self.app = app
        self.loopback_only = loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            await JSONResponse({"detail": "read-only server"}, 405, {"Allow": "GET, HEAD"})(scope, receive, send)
            return
        if self.loopback_only and not is_loopback(_host_name(scope)):
            await JSONResponse({"detail": "invalid Host header"}, 400)(scope, receive, send)
            return

        # Run files keep their ETag/Last-Modified revalidation (videos are large and seeked a
        # lot); the page and the catalog are never cached so Reload always rescans.
        extra = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                 (b"content-security-policy", _CSP.encode())]
        if not scope["path"].startswith("/files/"):
            extra.append((b"cache-control", b"no-store"))

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_app(runs: list[Run], host: str = DEFAULT_HOST) -> FastAPI:
    """Build the app. On a loopback bind, Host headers are checked too (DNS-rebinding guard)."""
    app = FastAPI(title="embodied-rl review", docs_url=None, redoc_url=None, openapi_url=None)
    by_id = {run.id: run for run in runs}

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    @app.get("/api/catalog")
    def catalog() -> JSONResponse:
        return JSONResponse(build_catalog(runs, server_url_for))

    @app.get("/files/{run_id}/{rel:path}")
    def files(run_id: str, rel: str) -> FileResponse:
        run = by_id.get(run_id)
        if run is None:
            raise HTTPException(404, "unknown run")
        try:
            real = resolve_inside(run.root, rel)
        except FileNotFoundError:
            raise HTTPException(404, "not found") from None
        except PathRefused as exc:
            raise HTTPException(403, str(exc)) from None
        media = VIDEO_TYPES.get(real.suffix.lower())
        if media is None:  # sidecars, metrics, config: show as text, never as HTML
            media = "text/plain; charset=utf-8"
        return FileResponse(real, media_type=media)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(Guard, loopback_only=is_loopback(host))
    return app


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before starting uvicorn so a busy port is a one-line error and port 0 works."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise UserError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pass --port N (0 picks a free port)"
            " or a valid --host") from None
    sock.listen(128)
    return sock
