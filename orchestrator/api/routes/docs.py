"""`/docs`: Swagger UI from the pinned npm package `swagger-ui-dist` (package.json, installed by
`make setup`), served by this process, so the API reference works offline."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from orchestrator.api.deps import NonceAfterValidation
from orchestrator.api.errors import ApiError

SWAGGER_UI = Path(__file__).resolve().parents[3] / "node_modules" / "swagger-ui-dist"
ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "favicon-32x32.png": "image/png"}

router = APIRouter(include_in_schema=False, route_class=NonceAfterValidation)


def _missing() -> ApiError:
    return ApiError(503, "docs_assets_missing",
                    f"Swagger UI is not installed at {SWAGGER_UI}: run `make setup` (npm ci)")


@router.get("/docs")
def docs(request: Request) -> HTMLResponse:
    if not SWAGGER_UI.is_dir():
        raise _missing()
    return get_swagger_ui_html(openapi_url=request.app.openapi_url,
                               title=f"{request.app.title} API",
                               swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                               swagger_css_url="/docs/assets/swagger-ui.css",
                               swagger_favicon_url="/docs/assets/favicon-32x32.png")


@router.get("/docs/assets/{name}")
def asset(name: str) -> FileResponse:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise ApiError(404, "not_found", f"no Swagger UI asset {name}")
    if not (SWAGGER_UI / name).is_file():
        raise _missing()
    return FileResponse(SWAGGER_UI / name, media_type=media_type)
