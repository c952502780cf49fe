"""Junk at every route: whatever arrives, the answer is a 2xx/4xx with an error code, never
a 5xx. Signed and token routes are also hit with well-formed but wrong credentials."""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import ADMIN_KEY
from tests.clients import LiveNode
from tests.conftest import JobMaker, examples

EXAMPLES = examples(150)  # 3,000 under `make fuzz`

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=4),
    max_leaves=10)
bodies = st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode()))
header_values = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80)
headers = st.fixed_dictionaries({}, optional={
    "authorization": header_values.map(lambda v: f"Bearer {v}"),
    "x-mesh-address": header_values, "x-mesh-signature": header_values,
    "x-mesh-nonce": header_values, "x-mesh-expiry": header_values,
    "x-mesh-chain-id": header_values, "idempotency-key": header_values,
    "x-admin-key": header_values, "content-type": st.sampled_from(
        ["application/json", "text/plain", "application/octet-stream"])})
segments = st.text(alphabet=st.characters(min_codepoint=48, max_codepoint=122), min_size=1,
                   max_size=70)


def routes(client: TestClient) -> list[tuple[str, str]]:
    """Every documented route, from the OpenAPI schema the app serves."""
    paths = client.get("/openapi.json").json()["paths"]
    return [(method.upper(), path) for path, item in paths.items() for method in item]


def test_no_input_yields_a_server_error(client: TestClient) -> None:
    table = routes(client)
    assert len(table) >= 14

    @settings(max_examples=EXAMPLES, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st.sampled_from(table), st.lists(segments, min_size=4, max_size=4), bodies, headers)
    def probe(route: tuple[str, str], fill: list[str], body: bytes,
              sent_headers: dict[str, str]) -> None:
        method, path = route
        for value in fill:
            start = path.find("{")
            if start < 0:
                break
            path = path[:start] + value + path[path.index("}", start) + 1:]
        response = client.request(method, path, content=body, headers=sent_headers)
        assert response.status_code < 500, (method, path, response.status_code, response.text)
        if response.status_code >= 400:
            assert "code" in response.json()["error"]

    probe()


def test_authenticated_junk_yields_no_server_error(
        client: TestClient, live_node: Callable[..., LiveNode], make_job: JobMaker) -> None:
    """Past authentication: valid tokens, signatures and admin key over junk bodies/paths."""
    node = live_node("gpu-1", slots=2)
    make_job(3)
    table = routes(client)
    known_ids = st.sampled_from(["gpu-1", "1", "2", "0x" + "0" * 64, "-1", "9" * 30])

    @settings(max_examples=EXAMPLES, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st.sampled_from(table), st.lists(known_ids | segments, min_size=4, max_size=4),
           bodies, st.sampled_from(["token", "signed", "admin"]))
    def probe(route: tuple[str, str], fill: list[str], body: bytes, auth: str) -> None:
        method, path = route
        for value in fill:
            start = path.find("{")
            if start < 0:
                break
            path = path[:start] + value + path[path.index("}", start) + 1:]
        sent = {"content-type": "application/json", "idempotency-key": "fuzz-key-1"}
        if auth == "token":
            sent |= node.auth
        elif auth == "signed":
            sent |= node.wallet.signed_headers(method, path, body)
        else:
            sent |= {"x-admin-key": ADMIN_KEY}
        response = client.request(method, path, content=body, headers=sent)
        assert response.status_code < 500, (method, path, response.status_code, response.text)

    probe()
