"""Receiving an uploaded blob (size-limited, hash-checked, recorded with who sent it, within
that principal's allowance; a node's large upload is timed as its uplink throughput for PLS),
who may download one, and forgetting uploads nothing claimed.

Storage is bounded by who asks. A wallet (a customer) may keep `wallet_quota_bytes` of
uploads that no job names yet; a node may upload only while it holds a lease or a re-check (or
`node_grace_s` after its last lease ended: the chunks it rendered through a network cut), at
most `node_bytes_per_hour`; all unclaimed uploads together stay under `capacity_bytes`. An
upload that nothing names within `ttl_s` is forgotten, and its blob deleted once no upload of
it is left and nothing names it (`collect_expired`, the upload GC)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from orchestrator.db import blobs as blob_db
from orchestrator.db import leases as lease_db
from orchestrator.db import verification as verification_db
from orchestrator.domain.errors import Forbidden, Invalid, OverQuota, TooLarge
from orchestrator.services import work
from orchestrator.services.pls import PlsService
from orchestrator.services.verification import Verifier
from orchestrator.storage.blobs import BlobError, BlobStore, BlobTooLarge
from orchestrator.telemetry.metrics import MeshMetrics

MIN_TIMED_UPLOAD_BYTES = 1 << 20  # smaller bodies measure the round trip, not the uplink
RATE_WINDOW_S = 3600.0  # a node's upload allowance is per this window
GC_BATCH = 500  # expired uploads one GC pass forgets at most


@dataclass(frozen=True, slots=True)
class UploadLimits:
    """What one principal, and everyone together, may keep stored unclaimed (see the module)."""

    max_blob_bytes: int
    ttl_s: float
    wallet_quota_bytes: int
    capacity_bytes: int
    node_bytes_per_hour: int
    node_grace_s: float


@dataclass(frozen=True, slots=True)
class Sender:
    """Who sends an upload: a wallet, or a node's session (then `node_id` is set)."""

    address: str
    node_id: str | None

    @property
    def uploader(self) -> str:
        return (blob_db.wallet_uploader(self.address) if self.node_id is None
                else blob_db.node_uploader(self.node_id))


def admit(session: Session, *, sender: Sender, size: int, limits: UploadLimits,
          now: float) -> None:
    """Refuse an upload of at most `size` bytes the sender may not make now: a node with no
    lease or re-check (`Forbidden`), or over an allowance (`OverQuota`, with when it frees)."""
    uploader = sender.uploader
    if sender.node_id is not None:
        if not (lease_db.leased_since(session, node_id=sender.node_id,
                                      since=now - limits.node_grace_s)
                or verification_db.holds_check(session, node_id=sender.node_id, now=now)):
            raise Forbidden("upload_not_leased", "a node uploads only for a task or re-check "
                            "it holds; pull a lease first")
        sent, first = blob_db.uploaded_since(session, uploader=uploader,
                                             since=now - RATE_WINDOW_S)
        if sent + size > limits.node_bytes_per_hour:
            frees = RATE_WINDOW_S if first is None else first + RATE_WINDOW_S - now
            raise OverQuota("upload_rate", f"node {sender.node_id} uploaded {sent} bytes in "
                            f"the last hour (at most {limits.node_bytes_per_hour})",
                            retry_after_s=frees)
    else:
        pending = blob_db.pending_upload_bytes(session, uploader=uploader, now=now)
        if pending + size > limits.wallet_quota_bytes:
            soonest = blob_db.next_expiry(session, uploader=uploader, now=now)
            raise OverQuota("upload_quota", f"{sender.address} holds {pending} bytes of "
                            f"uploads no job names yet (at most {limits.wallet_quota_bytes}); "
                            "submit the job that uses them, or wait for them to expire",
                            retry_after_s=limits.ttl_s if soonest is None else soonest - now)
    everyone = blob_db.pending_upload_bytes(session, now=now)
    if everyone + size > limits.capacity_bytes:
        soonest = blob_db.next_expiry(session, now=now)
        raise OverQuota("upload_capacity", "the service's storage for unclaimed uploads is "
                        "full; retry later",
                        retry_after_s=limits.ttl_s if soonest is None else soonest - now)


async def receive(*, sha256: str, chunks: AsyncIterator[bytes], declared_bytes: int | None,
                  sender: Sender, store: BlobStore, limits: UploadLimits,
                  factory: sessionmaker[Session], pls: PlsService, metrics: MeshMetrics,
                  clock: Callable[[], float]) -> int:
    """Admit, store and record the blob; returns its size. A body declared or found over
    `max_blob_bytes` is `TooLarge`, one that does not hash to `sha256` `Invalid`; nothing is
    kept of either. The upload is recorded (and counted against the sender) before its body
    is read, so the GC never deletes a blob that is being sent."""
    max_bytes = limits.max_blob_bytes
    if declared_bytes is not None and declared_bytes > max_bytes:
        metrics.upload_errors.labels("blob_too_large").inc()
        raise TooLarge("blob_too_large", f"at most {max_bytes} bytes")
    uploader = sender.uploader
    with factory.begin() as session:
        now = clock()
        admit(session, sender=sender, size=max_bytes if declared_bytes is None
              else declared_bytes, limits=limits, now=now)
        reserved = blob_db.reserve_upload(
            session, sha256=sha256, uploader=uploader,
            size=max_bytes if declared_bytes is None else declared_bytes, now=now,
            expires_at=now + limits.ttl_s)
    started = time.perf_counter()
    try:
        size = await store.put_stream(sha256, chunks, max_bytes=max_bytes)
    except BlobError as exc:
        if reserved:
            with factory.begin() as session:
                blob_db.forget_reservation(session, sha256=sha256, uploader=uploader)
        metrics.upload_errors.labels(exc.code).inc()
        kind = TooLarge if isinstance(exc, BlobTooLarge) else Invalid
        raise kind(exc.code, str(exc)) from None
    elapsed = time.perf_counter() - started
    with factory.begin() as session:
        blob_db.add_blob(session, sha256=sha256, size=size, now=clock())
        blob_db.settle_upload(session, sha256=sha256, uploader=uploader, size=size)
        if sender.node_id is not None and size >= MIN_TIMED_UPLOAD_BYTES and elapsed > 0:
            pls.ingest.record_upload(session, node_id=sender.node_id,
                                     mbps=size * 8 / 1e6 / elapsed, now=clock())
    return size


def lacking(session: Session, *, address: str, hashes: Iterable[str], store: BlobStore,
            now: float) -> list[str]:
    """The distinct `hashes`, sorted, that the wallet at `address` must still upload before a
    job of its may name them: those it holds no upload of (claimed by a job, or unclaimed and
    unexpired), or whose blob is no longer stored. Another principal's upload of the same
    bytes does not count: a job names only blobs its customer has shown it holds."""
    wanted = set(hashes)
    held = blob_db.uploaded(session, uploader=blob_db.wallet_uploader(address), hashes=wanted,
                            now=now)
    return sorted(sha256 for sha256 in wanted if sha256 not in held or not store.exists(sha256))


def check_readable(session: Session, *, sha256: str, node_id: str, verifier: Verifier,
                   now: float) -> None:
    """Refuse (`Forbidden`) unless the node holds a lease that reads the blob: an input or
    checkpoint (with the parts recorded for it) of a task it runs, or an input of a re-check
    it leases."""
    readable = work.readable_blobs(session, node_id=node_id)
    readable |= verifier.readable_blobs(session, node_id=node_id, now=now)
    if sha256 not in readable:
        raise Forbidden("blob_not_leased",
                        "a node reads only the inputs and checkpoints of tasks it holds")


def collect_expired(session: Session, *, store: BlobStore, now: float) -> list[str]:
    """Forget uploads nothing claimed before they expired, and delete the blobs that leaves
    unnamed (their rows locked meanwhile). Returns the blobs deleted."""
    orphans = blob_db.forget_expired_uploads(session, now=now, limit=GC_BATCH)
    for sha256 in orphans:
        store.delete(sha256)
    return orphans
