"""One error shape for every refusal: `{"error": {"code": ..., "message": ...}}`.

Clients branch on the stable `code`; the message is for humans. Nothing a client
sends may surface as a 500, so validation and domain errors are mapped here.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from orchestrator.domain.lifecycle import (
    DomainError,
    Forbidden,
    NotFound,
    TooLarge,
    Unavailable,
    Unfunded,
    Unprocessable,
)

log = logging.getLogger("orchestrator.api")

# The one place a refusal of the layers below gets its HTTP status: the first entry the error
# is an instance of (a subclass before its base). Every other refusal (an invalid transition,
# a conflict) is a 409.
DOMAIN_ERROR_STATUS: tuple[tuple[type[DomainError], int], ...] = (
    (NotFound, 404), (Forbidden, 403), (TooLarge, 413), (Unprocessable, 422), (Unfunded, 402),
    (Unavailable, 503))
CONFLICT = 409


def status_of(error: DomainError) -> int:
    return next((status for kind, status in DOMAIN_ERROR_STATUS if isinstance(error, kind)),
                CONFLICT)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status)

    @app.exception_handler(DomainError)
    async def _domain_error(_: Request, exc: DomainError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, str(exc)), status_code=status_of(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return JSONResponse(error_body("invalid_request", f"{where}: {first.get('msg', '')}"),
                            status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code)
