"""The PoPW handshake through the real API: a client runs `popw.solve`, the orchestrator
spot-checks its answer, times the ping-pong rounds itself and judges; failures state a
reason code."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.config import Settings
from orchestrator.db.models import PopwVerdictRecord
from orchestrator.domain import popw
from orchestrator.domain.types import Tier
from protocol.client import Wallet
from tests.clients import LiveNode, VirtualClock, make_wallet
from tests.services.pls_harness import gpu_sample


def challenge_for(node: LiveNode, gpu_class: str = "rtx4090") -> dict[str, Any]:
    issued = node.wallet.send("POST", f"/v1/nodes/{node.node_id}/popw/challenge",
                              {"gpu_class": gpu_class})
    assert issued.status_code == 200, issued.text
    return dict(issued.json())


def solve(challenge: dict[str, Any]) -> str:
    """What an agent does with the challenge route's answer: the wire form to send back."""
    spec = popw.KernelSpec(bytes.fromhex(challenge["nonce"][2:]), challenge["size"],
                           challenge["rounds"], challenge["spot_checks"])
    return base64.b64encode(popw.solve(spec).to_bytes()).decode()


def tampered(answer: str) -> str:
    """The same answer with one opened row changed: its spot check no longer recomputes."""
    parsed = popw.PopwAnswer.from_bytes(base64.b64decode(answer))
    first = parsed.openings[0]
    changed = replace(first, row=bytes([first.row[0] ^ 1]) + first.row[1:])
    return base64.b64encode(replace(parsed, openings=(changed, *parsed.openings[1:]))
                            .to_bytes()).decode()


def ping(node: LiveNode, clock: VirtualClock, rounds: int, rtt_s: float = 0.004) -> None:
    for _ in range(rounds):
        node.probe(rtt_s=rtt_s, clock=clock)


def answer_body(challenge: dict[str, Any], answer: str, clock: VirtualClock) -> dict[str, Any]:
    return {"nonce": challenge["nonce"], "answer": answer,
            "gpu_under_load": [gpu_sample(clock(), temperature_c=65.0)]}


def send_answer(wallet: Wallet, node_id: str, body: dict[str, Any]) -> Any:
    return wallet.send("POST", f"/v1/nodes/{node_id}/popw/answer", body)


def test_handshake_over_http_passes_at_high_tier_and_is_visible(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock) -> None:
    node = agent("gpu-1")
    challenge = challenge_for(node)
    assert challenge["deadline"] > challenge["issued_at"] == clock()
    ping(node, clock, challenge["ping_rounds"])
    clock.advance(2.0)  # the kernel's nominal time on the claimed class
    verdict = send_answer(node.wallet, "gpu-1", answer_body(challenge, solve(challenge), clock))
    assert verdict.status_code == 200, verdict.text
    assert (verdict.json()["passed"], verdict.json()["tier"]) == (True, Tier.HIGH)
    assert verdict.json()["expires_at"] > clock()
    shown = client.get("/v1/nodes/gpu-1/popw").json()
    assert (shown["passed"], shown["tier"], shown["reasons"]) == (True, Tier.HIGH, [])
    assert 'mesh_popw_handshakes_total{reason="none",result="passed"} 1.0' in client.get(
        "/metrics").text


def test_wrong_answer_fails_with_its_reason_and_is_stored(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock) -> None:
    node = agent("gpu-1")
    challenge = challenge_for(node)
    ping(node, clock, challenge["ping_rounds"])
    clock.advance(2.0)
    wrong = send_answer(node.wallet, "gpu-1",
                        answer_body(challenge, tampered(solve(challenge)), clock))
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (422, "popw_wrong_answer")
    shown = client.get("/v1/nodes/gpu-1/popw").json()
    assert (shown["passed"], shown["reasons"]) == (False, ["wrong_answer"])


def test_malformed_answer_is_refused_without_spending_the_challenge(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock) -> None:
    node = agent("gpu-1")
    challenge = challenge_for(node)
    assert challenge["spot_checks"] == 20
    ping(node, clock, challenge["ping_rounds"])
    clock.advance(2.0)
    answer = solve(challenge)
    cut = base64.b64encode(base64.b64decode(answer)[:-1]).decode()
    malformed = send_answer(node.wallet, "gpu-1", answer_body(challenge, cut, clock))
    assert (malformed.status_code, malformed.json()["error"]["code"]) == (
        422, "popw_malformed_answer")
    assert client.get("/v1/nodes/gpu-1/popw").status_code == 404  # nothing was judged
    honest = send_answer(node.wallet, "gpu-1", answer_body(challenge, answer, clock))
    assert honest.status_code == 200, honest.text


def test_late_answer_fails_as_late(agent: Callable[..., LiveNode], clock: VirtualClock) -> None:
    node = agent("gpu-1")
    challenge = challenge_for(node)
    ping(node, clock, challenge["ping_rounds"])
    clock.now = challenge["deadline"] + 1.0
    late = send_answer(node.wallet, "gpu-1", answer_body(challenge, solve(challenge), clock))
    assert late.json()["error"]["code"] == "popw_late"


def test_answer_signed_by_another_wallet_is_forged_and_leaves_the_challenge_open(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
        settings: Settings, factory: sessionmaker[Session]) -> None:
    node = agent("gpu-1")
    challenge = challenge_for(node)
    ping(node, clock, challenge["ping_rounds"])
    clock.advance(2.0)
    body = answer_body(challenge, solve(challenge), clock)
    thief = make_wallet(client, clock, chain_id=settings.chain_id,
                   orchestrator_id=settings.orchestrator_id)
    forged = send_answer(thief, "gpu-1", body)
    assert (forged.status_code, forged.json()["error"]["code"]) == (403, "popw_forged")
    unsigned = client.post("/v1/nodes/gpu-1/popw/answer", json=body)
    assert unsigned.json()["error"]["code"] == "popw_forged"
    with factory() as session:  # nobody but the node can spend or spoil its challenge
        assert session.scalar(select(func.count()).select_from(PopwVerdictRecord)) == 0
    honest = send_answer(node.wallet, "gpu-1", body)
    assert honest.status_code == 200, honest.text


def test_replayed_answer_is_refused_as_replayed(
        agent: Callable[..., LiveNode], clock: VirtualClock) -> None:
    node = agent("gpu-1")
    challenge = challenge_for(node)
    ping(node, clock, challenge["ping_rounds"])
    clock.advance(2.0)
    body = answer_body(challenge, solve(challenge), clock)
    assert send_answer(node.wallet, "gpu-1", body).status_code == 200
    again = send_answer(node.wallet, "gpu-1", body)  # freshly signed, same challenge
    assert (again.status_code, again.json()["error"]["code"]) == (409, "popw_replayed")


def test_answer_without_timed_probe_rounds_fails_for_probe_loss(
        agent: Callable[..., LiveNode], clock: VirtualClock) -> None:
    node = agent("gpu-1")
    challenge = challenge_for(node)
    clock.advance(2.0)  # no ping-pong rounds answered: all count as lost
    lost = send_answer(node.wallet, "gpu-1", answer_body(challenge, solve(challenge), clock))
    assert lost.json()["error"]["code"] == "popw_probe_loss"



def test_probe_rounds_answered_before_the_challenge_do_not_count_for_it(
        agent: Callable[..., LiveNode], clock: VirtualClock) -> None:
    """RTT evidence comes only from rounds timed after the challenge was issued: a node that
    answered plenty of probes just before it, and none during it, fails for probe loss."""
    node = agent("gpu-1")
    first = challenge_for(node)
    ping(node, clock, 3 * first["ping_rounds"])
    clock.advance(1.0)
    challenge = challenge_for(node)  # a fresh challenge after all those rounds
    clock.advance(2.0)
    lost = send_answer(node.wallet, "gpu-1", answer_body(challenge, solve(challenge), clock))
    assert lost.json()["error"]["code"] == "popw_probe_loss"

def test_answer_after_a_restart_is_judged_against_the_stored_challenge(
        agent: Callable[..., LiveNode], make_app: Callable[..., TestClient],
        clock: VirtualClock) -> None:
    node = agent("gpu-1")
    challenge = challenge_for(node)
    restarted = make_app()
    node.wallet.http = restarted
    moved = LiveNode(node.wallet, "gpu-1")
    moved.login()
    ping(moved, clock, challenge["ping_rounds"])
    clock.advance(2.0)
    verdict = send_answer(node.wallet, "gpu-1", answer_body(challenge, solve(challenge), clock))
    assert verdict.status_code == 200, verdict.text
    again = send_answer(node.wallet, "gpu-1", answer_body(challenge, solve(challenge), clock))
    assert again.json()["error"]["code"] == "popw_replayed"
