"""A login names the agent process's ephemeral session key (signed by the wallet): the engine
binds it, the DB keeps it across an orchestrator restart, a new process's login replaces it,
and only a proof signed by the bound key can withdraw a pending abandonment."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db.models import Node
from orchestrator.domain.continuity import ChunkMark, session_address, sign_progress
from orchestrator.domain.slashing import ProgressVerdict, StakingPolicy
from tests.clients import LiveNode, VirtualClock
from tests.services.test_placement_gates import pls_of

EVIDENCE = b"\x22" * 32


def login(node: LiveNode, session_key: str | None) -> int:
    body: dict[str, str] = {"node_id": node.node_id}
    if session_key is not None:
        body["session_key"] = session_key
    return node.wallet.send("POST", "/v1/auth/login", body).status_code


def withdraws(staking: StakingPolicy, node_id: str, key: bytes, task_id: str,
              at: float) -> ProgressVerdict:
    """The node goes DEAD holding `task_id`; `key` signs one chunk rendered after that."""
    staking.node_departed(node_id, at)
    staking.task_abandoned(node_id, task_id, 10**18, at, EVIDENCE)
    mark = ChunkMark(hashlib.sha256(task_id.encode() + key).digest(), at + 60)
    proof = sign_progress(key, node_id, task_id, (mark,), at + 120)
    return staking.progress_shown(proof, [mark.sha256], at + 120)


def test_the_login_binds_the_session_key_and_a_restart_keeps_it(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
        make_app: Callable[..., TestClient], factory: sessionmaker[Session]) -> None:
    node = agent("gpu-1")
    key = os.urandom(32)
    assert login(node, session_address(key).lower()) == 200  # any case; stored checksummed
    with factory() as session:
        stored = session.get(Node, "gpu-1")
        assert stored is not None and stored.session_key == session_address(key)
    assert withdraws(pls_of(client).state.engine.staking, "gpu-1", key, "t1", clock()) is (
        ProgressVerdict.WITHDRAWN)
    restarted = pls_of(make_app()).state.engine.staking  # rebuilt from the DB
    assert withdraws(restarted, "gpu-1", key, "t2", clock()) is ProgressVerdict.WITHDRAWN


def test_a_new_process_login_replaces_the_key(agent: Callable[..., LiveNode], client: TestClient,
                                              clock: VirtualClock) -> None:
    node = agent("gpu-1")
    old, new = os.urandom(32), os.urandom(32)
    assert login(node, session_address(old)) == 200
    assert login(node, session_address(new)) == 200
    staking = pls_of(client).state.engine.staking
    assert withdraws(staking, "gpu-1", old, "t1", clock()) is ProgressVerdict.WRONG_SESSION


def test_a_login_without_a_key_binds_none_and_a_bad_key_is_refused(
        agent: Callable[..., LiveNode], client: TestClient, clock: VirtualClock,
        factory: sessionmaker[Session]) -> None:
    node = agent("gpu-1")  # the fixture logs in without a session key
    staking = pls_of(client).state.engine.staking
    assert withdraws(staking, "gpu-1", os.urandom(32), "t1", clock()) is (
        ProgressVerdict.WRONG_SESSION)
    assert login(node, "0x1234") == 422
    with factory() as session:
        stored = session.get(Node, "gpu-1")
        assert stored is not None and stored.session_key is None
