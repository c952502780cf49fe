"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from orchestrator.api.deps import CtxDep, NonceAfterValidation, SessionDep
from orchestrator.api.errors import errors
from orchestrator.domain.errors import Unavailable
from orchestrator.services.health import check_database

router = APIRouter(tags=["health"], route_class=NonceAfterValidation)


@router.get("/healthz", responses=errors(Unavailable),
            summary="The service and its database answer")
def healthz(session: SessionDep) -> dict[str, str]:
    check_database(session)
    return {"status": "ok"}


@router.get("/metrics", response_class=PlainTextResponse,
            responses={200: {"description": "Prometheus text exposition format"}},
            summary="Prometheus metrics of this process (the dashboard's service figures too)")
def metrics(ctx: CtxDep) -> Response:
    return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)
