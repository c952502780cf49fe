"""Predictive Latency Staking routes: agent GPU telemetry, orchestrator-timed ping-pong
probes, the PoPW handshake, and epoch score proofs anyone can take on chain."""

from __future__ import annotations

from typing import Annotated

from eth_utils import to_checksum_address
from fastapi import APIRouter, Depends, Query, Request

from orchestrator.api.arrival import arrived_at
from orchestrator.api.auth import SignedRequest
from orchestrator.api.deps import (
    CtxDep,
    NodeDep,
    NonceAfterValidation,
    SessionDep,
    SignedDep,
    accept_signed,
    verify_signed_body,
)
from orchestrator.api.errors import ApiError, errors
from orchestrator.api.schemas import (
    NVML_EXTRAS,
    SAFE_INT,
    AcceptedOut,
    AddressPath,
    AnswerIn,
    ChallengeIn,
    ChallengeOut,
    GpuSampleIn,
    GpuSamplesIn,
    NodeIdPath,
    NodeScoreOut,
    ProbeEchoIn,
    ProbeEchoOut,
    ProbeOut,
    ScoreProofOut,
    VerdictOut,
)
from orchestrator.domain.errors import Forbidden, Invalid, Missing, Refused
from orchestrator.domain.ids import hex0x
from orchestrator.domain.popw import PopwReason, PopwVerdict
from orchestrator.domain.reliability import GpuSample
from orchestrator.services import nodes

router = APIRouter(tags=["pls"], route_class=NonceAfterValidation)

REFUSAL_STATUS = {PopwReason.UNKNOWN_CHALLENGE: 404, PopwReason.REPLAYED: 409,
                  PopwReason.FORGED: 403, PopwReason.WRONG_NODE: 403}


def gpu_samples(samples: list[GpuSampleIn]) -> list[GpuSample]:
    return [GpuSample(**sample.model_dump(exclude=set(NVML_EXTRAS))) for sample in samples]


def nvml_extras(samples: list[GpuSampleIn]) -> list[dict[str, float]]:
    return [{name: float(value) for name, value in sample.model_dump(
        include=set(NVML_EXTRAS), exclude_none=True).items()} for sample in samples]


@router.post("/nodes/{node_id}/telemetry/gpu", response_model=AcceptedOut,
             responses=errors(Missing, Forbidden, Invalid),
             summary="Agent-reported GPU samples (session token), up to 120 per batch")
def report_gpu(node_id: NodeIdPath, body: GpuSamplesIn, claims: NodeDep, session: SessionDep,
               ctx: CtxDep) -> AcceptedOut:
    nodes.record_gpu(session, node_id=claims.node_id, pls=ctx.pls,
                     samples=gpu_samples(body.samples), extras=nvml_extras(body.samples),
                     now=ctx.now())
    return AcceptedOut(accepted=len(body.samples))


@router.post("/nodes/{node_id}/probe", response_model=ProbeOut,
             responses=errors(Missing, Forbidden),
             summary="Start a ping-pong probe: echo the nonce back at once (RTT is timed here)")
def start_probe(node_id: NodeIdPath, claims: NodeDep, session: SessionDep, ctx: CtxDep) -> ProbeOut:
    nonce, sent = nodes.issue_probe(session, node_id=claims.node_id, pls=ctx.pls, clock=ctx.now)
    return ProbeOut(nonce=hex0x(nonce), sent_at=sent)


@router.post("/nodes/{node_id}/probe/echo", response_model=ProbeEchoOut,
             responses=errors(Missing, Forbidden),
             summary="Echo a probe nonce; unanswered probes count as lost")
def echo_probe(node_id: NodeIdPath, body: ProbeEchoIn, claims: NodeDep, session: SessionDep,
               ctx: CtxDep, request: Request) -> ProbeEchoOut:
    return ProbeEchoOut(rtt_ms=nodes.echo_probe(session, node_id=claims.node_id, pls=ctx.pls,
                                                nonce=body.nonce,
                                                now=arrived_at(request, ctx.now())))


@router.post("/nodes/{node_id}/popw/challenge", response_model=ChallengeOut,
             responses=errors(Missing, Forbidden, Invalid),
             summary="Ask for a PoPW challenge (signed by the node's provider)")
def challenge(node_id: NodeIdPath, body: ChallengeIn, signed: SignedDep, session: SessionDep,
              ctx: CtxDep) -> ChallengeOut:
    issued = nodes.issue_challenge(session, node_id=node_id, address=signed.address,
                                   pls=ctx.pls, gpu_class=body.gpu_class, now=ctx.now())
    return ChallengeOut(nonce=hex0x(issued.nonce), gpu_class=issued.gpu_class,
                        size=issued.size, rounds=issued.rounds,
                        spot_checks=issued.spot_checks, ping_rounds=issued.ping_rounds,
                        issued_at=issued.issued_at, deadline=issued.deadline)


async def answer_signature(request: Request, ctx: CtxDep) -> SignedRequest | None:
    """The answer's signer, or None when the signature is missing or does not verify: the
    handshake then states `forged` instead of a generic 401. A valid request's nonce is burnt
    like any signed request's."""
    body = await request.body()
    try:
        signed = verify_signed_body(request, ctx, body)
    except ApiError:
        return None

    def replayed_answer() -> ApiError:
        ctx.metrics.handshakes.labels("failed", PopwReason.REPLAYED.value).inc()
        return ApiError(409, "popw_replayed", "this signed answer was already sent")

    return accept_signed(request, ctx, lambda: signed, on_replay=replayed_answer)


AnswerSignature = Annotated[SignedRequest | None, Depends(answer_signature)]


def verdict_out(verdict: PopwVerdict) -> VerdictOut:
    return VerdictOut(node_id=verdict.node_id, passed=verdict.passed, tier=int(verdict.tier),
                      decided_at=verdict.decided_at, expires_at=verdict.expires_at,
                      reasons=[r.value for r in verdict.reasons])


@router.post("/nodes/{node_id}/popw/answer", response_model=VerdictOut,
             responses=errors(Missing, Forbidden, Refused, Invalid),
             summary="Answer a PoPW challenge (signed); a failure states its reason code")
def answer(node_id: NodeIdPath, body: AnswerIn, signed: AnswerSignature, session: SessionDep,
           ctx: CtxDep) -> VerdictOut:
    verdict = nodes.judge_answer(
        session, node_id=node_id, pls=ctx.pls, nonce=body.nonce, answer_b64=body.answer,
        signer=None if signed is None else signed.address,
        gpu_under_load=gpu_samples(body.gpu_under_load), now=ctx.now())
    if not verdict.passed:
        reason = verdict.reasons[0]
        raise ApiError(REFUSAL_STATUS.get(reason, 422), f"popw_{reason.value}",
                       f"handshake failed: {reason.value}")
    return verdict_out(verdict)


@router.get("/nodes/{node_id}/popw", response_model=VerdictOut,
            responses=errors(Missing),
            summary="The node's latest PoPW verdict")
def latest_verdict(node_id: NodeIdPath, session: SessionDep) -> VerdictOut:
    record = nodes.latest_verdict(session, node_id=node_id)
    return VerdictOut(node_id=record.node_id, passed=record.passed, tier=record.tier,
                      decided_at=record.decided_at, expires_at=record.expires_at,
                      reasons=list(record.reasons))


@router.get("/nodes/{node_id}/score", response_model=NodeScoreOut,
            responses=errors(Missing),
            summary="The node's Reliability Score over a task duration, and its usable tier")
def node_score(node_id: NodeIdPath, session: SessionDep, ctx: CtxDep,
               duration_s: Annotated[float, Query(gt=0, le=7 * 86400)] = 3600.0
               ) -> NodeScoreOut:
    score = nodes.node_score(session, node_id=node_id, pls=ctx.pls, duration_s=duration_s,
                             now=ctx.now())
    parts = score.parts
    return NodeScoreOut(node_id=node_id, duration_s=duration_s, rs=parts.calibrated,
                        survival=parts.pooled, pass_rate=parts.pass_rate,
                        stability=parts.stability, thermal=parts.thermal, tier=score.tier)


@router.get("/nodes/{address}/score-proof", response_model=ScoreProofOut,
            responses=errors(Missing),
            summary="A provider's committed epoch score and its Merkle proof (public)")
def score_proof(address: AddressPath, session: SessionDep, ctx: CtxDep,
                epoch: Annotated[int, Query(ge=0, lt=SAFE_INT)]) -> ScoreProofOut:
    proof = ctx.pls.staking.score_proof(session, provider=to_checksum_address(address),
                                        epoch=epoch)
    if proof is None:
        raise ApiError(404, "score_not_committed",
                       f"no committed score for {address} in epoch {epoch}")
    return ScoreProofOut(epoch=proof.epoch, root=hex0x(proof.root),
                         provider=proof.provider, score_bps=proof.score_bps,
                         telemetry_digest=hex0x(proof.telemetry_digest),
                         proof=[hex0x(p) for p in proof.proof])
