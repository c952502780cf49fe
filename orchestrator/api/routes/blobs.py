"""Streamed, size-limited, hash-checked uploads of checkpoints and results; large ones are
timed, as the node's upload throughput for PLS."""

from __future__ import annotations

import re
import time

from fastapi import APIRouter, Request

from orchestrator.api.deps import CtxDep, NodeDep
from orchestrator.api.errors import ApiError
from orchestrator.api.schemas import BlobOut
from orchestrator.db import crud
from orchestrator.storage.blobs import BlobError, BlobTooLarge

router = APIRouter(tags=["blobs"])
SHA256 = re.compile(r"^[0-9a-f]{64}$")
MIN_TIMED_UPLOAD_BYTES = 1 << 20  # smaller bodies measure the round trip, not the uplink


@router.put("/blobs/{sha256}", response_model=BlobOut,
            summary="Upload a blob under its sha256 (streamed; checked on arrival)")
async def upload(sha256: str, request: Request, claims: NodeDep, ctx: CtxDep) -> BlobOut:
    if not SHA256.fullmatch(sha256):
        raise ApiError(422, "invalid_sha256", "the name must be a lowercase hex sha256")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > ctx.settings.max_blob_bytes:
        ctx.metrics.upload_errors.labels("blob_too_large").inc()
        raise ApiError(413, "blob_too_large", f"at most {ctx.settings.max_blob_bytes} bytes")
    started = time.perf_counter()
    try:
        size = await ctx.blobs.put_stream(sha256, request.stream(),
                                          max_bytes=ctx.settings.max_blob_bytes)
    except BlobError as exc:
        ctx.metrics.upload_errors.labels(exc.code).inc()
        raise ApiError(413 if isinstance(exc, BlobTooLarge) else 422, exc.code, str(exc)) from None
    elapsed = time.perf_counter() - started
    with ctx.factory.begin() as session:
        crud.add_blob(session, sha256=sha256, size=size, now=ctx.now())
        if size >= MIN_TIMED_UPLOAD_BYTES and elapsed > 0:
            ctx.pls.record_upload(session, node_id=claims.node_id,
                                  mbps=size * 8 / 1e6 / elapsed, now=ctx.now())
    return BlobOut(sha256=sha256, size=size)
