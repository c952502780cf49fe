"""The OpenAPI document says what the service really does: each route's credentials as a
security scheme (a wallet signature in five headers, a node's session token, the admin key)
and the refusals they add, the domain refusals its route declares (`errors(...)`, from the
kinds table in api/errors.py), and the validation and size refusals every route can give.

The credentials are read off each route's dependencies, so a route cannot gain or lose one
without its document following."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute, iter_route_contexts

from orchestrator.api import auth, deps
from orchestrator.api.errors import ERROR_DESCRIPTIONS, ErrorOut
from orchestrator.api.routes.pls import answer_signature

SIGNATURE_HEADERS = {
    auth.HEADER_ADDRESS: "The signing wallet's address (0x + 40 hex)",
    auth.HEADER_SIGNATURE: "EIP-712 signature (0x + 130 hex) of MeshRequest{method, path, "
                           "bodyHash=keccak(body), nonce, expiry} in the domain {name: "
                           "'DePIN Mesh', version: '1', chainId, salt: keccak(orchestrator id)}",
    auth.HEADER_NONCE: "A decimal nonce, never reused by this address",
    auth.HEADER_EXPIRY: "Unix seconds after which the signature is refused",
    auth.HEADER_CHAIN: "The chain id the signature is for",
}
WALLET = [f"wallet-{name.removeprefix('x-mesh-')}" for name in SIGNATURE_HEADERS]
SCHEMES: dict[str, dict[str, Any]] = {
    **{scheme: {"type": "apiKey", "in": "header", "name": header, "description": text}
       for scheme, (header, text) in zip(WALLET, SIGNATURE_HEADERS.items(), strict=True)},
    "session": {"type": "http", "scheme": "bearer", "bearerFormat": "HMAC session token",
                "description": "A node's token from POST /v1/auth/login (for heartbeats and "
                               "everything a node reports)"},
    "admin": {"type": "apiKey", "in": "header", "name": "x-admin-key",
              "description": "The operator's key (MESH_ADMIN_KEY)"},
}
SIGNED: dict[str, list[str]] = {scheme: [] for scheme in WALLET}
ERROR_REF = "#/components/schemas/ErrorOut"
DESCRIPTION = ("The orchestrator of DePIN Mesh. Every refusal is `{\"error\": {\"code\", "
               "\"message\"}}`; clients branch on the stable code.")
# dependency -> (security requirements, any one of which is accepted; statuses it adds)
CREDENTIALS: dict[Callable[..., Any], tuple[list[dict[str, list[str]]], tuple[int, ...]]] = {
    deps.get_db: ([], (503,)),  # the database must answer
    deps.signed_request: ([SIGNED], (401, 503)),  # its nonce is burnt in the database
    deps.node_token: ([{"session": []}], (401, 403)),
    deps.blob_uploader: ([{"session": []}, SIGNED], (401, 403)),
    deps.admin: ([{"admin": []}], (403,)),
    deps.admin_view: ([{}, {"admin": []}], (403,)),
    deps.escrow_provider: ([], (503,)),  # the chain must answer
    deps.registration_rate: ([], (429,)),
    # a PoPW answer without a valid signature is judged `forged` (403), a replayed one 409
    answer_signature: ([SIGNED], (403, 409)),
}


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)


# Methods whose requests carry a body: BodyLimit refuses an over-size one (413) or a bad
# Content-Length (400) before any route runs, whether or not the route reads a body.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _document(operation: dict[str, Any], dependant: Dependant, method: str) -> None:
    """Add the route's credentials, and the refusals they, its parameters and its method
    bring."""
    security: list[dict[str, list[str]]] = []
    statuses: set[int] = set()
    for call in _calls(dependant):
        if call in CREDENTIALS:
            requirements, added = CREDENTIALS[call]
            security.extend(r for r in requirements if r not in security)
            statuses.update(added)
    if dependant.path_params or dependant.query_params or dependant.header_params or \
            dependant.body_params:
        statuses.add(422)
    if dependant.body_params or method in BODY_METHODS:
        statuses.update((400, 413))  # BodyLimit and the body's decoding, before validation
    responses = operation["responses"]
    if "422" in responses:  # FastAPI's own entry describes a body the error handler replaces
        statuses.add(422)
        del responses["422"]
    for status in sorted(statuses):
        responses.setdefault(str(status), {
            "description": ERROR_DESCRIPTIONS[status],
            "content": {"application/json": {"schema": {"$ref": ERROR_REF}}}})
    if security:
        operation["security"] = security


def install_openapi(app: FastAPI) -> None:
    """Serve the generated schema with every route's credentials and refusals documented."""

    def schema() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        document = get_openapi(title=app.title, version=app.version, routes=app.routes,
                               description=DESCRIPTION)
        components = document.setdefault("components", {})
        components["securitySchemes"] = SCHEMES
        schemas = components.setdefault("schemas", {})
        schemas.setdefault("ErrorOut", ErrorOut.model_json_schema(
            ref_template="#/components/schemas/{model}"))
        schemas.update(schemas["ErrorOut"].pop("$defs", {}))
        for route in iter_route_contexts(app.routes):
            if not isinstance(route.original_route, APIRoute):
                continue
            item = document["paths"].get(route.path_format, {})
            for method in route.methods or ():
                if method.lower() in item:
                    _document(item[method.lower()], route.dependant, method)
        for unused in ("HTTPValidationError", "ValidationError"):  # no route answers with them
            schemas.pop(unused, None)
        app.openapi_schema = document
        return document

    app.openapi = schema  # type: ignore[method-assign]
