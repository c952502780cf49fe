"""One error shape for every refusal: `{"error": {"code": ..., "message": ...}}`.

Clients branch on the stable `code`; the message is for humans. Nothing a client
sends may surface as a 500, so validation and domain errors are mapped here.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from orchestrator.db.session import DatabaseError, database_away
from orchestrator.domain.errors import (
    DomainError,
    Forbidden,
    NotFound,
    OverQuota,
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
    (OverQuota, 429), (Unavailable, 503))
CONFLICT = 409


ERROR_DESCRIPTIONS = {
    400: "A body the server cannot read (a bad Content-Length, an undecodable body)",
    401: "No valid credentials: a missing, malformed, expired or replayed signature or token",
    402: "The job's escrow on chain is missing, not funded or empty",
    403: "Credentials valid but not allowed here (another node's, a wrong admin key)",
    404: "What the request names does not exist",
    409: "Not possible in the current state (the code says which)",
    413: "The body is over the size limit",
    422: "The request does not validate, or its content cannot be used",
    429: "Over a rate or storage allowance (the wallet's, the node's or the service's); retry "
         "after Retry-After seconds",
    503: "A part the request needs (the database, the chain) does not answer; retry later",
}


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorOut(BaseModel):
    """Every refusal's body."""

    error: ErrorDetail


def errors(*kinds: type[DomainError]) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route whose service may raise these kinds: their statuses, each
    documented with the one error body."""
    statuses = {next((status for kind_, status in DOMAIN_ERROR_STATUS
                      if issubclass(kind, kind_)), CONFLICT) for kind in kinds}
    return {status: {"model": ErrorOut, "description": ERROR_DESCRIPTIONS[status]}
            for status in sorted(statuses)}


def status_of(error: DomainError) -> int:
    return next((status for kind, status in DOMAIN_ERROR_STATUS if isinstance(error, kind)),
                CONFLICT)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers  # what the status needs (429: Retry-After)


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(DomainError)
    async def _domain_error(_: Request, exc: DomainError) -> JSONResponse:
        headers = ({"Retry-After": str(max(math.ceil(exc.retry_after_s), 1))}
                   if isinstance(exc, OverQuota) else None)
        return JSONResponse(error_body(exc.code, str(exc)), status_code=status_of(exc),
                            headers=headers)

    @app.exception_handler(DatabaseError)
    async def _database(request: Request, exc: DatabaseError) -> JSONResponse:
        if database_away(exc):  # a restart, a failover, a cut connection: the client retries
            return JSONResponse(error_body("database_unavailable",
                                           "the database does not answer; retry shortly"),
                                status_code=503, headers={"Retry-After": "1"})
        log.error("%s %s failed in the database", request.method, request.url.path,
                  exc_info=exc)
        return JSONResponse(error_body("internal_error", "the request failed on the server"),
                            status_code=500)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            return JSONResponse(error_body("malformed_json", "the body is not valid JSON: "
                                           f"{first.get('ctx', {}).get('error', '')}"),
                                status_code=422)
        where = ".".join(str(part) for part in first.get("loc", ()))
        return JSONResponse(error_body("invalid_request", f"{where}: {first.get('msg', '')}"),
                            status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "http_error")
        headers = dict(exc.headers or {})  # what the status needs
        if exc.status_code == 405:  # Allow: every route on this path, not the first one only
            headers["Allow"] = ", ".join(
                method for method in ("DELETE", "GET", "PATCH", "POST", "PUT")
                if any(route.matches({**request.scope, "method": method})[0] is Match.FULL
                       for route in request.app.router.routes))
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code,
                            headers=headers or None)
