"""The signed fuzz's side of the API: a signing layer that sends a schemathesis case with the
credentials its operation needs (the wallet signature of `protocol.client.Wallet`, the node
session of `protocol.session.NodeSession`, the admin key), a grid of identities set up on a
real chain and database the way an agent and a customer set them up, the steering that makes
a generated case name things that exist, and the tally of what the requests reached.

A request *reached the logic* when the route's service ran: the answer is a 2xx, or a refusal
whose code is the service's own (a domain refusal: 402 unfunded, 403 not the owner, 404 the
named thing is missing, 409 a state conflict, 422 a content the rules cannot use, 429 over a
quota). It did not when it was refused before the handler: a credential refusal (401, a 403
of `CREDENTIAL_CODES`), a request that does not validate (`VALIDATION_CODES`: 422
`invalid_request`/`malformed_json`, 400, 413) or a path no route matches."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import numpy as np
from eth_account import Account
from eth_utils import keccak
from fastapi.testclient import TestClient
from PIL import Image
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi import checks as openapi_checks
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.api.schemas import JobSpec
from orchestrator.chain.anvil import dev_account
from orchestrator.chain.sdk import MeshChain
from orchestrator.config import Settings
from orchestrator.db import models
from protocol.client import Wallet, expect
from tests.api.conftest import ADMIN_KEY
from tests.clients import LiveNode, VirtualClock, join, make_wallet


def png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


# What every case is judged by: no 5xx, and a status, content type, headers and body that the
# schema documents for the operation.
CHECKS = (not_a_server_error, openapi_checks.status_code_conformance,
          openapi_checks.content_type_conformance, openapi_checks.response_headers_conformance,
          openapi_checks.response_schema_conformance)
# Refusals of credentials (`orchestrator.api.auth`, `orchestrator.api.deps`): before the logic.
CREDENTIAL_CODES = frozenset({
    "signature_missing", "signature_malformed", "signature_high_s", "wrong_chain",
    "signature_expired", "expiry_too_far", "signature_invalid", "signature_mismatch",
    "nonce_replayed", "token_missing", "token_malformed", "token_invalid", "token_expired",
    "token_wrong_node", "admin_disabled", "admin_key_invalid"})
# Refusals of the request's form (`orchestrator.api.errors`, `orchestrator.api.limits`) and of
# a path no route matches: before the logic too.
VALIDATION_CODES = frozenset({"invalid_request", "malformed_json", "body_too_large",
                              "bad_content_length", "bad_request", "not_found",
                              "method_not_allowed", "http_error"})
PAYMENT = 5 * 10**18
DEADLINE = 2_000_000_000
SCENE = b"the scene every fuzz job renders"
SCENE_SHA = hashlib.sha256(SCENE).hexdigest()
FRAME = png(np.full((4, 4, 3), 128, dtype=np.uint8))  # a rendered frame
PROVIDER_ROUTES = ("/v1/nodes", "/v1/auth", "/v1/slashes")  # signed by a provider's wallet
# Parameters (path, query or body fields) that name a thing, and the pool of things that exist
# (the present time among them).
NAMED = {"node_id": "node_id", "job_id": "job_id", "task_id": "task_id", "check_id": "check_id",
         "sha256": "sha256", "result_sha256": "sha256", "frame_sha256": "sha256",
         "blend_sha256": "sha256", "address": "address", "provider": "address", "at": "now",
         "rendered_at": "now", "resumed_at": "now"}
STEER_SHARE = 0.85  # of the cases whose component is valid: name a thing that exists
WRONG_SHARE = 0.1  # of the cases: sent as someone else, to exercise the refusals
_ids = itertools.count(1)


@dataclass
class Grid:
    """Identities on a running app: a provider's registered, logged-in node holding leases,
    another provider's node, a funded customer whose escrowed jobs were submitted and whose
    scene is uploaded, a stranger's fresh key, and the admin key; the app's clock."""

    client: TestClient
    factory: sessionmaker[Session]
    customer: Wallet
    provider: Wallet
    node: LiveNode
    other_node: LiveNode
    stranger: Wallet
    clock: VirtualClock

    def pools(self) -> dict[str, list[Any]]:
        """What exists now, by kind: the values a steered case names."""
        with self.factory() as session:
            return {
                "node_id": [self.node.node_id],
                "job_id": list(session.scalars(select(models.Job.id))) or ["0x" + "0" * 64],
                "task_id": list(session.scalars(select(models.Task.id))) or [1],
                "check_id": list(session.scalars(select(models.VerificationCheck.id))) or [1],
                "sha256": list(session.scalars(select(models.Blob.sha256))) or [SCENE_SHA],
                "address": [self.provider.address],
                "now": [self.clock()],
            }


def build_grid(client: TestClient, settings: Settings, clock: VirtualClock, chain: MeshChain,
               factory: sessionmaker[Session], *, jobs: int = 3) -> Grid:
    """The identities, set up through the API as an agent and a customer do: `jobs` jobs of
    three frames escrowed on chain and submitted; the node leases two tasks, reports progress
    and a checkpoint on one and completes the other (a commitment to verify)."""

    def wallet(account: Any = None) -> Wallet:
        return make_wallet(client, clock, chain_id=settings.chain_id,
                           orchestrator_id=settings.orchestrator_id, account=account)

    customer, provider = wallet(dev_account(4)), wallet(dev_account(5))
    node = join(provider, "gpu-1", slots=2)
    other_node = join(wallet(dev_account(6)), "gpu-2", slots=1)
    customer.upload(SCENE_SHA, SCENE)
    for _ in range(jobs):
        spec = {"workload": {"kind": "blender", "blend_sha256": SCENE_SHA,
                             "frames": {"start": 1, "end": 3}, "tiles": 1},
                "needs": {"min_vram_gb": 8, "priority": "normal", "expected_duration_s": 60.0},
                "deadline": DEADLINE}
        job_id = keccak(text=f"signed fuzz job {next(_ids)}")
        chain.account(dev_account(4)).create_job(
            job_id, PAYMENT, DEADLINE, JobSpec.model_validate(spec).canonical_hash())
        expect(customer.send("POST", "/v1/jobs", {"job_id": "0x" + job_id.hex(), "spec": spec},
                             headers={"idempotency-key": f"fuzz-{job_id.hex()[:16]}"}))
    running, done = (expect(node.post("/v1/nodes/gpu-1/lease"))["task_id"] for _ in range(2))
    expect(node.post(f"/v1/tasks/{running}/progress", {"progress": 0.3}))
    checkpoint = node.upload(b"half of a fuzz frame")
    expect(node.post(f"/v1/tasks/{running}/checkpoints", {"sha256": checkpoint,
                                                          "progress": 0.5}))
    expect(node.post(f"/v1/tasks/{done}/progress", {"progress": 0.9}))
    expect(node.post(f"/v1/tasks/{done}/complete", {"result_sha256": node.upload(FRAME)}))
    other_node.post("/v1/nodes/gpu-2/checks/lease")  # a live re-check, when one is due
    return Grid(client=client, factory=factory, customer=customer, provider=provider,
                node=node, other_node=other_node, stranger=wallet(Account.create()),
                clock=clock)


@dataclass(frozen=True, slots=True)
class Sent:
    """A case as sent: as whom (`identity`), and whether as the wrong one on purpose."""

    identity: str  # none | node | customer | provider | admin
    wrong: bool


def identity_for(operation: Any, rng: random.Random) -> str:
    """The identity an operation needs, from the security its document states."""
    security = operation.definition.raw.get("security") or [{}]
    schemes = {name for requirement in security for name in requirement}
    options: list[str] = []
    if "session" in schemes:
        options.append("node")
    if "wallet-signature" in schemes:
        options.append("provider" if operation.path.startswith(PROVIDER_ROUTES) else "customer")
    if "admin" in schemes:
        options.append("admin")
    if {} in security or not options:
        options.append("none")
    return rng.choice(options)


def valid(case: Any, location: ParameterLocation) -> bool:
    """Whether the case's component at `location` was generated valid (a positive case's all
    are; a negative case breaks some)."""
    meta = getattr(case, "meta", None)
    info = meta.components.get(location) if meta is not None else None
    return info is None or info.mode is GenerationMode.POSITIVE


def steer(case: Any, pools: dict[str, list[Any]], rng: random.Random) -> None:
    """Make the case name things that exist: in each valid component (a negative case keeps
    what it broke), most parameters and body fields (nested ones too) that name a thing get
    one from `pools`."""
    for location, values in ((ParameterLocation.PATH, case.path_parameters),
                             (ParameterLocation.QUERY, case.query),
                             (ParameterLocation.BODY, case.body)):
        if valid(case, location):
            _steer_fields(values, pools, rng)


def _steer_fields(values: Any, pools: dict[str, list[Any]], rng: random.Random) -> None:
    if isinstance(values, list):
        for item in values:
            _steer_fields(item, pools, rng)
    elif isinstance(values, dict):
        for name, value in values.items():
            if name in NAMED and rng.random() < STEER_SHARE:
                values[name] = rng.choice(pools[NAMED[name]])
            else:
                _steer_fields(value, pools, rng)


def credentials(grid: Grid, sent: Sent, method: str, path: str, body: bytes
                ) -> dict[str, str]:
    """The headers that carry `sent`'s identity for this exact request; the wrong one on
    purpose is another provider's node, a stranger's wallet or a wrong admin key."""
    if sent.identity == "node":
        return (grid.other_node if sent.wrong else grid.node).auth
    if sent.identity in ("customer", "provider"):
        wallet = grid.customer if sent.identity == "customer" else grid.provider
        return (grid.stranger if sent.wrong else wallet).signed_headers(method, path, body)
    if sent.identity == "admin":
        return {"x-admin-key": "not-the-admin-key" if sent.wrong else ADMIN_KEY}
    return {}


def send_case(client: TestClient, kwargs: dict[str, Any],
              sign: Callable[[str, str, bytes], dict[str, str]]) -> httpx.Response:
    """A case's transport arguments as one request; `sign(method, path, body)` gives the
    credential headers (in place of any of the same names the case generated), computed over
    the path the service sees and the exact body sent."""
    url = urlsplit(kwargs["url"])
    path = unquote(url.path)  # as the service routes and verifies it
    body: bytes | None = None
    if "json" in kwargs:
        body = json.dumps(kwargs["json"]).encode()
    elif kwargs.get("content") is not None:
        body = kwargs["content"] if isinstance(kwargs["content"], bytes) \
            else str(kwargs["content"]).encode()
    elif kwargs.get("data") is not None:
        body = kwargs["data"] if isinstance(kwargs["data"], bytes) else str(kwargs["data"]).encode()
    signed = sign(kwargs["method"], path, body or b"")
    replaced = {name.lower() for name in signed} | {"content-length"}
    headers = {k: v for k, v in kwargs.get("headers", {}).items() if k.lower() not in replaced}
    if "json" in kwargs and not any(k.lower() == "content-type" for k in headers):
        headers["content-type"] = "application/json"
    return client.request(kwargs["method"], url.path, params=kwargs.get("params"),
                          content=body, headers={**headers, **signed})


def reached_logic(response: httpx.Response) -> bool:
    """Whether the route's service ran (the module docstring defines it)."""
    if response.status_code < 400:
        return True
    code = error_code(response)
    return bool(code) and code not in CREDENTIAL_CODES and code not in VALIDATION_CODES


def error_code(response: httpx.Response) -> str:
    """A refusal's code ("" when the body is not the one error shape)."""
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""


@dataclass
class Tally:
    """What one operation's requests got."""

    requests: int = 0
    logic: int = 0  # reached the logic, sent as the right identity
    refused_401_403: int = 0  # right identity, still 401/403 (a credential or domain refusal)
    server_errors: int = 0
    wrong: int = 0  # sent as the wrong identity on purpose
    wrong_refused: int = 0  # ... and refused 401/403
    statuses: Counter[int] = field(default_factory=Counter)


@dataclass
class Report:
    """The tally of every operation of a run."""

    operations: dict[str, Tally] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)  # right identity, 401/403: codes

    def add(self, label: str, sent: Sent, response: httpx.Response) -> None:
        tally = self.operations.setdefault(label, Tally())
        tally.requests += 1
        tally.statuses[response.status_code] += 1
        tally.server_errors += response.status_code >= 500
        if sent.wrong:
            tally.wrong += 1
            tally.wrong_refused += response.status_code in (401, 403)
            return
        tally.logic += reached_logic(response)
        if response.status_code in (401, 403):
            tally.refused_401_403 += 1
            self.refusals[error_code(response)] += 1

    def reached(self) -> list[str]:
        return [label for label, tally in self.operations.items() if tally.logic]

    def render(self, title: str, seconds: float) -> str:
        total = sum(t.requests for t in self.operations.values())
        wrong = sum(t.wrong for t in self.operations.values())
        right = total - wrong
        refused = sum(t.refused_401_403 for t in self.operations.values())
        lines = [f"{title}: {total} requests in {seconds:.1f} s, {len(self.reached())} of "
                 f"{len(self.operations)} operations reached the logic, "
                 f"{sum(t.server_errors for t in self.operations.values())} 5xx, "
                 f"{len(self.failures)} check failures; sent as the right identity "
                 f"{right} ({refused} = {refused / max(right, 1):.1%} answered 401/403), as the "
                 f"wrong one {wrong} ({sum(t.wrong_refused for t in self.operations.values())} "
                 f"refused 401/403); the right identity's 401/403 codes: "
                 + ", ".join(f"{code} {n}" for code, n in self.refusals.most_common()),
                 "  not reached: " + (", ".join(sorted(
                     set(self.operations) - set(self.reached()))) or "none"),
                 f"  {'operation':<52} {'reqs':>5} {'logic':>5} {'401/3':>5} {'5xx':>3} "
                 f"{'wrong':>5}  statuses"]
        for label, t in sorted(self.operations.items()):
            statuses = " ".join(f"{s}x{n}" for s, n in sorted(t.statuses.items()))
            lines.append(f"  {label:<52} {t.requests:>5} {t.logic:>5} {t.refused_401_403:>5} "
                         f"{t.server_errors:>3} {t.wrong:>5}  {statuses}")
        return "\n".join(lines)


def fire(grid: Grid, case: Any, pools: dict[str, list[Any]], rng: random.Random,
         report: Report) -> httpx.Response:
    """Steer the case, send it as the identity its operation needs (now and then as a wrong
    one), tally the answer and judge it by CHECKS; a failed check is recorded in `report`."""
    steer(case, pools, rng)
    identity = identity_for(case.operation, rng)
    sent = Sent(identity, identity != "none" and rng.random() < WRONG_SHARE)
    response = send_case(grid.client, case.as_transport_kwargs(base_url="http://testserver"),
                         lambda method, path, body: credentials(grid, sent, method, path, body))
    label = case.operation.label
    report.add(label, sent, response)
    # A case invalid in its headers may have been made valid by the credentials sent; any
    # other invalid case sent as the right identity must be refused.
    judged = [] if sent.wrong or not valid(case, ParameterLocation.HEADER) else [
        openapi_checks.negative_data_rejection]
    try:
        case.validate_response(response, checks=[*CHECKS, *judged])
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as failure:  # schemathesis' failures (and groups of them)
        where = f"{case.method} {case.formatted_path} as {identity}{' (wrong)' * sent.wrong}"
        report.failures.append(f"{where} -> {response.status_code} {response.text[:200]}: "
                               f"{type(failure).__name__}: {str(failure)[:400]}")
    return response
