"""Liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from orchestrator.api.deps import CtxDep, SessionDep
from orchestrator.services.health import check_database

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The service and its database answer")
def healthz(session: SessionDep) -> dict[str, str]:
    check_database(session)
    return {"status": "ok"}


@router.get("/metrics", summary="Prometheus metrics of this process")
def metrics(ctx: CtxDep) -> Response:
    return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)
