"""Placement against anvil with its two stake readers: candidates are ranked by the free stake
the indexed events show (no chain call per candidate), and the chain call still decides at
the moment a collateral is committed, so an index that lags a drop in stake over-commits
nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.chain.anvil import dev_account, set_balance
from orchestrator.chain.indexer import ChainIndexReader
from orchestrator.chain.sdk import MeshChain
from orchestrator.config import Settings
from orchestrator.db import nodes as node_db
from orchestrator.db.models import OutboxAction
from orchestrator.domain.chain_views import ProviderStake
from orchestrator.domain.matching import Candidate
from orchestrator.domain.types import TaskNeeds
from orchestrator.services.chain_events import ChainIndexer, EventDispatch, IndexedStake
from orchestrator.services.pls import PlsService
from protocol.client import Wallet
from tests.builders import TOKEN, make_job
from tests.clients import LiveNode, VirtualClock, make_wallet
from tests.services.conftest import AppMaker

pytestmark = pytest.mark.anvil


class CountingChain:
    """The chain's own stake view, counting each call (the decision's reads)."""

    def __init__(self, chain: MeshChain) -> None:
        self.chain = chain
        self.reads = 0

    def provider_stake(self, provider: str) -> ProviderStake:
        self.reads += 1
        return self.chain.provider_stake(provider)


def index_all(mesh: MeshChain, factory: sessionmaker[Session]) -> None:
    """Store every mesh event up to the head (provisional ones count for the listing)."""
    indexer = ChainIndexer(lambda: ChainIndexReader(mesh, finality_tag="none"),
                           EventDispatch(), margin=2)
    while True:
        with factory.begin() as session:
            report = indexer.run(session, time.time())
        if report.next_block > report.head:
            return


def staked_wallet(mesh: MeshChain, client: TestClient, clock: VirtualClock,
                  settings: Settings) -> tuple[LocalAccount, Wallet]:
    """A funded account (20 tokens to stake) and its signing client."""
    account = Account.create()
    set_balance(mesh.w3, account.address, 10**18)
    mesh.account(dev_account(0)).mint(account.address, 20 * TOKEN)
    return account, make_wallet(client, clock, chain_id=settings.chain_id,
                                orchestrator_id=settings.orchestrator_id, account=account)


def candidate(factory: sessionmaker[Session], node_id: str) -> Candidate:
    with factory() as session:
        node = node_db.get_node(session, node_id=node_id)
        assert node is not None
        return Candidate(node_db.node_spec(node), 1)


def indexed_app(make_app: AppMaker, mesh: MeshChain, factory: sessionmaker[Session]
                ) -> tuple[CountingChain, TestClient, PlsService]:
    """The service ranking on the indexed stake and deciding on counted chain calls."""
    counting = CountingChain(mesh)
    client = make_app(stake_reader=counting, listing_reader=IndexedStake(factory))
    return counting, client, client.app.state.ctx.pls  # type: ignore[attr-defined]


def test_a_bond_seen_in_the_index_changes_the_ranking_with_no_chain_call(
        make_app: AppMaker, mesh: MeshChain, agent: Callable[..., LiveNode],
        settings: Settings, factory: sessionmaker[Session], clock: VirtualClock) -> None:
    counting, client, pls = indexed_app(make_app, mesh, factory)
    first, first_wallet = staked_wallet(mesh, client, clock, settings)
    second, second_wallet = staked_wallet(mesh, client, clock, settings)
    agent("gpu-a", wallet=first_wallet)
    agent("gpu-b", wallet=second_wallet)
    mesh.account(first).stake(10 * TOKEN)
    index_all(mesh, factory)
    needs = TaskNeeds(value=TOKEN)
    both = [candidate(factory, "gpu-a"), candidate(factory, "gpu-b")]
    assert [node for node, _ in pls.placement.rank(both, needs, clock())] == ["gpu-a"]
    mesh.account(second).stake(10 * TOKEN)
    clock.advance(pls.state.config.stake_ttl_s + 1)  # past the listing's cache
    ranked = pls.placement.rank(both, needs, clock())
    assert [node for node, _ in ranked] == ["gpu-a"]  # not indexed
    index_all(mesh, factory)
    clock.advance(pls.state.config.stake_ttl_s + 1)
    ranked = pls.placement.rank(both, needs, clock())
    assert sorted(node for node, _ in ranked) == ["gpu-a", "gpu-b"]
    assert counting.reads == 0


def test_an_index_lagging_an_unbond_cannot_over_commit_the_stake(
        make_app: AppMaker, mesh: MeshChain, agent: Callable[..., LiveNode],
        settings: Settings, factory: sessionmaker[Session], clock: VirtualClock) -> None:
    counting, client, pls = indexed_app(make_app, mesh, factory)
    account, wallet = staked_wallet(mesh, client, clock, settings)
    node = agent("gpu-a", wallet=wallet)
    provider = mesh.account(account)
    provider.stake(10 * TOKEN)
    index_all(mesh, factory)
    provider.request_unbond(10 * TOKEN)  # on the chain, not yet in the index
    make_job(factory, value=TOKEN, now=clock())
    assert pls.state.listing.free(wallet.address, clock()) == 10 * TOKEN  # the stale listing
    pull = client.post("/v1/nodes/gpu-a/lease",  # this app, not the `agent` fixture's
                       headers={"authorization": f"Bearer {node.token}"})
    assert pull.status_code == 204, pull.text
    assert counting.reads >= 1  # the decision asked the chain, which holds no free stake
    with factory() as session:
        assert list(session.scalars(select(OutboxAction))) == []
