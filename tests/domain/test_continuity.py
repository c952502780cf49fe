"""Same process across a network cut: a same-session proof of new rendered chunks withdraws
a pending abandonment; forged, replayed, wrong-session and no-progress proofs do not."""

from __future__ import annotations

import hashlib
import os

import pytest

from orchestrator.domain.continuity import ChunkMark, ProgressProof, session_address, sign_progress
from orchestrator.domain.slashing import (
    ProgressVerdict,
    SlashingConfig,
    SlashReason,
    StakingPolicy,
)

CONFIG = SlashingConfig()
EVIDENCE = b"\x11" * 32
BONDED: dict[str, int] = {}
CUT_AT = 1_000.0  # the DEAD verdict
BACK_AT = CUT_AT + CONFIG.reconnect_grace_s + 60.0  # a cut longer than the grace


def chunk(name: str, at: float) -> ChunkMark:
    return ChunkMark(hashlib.sha256(name.encode()).digest(), at)


def cut_node(key: bytes, known: tuple[ChunkMark, ...] = ()) -> StakingPolicy:
    """n0 logged in with `key`, held task t1 with `known` checkpoints, and went DEAD."""
    policy = StakingPolicy(CONFIG)
    for i in range(10):
        policy.register(f"n{i}", f"0x{i:040x}", "eu", f"AS{i}", now=0.0)
    policy.session_bound("n0", session_address(key))
    policy.node_departed("n0", CUT_AT)
    policy.task_abandoned("n0", "t1", 10**18, CUT_AT, EVIDENCE, [c.sha256 for c in known])
    return policy


def slashes_after_delay(policy: StakingPolicy) -> list[SlashReason]:
    actions = policy.decide(CUT_AT + CONFIG.decision_delay_s + 1, BONDED)
    return [s.reason for s in actions.slashes]


def show(policy: StakingPolicy, proof: ProgressProof,
         verified: tuple[ChunkMark, ...] | None = None) -> ProgressVerdict:
    marks = proof.chunks if verified is None else verified
    return policy.progress_shown(proof, [c.sha256 for c in marks], BACK_AT)


def test_without_a_proof_a_cut_past_the_grace_is_an_abandonment() -> None:
    policy = cut_node(os.urandom(32))
    policy.node_returned("n0", BACK_AT)
    assert slashes_after_delay(policy) == [SlashReason.ABANDONMENT]


def test_same_session_proof_of_new_chunks_withdraws_the_abandonment() -> None:
    key = os.urandom(32)
    old = (chunk("c0", CUT_AT - 60),)
    policy = cut_node(key, old)
    proof = sign_progress(key, "n0", "t1", (*old, chunk("c1", CUT_AT + 600)), BACK_AT)
    assert show(policy, proof) is ProgressVerdict.WITHDRAWN
    policy.node_returned("n0", BACK_AT)
    assert slashes_after_delay(policy) == []


def test_a_node_that_idled_shows_no_progress_and_is_slashed() -> None:
    key = os.urandom(32)
    old = (chunk("c0", CUT_AT - 60), chunk("c1", CUT_AT - 30))
    policy = cut_node(key, old)
    assert show(policy, sign_progress(key, "n0", "t1", old, BACK_AT)) is (
        ProgressVerdict.NO_PROGRESS)
    assert show(policy, sign_progress(key, "n0", "t1", (), BACK_AT)) is (
        ProgressVerdict.NO_PROGRESS)
    assert slashes_after_delay(policy) == [SlashReason.ABANDONMENT]


def test_old_chunks_redated_after_the_verdict_are_no_progress() -> None:
    key = os.urandom(32)
    old = chunk("c0", CUT_AT - 60)
    policy = cut_node(key, (old,))
    redated = sign_progress(key, "n0", "t1", (ChunkMark(old.sha256, CUT_AT + 600),), BACK_AT)
    assert show(policy, redated) is ProgressVerdict.NO_PROGRESS
    assert slashes_after_delay(policy) == [SlashReason.ABANDONMENT]


def test_chunks_dated_before_the_verdict_or_in_the_future_are_no_progress() -> None:
    key = os.urandom(32)
    policy = cut_node(key)
    early = sign_progress(key, "n0", "t1", (chunk("c1", CUT_AT - 1),), BACK_AT)
    late = sign_progress(key, "n0", "t1", (chunk("c2", BACK_AT + 1),), BACK_AT)
    assert show(policy, early) is ProgressVerdict.NO_PROGRESS
    assert show(policy, late) is ProgressVerdict.NO_PROGRESS
    assert slashes_after_delay(policy) == [SlashReason.ABANDONMENT]


def test_claimed_chunks_whose_content_was_not_verified_are_no_progress() -> None:
    key = os.urandom(32)
    policy = cut_node(key)
    proof = sign_progress(key, "n0", "t1", (chunk("c1", CUT_AT + 600),), BACK_AT)
    assert show(policy, proof, verified=()) is ProgressVerdict.NO_PROGRESS
    assert slashes_after_delay(policy) == [SlashReason.ABANDONMENT]


def test_a_new_process_with_a_new_session_key_cannot_withdraw() -> None:
    old_key, new_key = os.urandom(32), os.urandom(32)
    policy = cut_node(old_key)
    policy.session_bound("n0", session_address(new_key))  # the restarted agent's login
    proof = sign_progress(new_key, "n0", "t1", (chunk("c1", CUT_AT + 600),), BACK_AT)
    assert show(policy, proof) is ProgressVerdict.WRONG_SESSION
    assert slashes_after_delay(policy) == [SlashReason.ABANDONMENT]


def test_a_node_without_a_bound_session_cannot_withdraw() -> None:
    key = os.urandom(32)
    policy = StakingPolicy(CONFIG)
    policy.register("n0", f"0x{0:040x}", "eu", "AS0", now=0.0)
    policy.node_departed("n0", CUT_AT)
    policy.task_abandoned("n0", "t1", 10**18, CUT_AT, EVIDENCE)
    proof = sign_progress(key, "n0", "t1", (chunk("c1", CUT_AT + 600),), BACK_AT)
    assert show(policy, proof) is ProgressVerdict.WRONG_SESSION


def test_tampered_and_malformed_proofs_are_refused() -> None:
    key = os.urandom(32)
    policy = cut_node(key)
    signed = sign_progress(key, "n0", "t1", (chunk("c1", CUT_AT + 600),), BACK_AT)
    tampered = ProgressProof("n0", "t1", (chunk("c9", CUT_AT + 600),), BACK_AT, signed.signature)
    malformed = ProgressProof("n0", "t1", signed.chunks, BACK_AT, b"\x00" * 65)
    assert show(policy, tampered) is ProgressVerdict.WRONG_SESSION  # recovers another key
    assert show(policy, malformed) is ProgressVerdict.FORGED
    assert slashes_after_delay(policy) == [SlashReason.ABANDONMENT]


def test_a_proof_for_another_nodes_task_or_another_task_is_refused() -> None:
    key = os.urandom(32)
    policy = cut_node(key)
    marks = (chunk("c1", CUT_AT + 600),)
    assert show(policy, sign_progress(key, "n1", "t1", marks, BACK_AT)) is (
        ProgressVerdict.NOT_PENDING)
    assert show(policy, sign_progress(key, "n0", "t2", marks, BACK_AT)) is (
        ProgressVerdict.NOT_PENDING)
    assert slashes_after_delay(policy) == [SlashReason.ABANDONMENT]


def test_a_replayed_proof_withdraws_nothing_more() -> None:
    key = os.urandom(32)
    policy = cut_node(key)
    marks = (chunk("c1", CUT_AT + 600),)
    proof = sign_progress(key, "n0", "t1", marks, BACK_AT)
    assert show(policy, proof) is ProgressVerdict.WITHDRAWN
    assert show(policy, proof) is ProgressVerdict.NOT_PENDING
    # The same chunks cannot excuse a later abandonment of another task either.
    later = BACK_AT + 100.0
    policy.node_departed("n0", later)
    policy.task_abandoned("n0", "t2", 10**18, later, EVIDENCE)
    redated = (ChunkMark(marks[0].sha256, later + 5),)
    replay = sign_progress(key, "n0", "t2", redated, later + 10)
    assert policy.progress_shown(replay, [marks[0].sha256], later + 10) is (
        ProgressVerdict.NO_PROGRESS)


def test_a_matured_abandonment_is_not_withdrawn() -> None:
    key = os.urandom(32)
    policy = cut_node(key)
    assert slashes_after_delay(policy) == [SlashReason.ABANDONMENT]
    proof = sign_progress(key, "n0", "t1", (chunk("c1", CUT_AT + 600),), BACK_AT)
    assert show(policy, proof) is ProgressVerdict.NOT_PENDING


# ----- the signed manifest itself ------------------------------------------------------------
KNOWN_KEY = (1).to_bytes(32, "big")  # the well-known key 0x...01 of every Ethereum tutorial
KNOWN_ADDRESS = "0x7E5F4552091A69125d5DfCb7b8C2659029395Bdf"


def test_a_session_key_is_named_by_its_checksummed_address() -> None:
    assert session_address(KNOWN_KEY) == KNOWN_ADDRESS


def test_a_signed_manifest_names_its_session_key_as_signer() -> None:
    marks = (chunk("c0", 10.0), chunk("c1", 20.5))
    proof = sign_progress(KNOWN_KEY, "n0", "t1", marks, 30.0)
    assert (proof.node_id, proof.task_id, proof.chunks, proof.resumed_at) == (
        "n0", "t1", marks, 30.0)
    assert len(proof.signature) == 65
    assert proof.signer() == KNOWN_ADDRESS


def test_every_field_of_the_manifest_is_signed() -> None:
    marks = (chunk("c0", 10.0), chunk("c1", 20.5))
    signed = sign_progress(KNOWN_KEY, "n0", "t1", marks, 30.0)
    changed = [
        ProgressProof("n1", "t1", marks, 30.0, signed.signature),
        ProgressProof("n0", "t2", marks, 30.0, signed.signature),
        ProgressProof("n0", "t1", (marks[1], marks[0]), 30.0, signed.signature),
        ProgressProof("n0", "t1", marks[:1], 30.0, signed.signature),
        ProgressProof("n0", "t1", (marks[0], chunk("c9", 20.5)), 30.0, signed.signature),
        ProgressProof("n0", "t1", (marks[0], chunk("c1", 21.5)), 30.0, signed.signature),
        ProgressProof("n0", "t1", marks, 31.0, signed.signature),
    ]
    for proof in changed:
        signer = proof.signer()
        assert signer is not None and signer != KNOWN_ADDRESS, proof


def test_times_are_signed_to_the_millisecond() -> None:
    signed = sign_progress(KNOWN_KEY, "n0", "t1", (chunk("c0", 10.0),), 30.0)
    # To the nearest millisecond: just under half a millisecond later is the same moment.
    within = ProgressProof("n0", "t1", (chunk("c0", 10.0004996),), 30.0004996, signed.signature)
    assert within.signer() == KNOWN_ADDRESS
    later = ProgressProof("n0", "t1", (chunk("c0", 10.001),), 30.0, signed.signature)
    assert later.signer() != KNOWN_ADDRESS
    resumed_later = ProgressProof("n0", "t1", (chunk("c0", 10.0),), 30.001, signed.signature)
    assert resumed_later.signer() != KNOWN_ADDRESS


def test_a_chunk_hash_that_is_not_32_bytes_is_refused() -> None:
    short = ChunkMark(b"\x01" * 31, 10.0)
    with pytest.raises(ValueError, match=r"^a chunk hash is 32 bytes$"):
        sign_progress(KNOWN_KEY, "n0", "t1", (short,), 30.0)
    signed = sign_progress(KNOWN_KEY, "n0", "t1", (chunk("c0", 10.0),), 30.0)
    assert ProgressProof("n0", "t1", (short,), 30.0, signed.signature).signer() is None


def test_a_malformed_signature_has_no_signer() -> None:
    marks = (chunk("c0", 10.0),)
    signed = sign_progress(KNOWN_KEY, "n0", "t1", marks, 30.0)
    assert ProgressProof("n0", "t1", marks, 30.0, signed.signature[:64]).signer() is None
    assert ProgressProof("n0", "t1", marks, 30.0, b"\x00" * 65).signer() is None


def test_a_chunk_rendered_at_the_verdict_is_no_progress_one_rendered_just_now_is() -> None:
    """Rendered after the verdict and no later than now: the instant of the verdict is not
    after it; the moment of the proof itself is within it."""
    key = os.urandom(32)
    policy = cut_node(key)
    at_verdict = sign_progress(key, "n0", "t1", (chunk("c1", CUT_AT),), BACK_AT)
    assert show(policy, at_verdict) is ProgressVerdict.NO_PROGRESS
    just_now = sign_progress(key, "n0", "t1", (chunk("c2", BACK_AT),), BACK_AT)
    assert show(policy, just_now) is ProgressVerdict.WITHDRAWN


def test_a_withdrawn_task_reported_abandoned_again_is_not_slashed() -> None:
    key = os.urandom(32)
    policy = cut_node(key)
    proof = sign_progress(key, "n0", "t1", (chunk("c1", CUT_AT + 600),), BACK_AT)
    assert show(policy, proof) is ProgressVerdict.WITHDRAWN
    policy.task_abandoned("n0", "t1", 10**18, BACK_AT + 1, EVIDENCE)  # reported once more
    assert policy.pending_since("t1") is None
    assert policy.decide(BACK_AT + CONFIG.decision_delay_s + 2, BONDED).slashes == ()


def test_every_chunk_that_withdrew_a_slash_stays_spent() -> None:
    """Two withdrawals, each with a chunk of its own; a third cut cannot reuse the first's."""
    key = os.urandom(32)
    policy = cut_node(key)
    first = chunk("c1", CUT_AT + 600)
    assert show(policy, sign_progress(key, "n0", "t1", (first,), BACK_AT)) is (
        ProgressVerdict.WITHDRAWN)
    at = BACK_AT
    for task, name in (("t2", "c2"), ("t3", None)):
        at += 100.0
        policy.node_departed("n0", at)
        policy.task_abandoned("n0", task, 10**18, at, EVIDENCE)
        marks = (chunk(name, at + 5) if name else ChunkMark(first.sha256, at + 5),)
        verdict = policy.progress_shown(sign_progress(key, "n0", task, marks, at + 10),
                                        [m.sha256 for m in marks], at + 10)
        assert verdict is (ProgressVerdict.WITHDRAWN if name else ProgressVerdict.NO_PROGRESS)
        policy.node_returned("n0", at + 10)


def test_a_replayed_withdrawal_settles_the_task_and_spends_its_chunks() -> None:
    """After a restart the stored withdrawals are replayed: the task is never slashed, even
    if reported again, and no replayed chunk can withdraw another slash."""
    key = os.urandom(32)
    policy = cut_node(key)
    policy.withdrawal_replayed("t0", [hashlib.sha256(b"c0").digest()])  # not pending here
    policy.withdrawal_replayed("t1", [hashlib.sha256(b"c1").digest()])
    assert policy.pending_since("t1") is None
    policy.task_abandoned("n0", "t1", 10**18, BACK_AT, EVIDENCE)
    assert policy.pending_since("t1") is None
    later = BACK_AT + 100.0
    policy.task_abandoned("n0", "t2", 10**18, later, EVIDENCE)
    for name, verdict in (("c0", ProgressVerdict.NO_PROGRESS), ("c1", ProgressVerdict.NO_PROGRESS),
                          ("c2", ProgressVerdict.WITHDRAWN)):
        marks = (chunk(name, later + 5),)
        proof = sign_progress(key, "n0", "t2", marks, later + 10)
        assert policy.progress_shown(proof, [marks[0].sha256], later + 10) is verdict
    assert slashes_after_delay(policy) == []
