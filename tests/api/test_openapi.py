"""The OpenAPI document states what the service does: credentials as security schemes, every
refusal a route gives, path constraints as patterns, numeric bounds a float holds exactly,
`/metrics` as text; `/docs` works offline."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.routes.docs import SWAGGER_UI
from protocol.client import Wallet
from tests.api.conftest import ADMIN_KEY
from tests.clients import LiveNode

WALLET = {"wallet-address", "wallet-signature", "wallet-nonce", "wallet-expiry",
          "wallet-chain-id"}


@pytest.fixture
def document(client: TestClient) -> dict[str, Any]:
    return dict(client.get("/openapi.json").json())


def operation(document: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    return dict(document["paths"][path][method.lower()])


def test_credentials_are_security_schemes_each_route_names(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]
    assert {schemes[s]["name"] for s in WALLET} == {
        "x-mesh-address", "x-mesh-signature", "x-mesh-nonce", "x-mesh-expiry", "x-mesh-chain-id"}
    assert schemes["session"] == {**schemes["session"], "type": "http", "scheme": "bearer"}
    assert schemes["admin"]["name"] == "x-admin-key"
    assert [set(r) for r in operation(document, "POST", "/v1/jobs")["security"]] == [WALLET]
    assert operation(document, "POST", "/v1/nodes/{node_id}/heartbeat")["security"] == [
        {"session": []}]
    assert [set(r) for r in operation(document, "PUT", "/v1/blobs/{sha256}")["security"]] == [
        {"session"}, WALLET]  # a node's token or a customer's signature
    assert operation(document, "GET", "/v1/admin/outbox")["security"] == [{"admin": []}]
    assert operation(document, "GET", "/v1/dashboard")["security"] == [{}, {"admin": []}]
    assert "security" not in operation(document, "GET", "/v1/jobs/{job_id}")  # public


def test_path_constraints_are_patterns(document: dict[str, Any]) -> None:
    def pattern(method: str, path: str, name: str) -> str:
        [param] = [p for p in operation(document, method, path)["parameters"]
                   if p["name"] == name]
        return str(param["schema"]["pattern"])

    assert pattern("GET", "/v1/blobs/{sha256}", "sha256") == "^[0-9a-f]{64}$"
    assert pattern("GET", "/v1/nodes/{address}/score-proof", "address") == "^0x[0-9a-fA-F]{40}$"
    assert pattern("GET", "/v1/jobs/{job_id}", "job_id") == "^0x[0-9a-fA-F]{64}$"
    assert pattern("POST", "/v1/nodes/{node_id}/lease", "node_id") == "^[A-Za-z0-9._:-]+$"
    challenge = document["components"]["schemas"]["ChallengeIn"]["properties"]["gpu_class"]
    assert challenge["pattern"] == "^[a-z0-9][a-z0-9_-]*$"


def _bounds(node: Any) -> Iterator[tuple[str, int | float]]:
    if isinstance(node, dict):
        for key in ("maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"):
            if isinstance(node.get(key), int | float) and not isinstance(node[key], bool):
                yield key, node[key]
        for child in node.values():
            yield from _bounds(child)
    elif isinstance(node, list):
        for child in node:
            yield from _bounds(child)


def test_every_numeric_bound_but_token_amounts_is_exact_as_a_float(
        document: dict[str, Any]) -> None:
    """A bound past 2^53 is not one a fuzzer or a JSON parser working in floats can tell from
    its neighbours: schemathesis sent 2^63 + 190 as "valid" for a bound of 2^63 (a 422 the
    test called a bug). Token amounts (uint256, below 2^256) are the one exception: they are
    sent as JSON integers and compared exactly."""
    bounds = list(_bounds(document))
    assert len(bounds) > 50
    assert [(key, value) for key, value in bounds
            if abs(value) > 2**53 and value != 2**256] == []


def test_metrics_is_documented_as_text(document: dict[str, Any], client: TestClient) -> None:
    content = operation(document, "GET", "/metrics")["responses"]["200"]["content"]
    assert list(content) == ["text/plain"]
    assert client.get("/metrics").headers["content-type"].startswith("text/plain")


def test_every_refusal_the_service_gives_is_documented_for_its_route(
        document: dict[str, Any], client: TestClient, live_node: Callable[..., LiveNode],
        new_wallet: Callable[[], Wallet]) -> None:
    """Real refusals, each checked against its route's documented statuses and error body."""
    node = live_node("gpu-1")
    stranger = new_wallet()
    job = "0x" + "ab" * 32
    cases: list[tuple[str, str, Any]] = [
        ("POST", "/v1/nodes/{node_id}/lease",
         client.post("/v1/nodes/gpu-1/lease")),  # no token: 401
        ("POST", "/v1/nodes/{node_id}/lease",
         client.post("/v1/nodes/gpu-2/lease", headers=node.auth)),  # another node's: 403
        ("GET", "/v1/jobs/{job_id}", client.get(f"/v1/jobs/{job}")),  # 404
        ("GET", "/v1/jobs/{job_id}", client.get("/v1/jobs/not-a-job")),  # 422
        ("GET", "/v1/blobs/{sha256}", client.get("/v1/blobs/XYZ", headers=node.auth)),  # 422
        ("GET", "/v1/blobs/{sha256}",
         client.get(f"/v1/blobs/{hashlib.sha256(b'x').hexdigest()}", headers=node.auth)),
        ("PUT", "/v1/blobs/{sha256}", client.put(f"/v1/blobs/{'0' * 64}", content=b"x" * 2**21,
                                                 headers=node.auth)),  # 413
        ("POST", "/v1/tasks/{task_id}/complete",
         node.post("/v1/tasks/424242/complete", {"result_sha256": "a" * 64})),  # 404
        ("GET", "/v1/admin/outbox", client.get("/v1/admin/outbox",
                                               headers={"x-admin-key": "no"})),  # 403
        ("POST", "/v1/admin/jobs/{job_id}/accept",
         client.post(f"/v1/admin/jobs/{job}/accept", headers={"x-admin-key": ADMIN_KEY})),
        ("POST", "/v1/auth/login", stranger.send("POST", "/v1/auth/login",
                                                 {"node_id": "gpu-1"})),  # not yours: 403
        ("GET", "/v1/dashboard", client.get("/v1/dashboard", headers={"x-admin-key": "no"})),
    ]
    seen = set()
    for method, path, response in cases:
        assert response.status_code >= 400, (method, path, response.status_code)
        documented = operation(document, method, path)["responses"]
        assert str(response.status_code) in documented, (method, path, response.status_code,
                                                         sorted(documented))
        body = documented[str(response.status_code)]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/ErrorOut"}
        assert set(response.json()["error"]) == {"code", "message"}
        seen.add(response.status_code)
    assert seen == {401, 403, 404, 413, 422}


@pytest.mark.skipif(not SWAGGER_UI.is_dir(), reason="swagger-ui-dist not installed (make setup)")
def test_docs_load_swagger_ui_from_this_service(client: TestClient) -> None:
    page = client.get("/docs").text
    assert "cdn" not in page and "/docs/assets/swagger-ui-bundle.js" in page
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        response = client.get(f"/docs/assets/{asset}")
        assert response.status_code == 200 and len(response.content) > 10_000
    assert client.get("/docs/assets/package.json").status_code == 404  # only the UI's files
    assert client.get("/redoc").status_code == 404  # it would load from a CDN


def test_every_route_that_answers_413_declares_it(document: dict[str, Any],
                                                  client: TestClient) -> None:
    """An over-size body gets 413 on every route that takes a body, before the route reads it
    (BodyLimit, or a streamed upload's own limit): each such route declares the 413."""
    over = b"x" * (2**21 + 1)  # past the JSON limit and the PoPW route's larger one
    undeclared = []
    for path, methods in document["paths"].items():
        for method, spec in methods.items():
            if method not in ("post", "put", "patch", "delete"):
                continue
            url = path.replace("{", "").replace("}", "")  # each parameter as its own name
            answer = client.request(method.upper(), url, content=over,
                                    headers={"content-type": "application/json"})
            if answer.status_code == 413 and "413" not in spec["responses"]:
                undeclared.append(f"{method.upper()} {path}")
    assert undeclared == []
