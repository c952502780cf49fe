"""The operator dashboard: a static page and script (no external assets) polling one JSON read,
and thumbnails of result frames for the admin."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse

from orchestrator.api.deps import AdminDep, AdminViewDep, CtxDep, NonceAfterValidation, SessionDep
from orchestrator.api.errors import errors
from orchestrator.api.schemas import Sha256Path
from orchestrator.domain.errors import Invalid, Missing
from orchestrator.services import dashboard
from orchestrator.services.dashboard import Dashboard

STATIC = Path(__file__).resolve().parents[1] / "static"
# The page loads nothing from elsewhere; thumbnails arrive as blob: URLs (fetched with the key).
PAGE_HEADERS = {"content-security-policy": "default-src 'self'; img-src 'self' blob: data:; "
                "style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
                "cache-control": "no-cache"}

pages = APIRouter(tags=["dashboard"], route_class=NonceAfterValidation)
router = APIRouter(tags=["dashboard"], route_class=NonceAfterValidation)


def _static(name: str, media_type: str) -> FileResponse:
    return FileResponse(STATIC / name, media_type=media_type, headers=PAGE_HEADERS)


@pages.get("/dashboard", response_class=FileResponse, summary="The operator dashboard (HTML)",
           responses={200: {"content": {"text/html": {}}}})
def page() -> FileResponse:
    return _static("dashboard.html", "text/html")


@pages.get("/dashboard/dashboard.js", response_class=FileResponse, include_in_schema=False)
def script() -> FileResponse:
    return _static("dashboard.js", "text/javascript")


@pages.get("/dashboard/dashboard.css", response_class=FileResponse, include_in_schema=False)
def stylesheet() -> FileResponse:
    return _static("dashboard.css", "text/css")


@router.get("/dashboard", response_model=Dashboard,
            summary="Nodes, jobs, settlements, slashes, disputes and service figures (public; "
                    "with the admin key also result thumbnails)")
def snapshot(request: Request, session: SessionDep, ctx: CtxDep,
             admin: AdminViewDep) -> Dashboard:
    return dashboard.snapshot(session, pls=ctx.pls, metrics=ctx.metrics, now=ctx.now(),
                              admin=admin, thumbnail_url=request.app.url_path_for(
                                  "thumbnail", sha256="{sha256}"))


@router.get("/dashboard/thumbnails/{sha256}.png", response_class=FileResponse,
            dependencies=[AdminDep],
            responses={200: {"content": {"image/png": {}}}, **errors(Missing, Invalid)},
            summary="A small PNG of a task's result frame (admin: results are the customer's)")
def thumbnail(sha256: Sha256Path,
              session: SessionDep, ctx: CtxDep) -> FileResponse:
    return FileResponse(dashboard.thumbnail(session, blobs=ctx.blobs, sha256=sha256),
                        media_type="image/png", headers={"cache-control": "private, max-age=3600"})
