"""Epoch commitments end to end on anvil: the service commits a score root through the outbox
sender, serves each provider's leaf and proof over HTTP, and a third party slashes a
below-threshold provider with it; an above-threshold or tampered proof reverts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.chain.anvil import dev_account
from orchestrator.chain.errors import ContractError
from orchestrator.chain.sdk import MeshAccount, MeshChain
from orchestrator.config import Settings
from orchestrator.db.models import OutboxAction
from orchestrator.domain.types import Tier
from orchestrator.services.outbox.sender import OutboxSender
from orchestrator.telemetry.metrics import MeshMetrics
from protocol.client import Wallet
from tests.clients import LiveNode, VirtualClock, make_wallet
from tests.services.test_placement_gates import pls_of

STAKE = 1_000 * 10**18
pytestmark = [pytest.mark.anvil, pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)]


@pytest.fixture
def stake(chain: MeshChain) -> MeshChain:
    """Free stake is read from the chain itself here."""
    return chain


def hour_of_telemetry(low: LiveNode, good: LiveNode, clock: VirtualClock) -> None:
    """The low node never echoes its probes (all lost); the good one echoes in 5 ms."""
    low.login()
    good.login()
    for _ in range(6):
        sent = low.post(f"/v1/nodes/{low.node_id}/probe")
        assert sent.status_code == 200, sent.text
        good.probe(rtt_s=0.005, clock=clock)
        clock.advance(11)  # past the probe timeout: the low node's last probe is lost
    clock.advance(3600 - 6 * 11.005)


def send_outbox(chain: MeshChain, orchestrator: MeshAccount, factory: sessionmaker[Session],
                clock: VirtualClock) -> None:
    """The sender's periodic passes until every queued action is confirmed (or failed), as
    the service runs them: a row may wait a pass for a transaction ahead of it."""
    sender = OutboxSender(chain, orchestrator, MeshMetrics())
    for _ in range(5):
        with factory.begin() as session:
            after_commit = sender.work(session, clock())
        after_commit()
        with factory() as session:
            if not session.scalars(select(OutboxAction).where(
                    OutboxAction.status.in_(("pending", "sent")))).first():
                return
    raise AssertionError("the outbox did not drain in five passes")


def test_low_score_epoch_root_lets_a_third_party_slash_and_demote_on_chain(
        chain: MeshChain, provider: MeshAccount, other_provider: MeshAccount,
        orchestrator: MeshAccount, stranger: MeshAccount, client: TestClient,
        settings: Settings, clock: VirtualClock, factory: sessionmaker[Session],
        agent: Callable[..., LiveNode]) -> None:
    provider.stake(STAKE)
    other_provider.stake(STAKE)

    def wallet(index: int) -> Wallet:
        return make_wallet(client, clock, chain_id=settings.chain_id,
                      orchestrator_id=settings.orchestrator_id, account=dev_account(index))

    low, good = agent("gpu-low", wallet=wallet(5)), agent("gpu-good", wallet=wallet(6))
    pls = pls_of(client)
    for _ in range(9):  # a sustained low score: 6 h window + the decision delay
        hour_of_telemetry(low, good, clock)
        with factory.begin() as session:
            pls.staking.run_decide(session, now=clock())
    clock.advance(pls.state.config.epoch_s)
    with factory.begin() as session:
        pls.staking.close_last_epoch(session, now=clock())
    epoch = pls.staking.epoch_of(clock()) - 1
    with factory() as session:
        (commit,) = session.scalars(select(OutboxAction).where(OutboxAction.kind == "commit"))
        tiers = list(session.scalars(select(OutboxAction).where(OutboxAction.kind == "tier")))
    assert [(a.payload["provider"], a.payload["tier"]) for a in tiers] == [
        (provider.address, Tier.BACKGROUND)]
    send_outbox(chain, orchestrator, factory, clock)
    assert chain.epoch_root(epoch) == bytes.fromhex(commit.payload["root"][2:])

    proof = client.get(f"/v1/nodes/{provider.address.lower()}/score-proof",
                       params={"epoch": epoch}).json()
    assert proof["root"] == commit.payload["root"] and proof["score_bps"] < 5_000
    bonded_before = chain.provider_stake(provider.address).bonded

    def slash_with(p: dict[str, object], address: str) -> int:
        slash_id, _ = stranger.slash_for_score(
            address, epoch, int(p["score_bps"]),  # type: ignore[call-overload]
            bytes.fromhex(str(p["telemetry_digest"])[2:]),
            [bytes.fromhex(h[2:]) for h in p["proof"]])  # type: ignore[attr-defined]
        return slash_id

    tampered = {**proof, "score_bps": proof["score_bps"] + 1}
    with pytest.raises(ContractError) as forged:
        slash_with(tampered, provider.address)
    assert forged.value.name == "StakeManagerInvalidScoreProof"
    assert slash_with(proof, provider.address) > 0
    after = chain.provider_stake(provider.address)
    assert after.bonded < bonded_before and after.tier == Tier.BACKGROUND

    above = client.get(f"/v1/nodes/{other_provider.address}/score-proof",
                       params={"epoch": epoch}).json()
    assert above["score_bps"] >= 5_000
    with pytest.raises(ContractError) as refused:
        slash_with(above, other_provider.address)
    assert refused.value.name == "StakeManagerScoreAboveThreshold"
    missing = client.get(f"/v1/nodes/{stranger.address}/score-proof", params={"epoch": epoch})
    assert (missing.status_code, missing.json()["error"]["code"]) == (404,
                                                                     "score_not_committed")
