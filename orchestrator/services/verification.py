"""Verification of results as a use case: commit a finished task's result (Merkle root over its
pixel windows), draw the challenge only then, lease re-checks to other nodes, compare their
decoded pixels, and act on the verdict: a job whose tasks all passed (or were not drawn)
settles on its own through the existing settlement path; a failed result is redone elsewhere,
its node's record and RS take the hit and a slash carries the evidence digest.

A mismatch never blames the node by itself: a third node (another provider) re-renders the
window, and only when it sides with the checker is the result failed. When it sides with the
node, the checker was wrong: its provider's record takes the hit instead and the dispute
counts as an overturned rejection (`VerificationCounts.overturned`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from eth_utils import keccak
from sqlalchemy.orm import Session

from orchestrator.db import jobs as job_db
from orchestrator.db import nodes as node_db
from orchestrator.db import pls as pls_store
from orchestrator.db import statuses as status_db
from orchestrator.db import verification as store
from orchestrator.db.models import Job, Node, Task, VerificationCheck, VerificationCommitment
from orchestrator.domain.checkpointing import plan_chunks
from orchestrator.domain.errors import Invalid, Missing, Refused
from orchestrator.domain.ids import hex0x
from orchestrator.domain.jobs import handed_payload
from orchestrator.domain.lifecycle import (
    CheckStatus,
    JobStatus,
    TaskStatus,
    VerificationStatus,
)
from orchestrator.domain.pixel_comparison import (
    EXACT,
    LeafPixels,
    RenderEnv,
    Tolerance,
    WindowVerdict,
    compare_results,
    compare_window,
    tolerance_for,
)
from orchestrator.domain.reliability import TaskOutcome
from orchestrator.domain.types import NodeHealth, Tier
from orchestrator.domain.verification import (
    Commitment,
    Leaf,
    LeafPart,
    ProviderRecord,
    Redundancy,
    SamplingPolicy,
    agreement,
    challenge_seed,
    pixel_digest,
    sampled_windows,
    window_rows,
    windows_for,
)
from orchestrator.services import settlement, work
from orchestrator.services.pls import PlsService
from orchestrator.storage.blobs import BlobStore
from protocol.images import OutputInvalid, exr_pixels, image_pixels

log = logging.getLogger("orchestrator.verification")
MAX_TIEBREAKS = 3  # per window; past that nobody is blamed and the task is redone


class VerificationError(Refused):
    """A result, check or report the verification rules refuse."""


class VerificationNotFound(VerificationError, Missing):
    """The node, check or blob a report names does not exist."""


class ReportInvalid(VerificationError, Invalid):
    """A result report that contradicts its task (chunks off the plan, wrong sizes)."""


@dataclass(frozen=True, slots=True)
class ChunkRef:
    offset: int
    length: int
    sha256: str


@dataclass(frozen=True, slots=True)
class RenderReport:
    """What a node says it rendered with and which chunk files make up its result."""

    env: RenderEnv | None
    chunks: tuple[ChunkRef, ...]


@dataclass(frozen=True, slots=True)
class CheckResult:
    chunks: tuple[ChunkRef, ...]
    frame_sha256: str | None
    result_sha256: str | None  # a whole non-render result
    env: RenderEnv | None
    render_s: float


class Verifier:
    """The verification use cases over one app's blob store, PLS service and secret."""

    def __init__(self, *, blobs: BlobStore, pls: PlsService, secret: bytes,
                 policy: SamplingPolicy, windows: int = 8, epoch_s: float = 3600.0,
                 check_ttl_s: float = 300.0) -> None:
        self.blobs = blobs
        self.pls = pls
        self.secret = secret
        self.policy = policy
        self.windows = windows
        self.epoch_s = epoch_s
        self.check_ttl_s = check_ttl_s

    # ----- commit and challenge ----------------------------------------------------------
    def complete_task(self, session: Session, *, task_id: int, node_id: str,
                      result_sha256: str, report: RenderReport | None, now: float) -> Task:
        """The node finished: the task is done and its result committed and challenged."""
        task = work.complete_task(session, task_id=task_id, node_id=node_id,
                                  result_sha256=result_sha256, now=now,
                                  report_chunks=[] if report is None
                                  else [chunk.sha256 for chunk in report.chunks])
        self.commit(session, task=task, node_id=node_id, result_sha256=result_sha256,
                    report=report, now=now)
        return task

    def commit(self, session: Session, *, task: Task, node_id: str, result_sha256: str,
               report: RenderReport | None, now: float) -> VerificationCommitment:
        """Record the result's commitment, then draw which windows to re-check."""
        node = node_db.get_node(session, node_id=node_id)
        if node is None:
            raise VerificationNotFound("node_not_found", f"no node {node_id}")
        leaves, windows, rows = self._leaves(task, result_sha256, report)
        commitment = Commitment.of(leaves)
        seed = challenge_seed(self.secret, commitment.root, task.id, task.attempts)
        record = store.record_of(session, provider=node.provider)
        volume = store.windows_delivered(session, provider=node.provider,
                                         since=now - self.epoch_s) + windows
        rate = self.policy.window_rate(record, epoch_windows=volume)
        row = store.add_commitment(
            session, task_id=task.id, job_id=task.job_id, node_id=node_id,
            provider=node.provider, attempt=task.attempts, result_sha256=result_sha256,
            root=hex0x(commitment.root), leaves=[leaf.as_json() for leaf in leaves],
            windows=windows, env=None if report is None or report.env is None
            else report.env.as_json(),
            chunks=[] if report is None else [{"offset": c.offset, "length": c.length,
                                               "sha256": c.sha256} for c in report.chunks],
            policy=self.policy.name, rate=rate, seed=hex0x(seed), detail="",
            created_at=now)
        rule = redundancy_of(task.payload)
        if rule is not None:  # k-of-n: every result runs n times, nothing is sampled
            row.rate = 1.0
            store.set_status(session, commitment=row, target=VerificationStatus.CHECKING,
                             now=now, reason=f"{rule.k}-of-{rule.n} runs on distinct providers")
            for _ in range(rule.n - 1):
                store.add_check(session, commitment=row, window=0, role="replica",
                                recipe=self._recipe(session, task, row, 0, windows, rows), now=now)
            return row
        drawn = sampled_windows(seed, commitment.windows, rate)
        if not drawn:
            store.set_status(session, commitment=row, target=VerificationStatus.TRUSTED, now=now,
                             reason=f"no window drawn at rate {rate:.3f}")
        else:
            store.set_status(session, commitment=row, target=VerificationStatus.CHECKING,
                             now=now, reason=f"windows {drawn} drawn at rate {rate:.3f}")
            for window in drawn:
                store.add_check(session, commitment=row, window=window, role="check",
                                recipe=self._recipe(session, task, row, window, windows, rows),
                                now=now)
        self.settle_if_verified(session, job_id=task.job_id, now=now)
        return row

    def _leaves(self, task: Task, result_sha256: str, report: RenderReport | None
                ) -> tuple[list[Leaf], int, int]:
        """The leaves of a result, how many windows, and the rows of the task's image. A
        render is cut into windows of its frame and of every sample chunk; anything else is
        one leaf, the result file's hash."""
        payload = task.payload
        if payload.get("kind") != "blender":
            return [Leaf(LeafPart.RESULT, 0, 0, 0, bytes.fromhex(result_sha256))], 1, 0
        try:
            frame = self._image(result_sha256)
        except OutputInvalid as exc:
            raise VerificationError("result_invalid", f"the result does not decode: {exc}"
                                    ) from None
        height = frame.shape[0]
        chunks = () if report is None else report.chunks
        plan = plan_chunks(int(payload.get("samples") or 64),
                           int(payload.get("chunk_samples") or payload.get("samples") or 64))
        if chunks and [(c.offset, c.length) for c in chunks] != plan:
            raise ReportInvalid("chunks_not_the_plan",
                                f"the result's chunks are not the task's plan {plan}")
        images = [(c, exr_pixels(self.blobs.path_of(c.sha256))) for c in chunks]
        for chunk, pixels in images:
            if pixels.shape[:2] != frame.shape[:2]:
                raise ReportInvalid("chunk_size", f"chunk {chunk.offset} is "
                                    f"{pixels.shape[:2]}, the frame {frame.shape[:2]}")
        windows = self._window_count(task, height)
        leaves = []
        for window in range(windows):
            top, bottom = self._window_rows(task, window, windows, height)
            leaves.append(Leaf(LeafPart.FRAME, window, 0, 0, pixel_digest(frame[top:bottom])))
            for chunk, pixels in images:
                leaves.append(Leaf(LeafPart.CHUNK, window, chunk.offset, chunk.length,
                                   pixel_digest(pixels[top:bottom])))
        return leaves, windows, height

    def _window_count(self, task: Task, height: int) -> int:
        tiles = int(task.payload.get("tiles", 1))
        if tiles > 1 and not task.payload.get("resolution"):
            return 1  # the frame height is unknown: the whole tile is one window
        return windows_for(height, self.windows)

    @staticmethod
    def _window_rows(task: Task, window: int, windows: int, height: int) -> tuple[int, int]:
        """Rows of `window` in the task's own image (the whole frame, or its tile)."""
        tile, tiles = int(task.payload.get("tile", 0)), int(task.payload.get("tiles", 1))
        if tiles == 1:
            return window_rows(window, windows, height)
        if windows == 1:
            return 0, height
        frame_height = int(task.payload["resolution"][1])
        top = window_rows(tile, tiles, frame_height)[0]
        low, high = window_rows(tile * windows + window, tiles * windows, frame_height)
        return low - top, high - top

    def _recipe(self, session: Session, task: Task, row: VerificationCommitment, window: int,
                windows: int, height: int) -> dict[str, Any]:
        """What the checker runs: the same scene, Blender build, seed (in the .blend), sample
        plan, resolution and pack, restricted to the window (a border render of strip
        `tile * windows + window` of `tiles * windows`)."""
        job = job_db.get_job(session, job_id=task.job_id)
        payload = handed_payload(task.payload, {} if job is None else job.spec)
        recipe: dict[str, Any] = {"task_id": task.id, "window": window, "windows": windows,
                                  "root": row.root, "env": row.env,
                                  "excluded_providers": [row.provider],
                                  # a job restricted to named providers is re-checked by them
                                  "allowed_providers": task.needs.get("providers")}
        if payload.get("kind") == "blender":
            tile, tiles = int(payload.get("tile", 0)), int(payload.get("tiles", 1))
            payload["tile"], payload["tiles"] = tile * windows + window, tiles * windows
            payload["format"] = payload.get("format", "png")
            recipe["rows"] = list(self._window_rows(task, window, windows, height))
        recipe["payload"] = payload
        return recipe

    # ----- checks --------------------------------------------------------------------------
    def lease_check(self, session: Session, *, node: Node, now: float
                    ) -> VerificationCheck | None:
        """A re-check for this node, if one waits that it may run (never its own provider's)."""
        if node.draining or node.health != NodeHealth.ALIVE.value or node.tier < Tier.STANDARD:
            return None
        return store.lease_check(session, node_id=node.id, provider=node.provider, now=now,
                                 ttl_s=self.check_ttl_s,
                                 env=store.node_env(session, node_id=node.id))

    def readable_blobs(self, session: Session, *, node_id: str, now: float) -> set[str]:
        return store.leased_blobs(session, node_id=node_id, now=now)

    def submit_check(self, session: Session, *, check_id: int, node_id: str,
                     result: CheckResult, now: float) -> VerificationCheck:
        locked = store.lock_check(session, check_id=check_id)
        if locked is None:
            raise VerificationNotFound("check_not_found", f"no check {check_id}")
        check, commitment = locked
        if check.status == CheckStatus.VOID.value and check.checker_node == node_id:
            return check  # decided without it meanwhile: nothing to do, nothing wrong
        if check.status != CheckStatus.LEASED.value or check.checker_node != node_id:
            raise VerificationError("check_not_held", f"node {node_id} holds no lease on "
                                    f"check {check_id}")
        work.own_blobs(session, node_id=node_id, carried=set(), now=now, named={
            sha for sha in [c.sha256 for c in result.chunks] + [result.frame_sha256 or ""]
            if sha})
        if commitment.status not in (VerificationStatus.CHECKING.value,
                                     VerificationStatus.DISPUTED.value):
            store.set_check_status(session, check=check, target=CheckStatus.VOID, now=now,
                                   reason=f"commitment already {commitment.status}")
            return check
        node_env = RenderEnv.from_json(commitment.env)
        tolerance = EXACT
        if node_env is not None and result.env is not None:
            found = tolerance_for(node_env, result.env)
            if found is None:  # another Blender build: no comparison, ask someone else
                check.recipe = {**check.recipe, "excluded_providers": [
                    *check.recipe.get("excluded_providers", []), check.checker_provider]}
                store.set_check_status(session, check=check, target=CheckStatus.OPEN, now=now,
                                       reason=f"checker runs Blender {result.env.blender}, "
                                              f"the result {node_env.blender}")
                return check
            tolerance = found
        verdict = self._compare(commitment, check, result, tolerance)
        matched = verdict.matched
        check.result = {"chunks": [asdict(c) for c in result.chunks],
                        "frame_sha256": result.frame_sha256,
                        "result_sha256": result.result_sha256,
                        "env": None if result.env is None else result.env.as_json()}
        check.comparison = verdict.as_json()
        check.render_s = max(result.render_s, 0.0)
        store.set_check_status(session, check=check,
                               target=CheckStatus.MATCHED if matched else CheckStatus.MISMATCHED,
                               now=now, reason=f"{len(verdict.comparisons)} leaves compared")
        self._resolve(session, commitment=commitment, check=check, matched=matched, now=now)
        return check

    def _compare(self, commitment: VerificationCommitment, check: VerificationCheck,
                 result: CheckResult, tolerance: Tolerance) -> WindowVerdict:
        """The checked window of the node's result against the checker's."""
        leaves = [Leaf.from_json(x) for x in commitment.leaves]
        window = [leaf for leaf in leaves if leaf.window == check.window]
        if any(leaf.part is LeafPart.RESULT for leaf in window):
            return compare_results(commitment.result_sha256, result.result_sha256, tolerance)
        return compare_window(self._window_pixels(commitment, check, result, window), tolerance)

    def _window_pixels(self, commitment: VerificationCommitment, check: VerificationCheck,
                       result: CheckResult, window: list[Leaf]
                       ) -> Iterator[tuple[Leaf, LeafPixels | str]]:
        """Each render leaf of the window with its pixels decoded from the stored blobs (the
        node's cut to the window's rows, the checker's whole), or why one side does not
        decode; one leaf at a time."""
        top, bottom = check.recipe["rows"]
        theirs = {(c.offset, c.length): c.sha256 for c in result.chunks}
        ours = {(int(c["offset"]), int(c["length"])): str(c["sha256"])
                for c in commitment.chunks}
        for leaf in window:
            try:
                if leaf.part is LeafPart.FRAME:
                    claimed = self._image(commitment.result_sha256)[top:bottom]
                    checked = (self._image(result.frame_sha256) if result.frame_sha256
                               else None)
                else:
                    claimed = exr_pixels(self.blobs.path_of(
                        ours[(leaf.offset, leaf.length)]))[top:bottom]
                    sha = theirs.get((leaf.offset, leaf.length))
                    checked = None if sha is None else exr_pixels(self.blobs.path_of(sha))
            except OutputInvalid as exc:
                yield leaf, str(exc)
                continue
            yield leaf, LeafPixels(claimed, checked)

    def _image(self, sha256: str) -> np.ndarray:
        return image_pixels(self.blobs.path_of(sha256))

    # ----- verdicts ------------------------------------------------------------------------
    def _resolve(self, session: Session, *, commitment: VerificationCommitment,
                 check: VerificationCheck, matched: bool, now: float) -> None:
        """A mismatch opens a tie-break; a tie-break for the node blames the first checker,
        one that agrees with the first checker fails the result. The result passes once no
        check is left open (every window's latest check then matched)."""
        checks = store.checks_of(session, commitment_id=commitment.id)
        if check.role == "replica":
            self._resolve_replicas(session, commitment, checks, now)
            return
        if check.role == "check" and not matched:
            if commitment.status != VerificationStatus.DISPUTED.value:
                store.set_status(session, commitment=commitment,
                                 target=VerificationStatus.DISPUTED, now=now,
                                 reason=f"window {check.window} mismatched on "
                                        f"{check.checker_node}; tie-break")
            self._tiebreak(session, commitment, check, now)
            return
        if check.role == "tiebreak":
            window_checks = [c for c in checks if c.window == check.window]
            wrong = [c for c in window_checks
                     if c.id != check.id and c.status == CheckStatus.MISMATCHED.value]
            partner = next((c for c in wrong if self._agrees(c, check)), None)
            if matched:  # the node was right; every earlier mismatch of the window was not
                for earlier in wrong:
                    log.warning("verification: tie-break sided with %s on task %s window %s; "
                                "checker %s was wrong", commitment.node_id,
                                commitment.task_id, check.window, earlier.checker_node)
                    self._checker_wrong(session, earlier, now)
            elif partner is not None:
                self._failed(session, commitment, partner, check, now)
                return
            elif sum(c.role == "tiebreak" for c in window_checks) < MAX_TIEBREAKS:
                self._tiebreak(session, commitment, check, now)
                return
            else:
                self._redo(session, commitment, now, "no two renders of the window agree")
                return
        if any(c.status in (CheckStatus.OPEN.value, CheckStatus.LEASED.value) for c in checks):
            return
        windows = sorted({c.window for c in checks})
        store.set_status(session, commitment=commitment, target=VerificationStatus.PASSED,
                         now=now, reason=f"windows {windows} matched")
        def matched_all(record: ProviderRecord) -> ProviderRecord:
            for _ in windows:
                record = record.after(True)
            return record

        store.update_record(session, provider=commitment.provider, now=now, change=matched_all)
        self.settle_if_verified(session, job_id=commitment.job_id, now=now)

    def _resolve_replicas(self, session: Session, commitment: VerificationCommitment,
                          checks: list[VerificationCheck], now: float) -> None:
        """k-of-n: the node's run and the replicas' runs vote by result hash."""
        task = job_db.get_task(session, task_id=commitment.task_id)
        assert task is not None
        rule = redundancy_of(task.payload)
        assert rule is not None
        finished = [c for c in checks if c.status in (CheckStatus.MATCHED.value,
                                                     CheckStatus.MISMATCHED.value)]
        runs = {commitment.node_id: commitment.result_sha256}
        runs.update({f"check:{c.id}": str((c.result or {}).get("result_sha256"))
                     for c in finished})
        verdict = agreement(runs, rule)
        if verdict.accepted == commitment.result_sha256:
            for c in finished:
                if c.status == CheckStatus.MISMATCHED.value:
                    self._checker_wrong(session, c, now)
            store.void_open_checks(session, commitment=commitment, now=now,
                                   reason=f"{rule.k} runs agree")
            store.set_status(session, commitment=commitment, target=VerificationStatus.PASSED,
                             now=now, reason=f"{rule.k} of {len(runs)} runs agree")
            self.settle_if_verified(session, job_id=commitment.job_id, now=now)
        elif verdict.accepted is not None:
            agreeing = [c for c in finished
                        if (c.result or {}).get("result_sha256") == verdict.accepted]
            store.set_status(session, commitment=commitment, target=VerificationStatus.DISPUTED,
                             now=now, reason=f"{rule.k} runs agree on another result")
            self._failed(session, commitment, agreeing[0], agreeing[1 % len(agreeing)], now)
        elif verdict.exhausted:
            self._redo(session, commitment, now, f"no {rule.k} of {rule.n} runs agree")

    @staticmethod
    def _agrees(first: VerificationCheck, second: VerificationCheck) -> bool:
        """Two checkers agree when they sent the same chunk and frame files (canonical EXR
        chunks are byte-identical for the same build and kernel) or their comparisons against
        the node failed the same way on the same leaves."""
        a, b = first.result or {}, second.result or {}
        if a.get("chunks") and a.get("chunks") == b.get("chunks"):
            return True
        failed_a = {k for k, v in (first.comparison or {}).items() if not v["match"]}
        failed_b = {k for k, v in (second.comparison or {}).items() if not v["match"]}
        return bool(failed_a) and failed_a == failed_b

    def _tiebreak(self, session: Session, commitment: VerificationCommitment,
                  check: VerificationCheck, now: float) -> None:
        excluded = [*check.recipe.get("excluded_providers", []), check.checker_provider]
        store.add_check(session, commitment=commitment, window=check.window, role="tiebreak",
                        recipe={**check.recipe, "excluded_providers": excluded}, now=now)

    def _checker_wrong(self, session: Session, check: VerificationCheck, now: float) -> None:
        """A checker's render disagreed with two others: its provider's record resets and the
        node is demoted (it lied, or its machine is broken)."""
        if check.checker_provider is not None:
            store.update_record(session, provider=check.checker_provider, now=now,
                                change=lambda record: record.after(False))
        if check.checker_node is not None:
            pls_store.set_node_tier(session, node_id=check.checker_node,
                                    tier=int(Tier.BACKGROUND))

    def _failed(self, session: Session, commitment: VerificationCommitment,
                first: VerificationCheck, tiebreak: VerificationCheck, now: float) -> None:
        """Two other providers agree the window is not what the node committed to."""
        evidence = self.evidence(commitment, [first, tiebreak])
        digest = keccak(json.dumps(evidence, sort_keys=True).encode())
        store.add_evidence(session, digest=hex0x(digest), commitment_id=commitment.id,
                           node_id=commitment.node_id, evidence=evidence, now=now)
        store.set_status(session, commitment=commitment, target=VerificationStatus.FAILED,
                         now=now, reason=f"window {first.window}: {first.checker_node} and "
                                         f"{tiebreak.checker_node} agree against it")
        store.update_record(session, provider=commitment.provider, now=now,
                            change=lambda record: record.after(False))
        pls_store.set_node_tier(session, node_id=commitment.node_id, tier=int(Tier.BACKGROUND))
        self.pls.ingest.task_outcome(session, node_id=commitment.node_id,
                                     task_id=commitment.task_id,
                                     outcome=TaskOutcome.FAILED_VERIFICATION, now=now,
                                     evidence=digest)
        log.warning("verification failed: task %s by %s (evidence 0x%s)", commitment.task_id,
                    commitment.node_id, digest.hex())
        self._redo(session, commitment, now, "failed verification", blame=True)

    def _redo(self, session: Session, commitment: VerificationCommitment, now: float,
              reason: str, *, blame: bool = False) -> None:
        """The result is rejected and its task goes back in line (elsewhere, when `blame`)."""
        store.void_open_checks(session, commitment=commitment, now=now, reason=reason)
        if commitment.status == VerificationStatus.CHECKING.value:
            store.set_status(session, commitment=commitment, target=VerificationStatus.DISPUTED,
                             now=now, reason=reason)
        if commitment.status != VerificationStatus.FAILED.value:
            store.set_status(session, commitment=commitment, target=VerificationStatus.FAILED,
                             now=now, reason=reason)
        task = job_db.get_task(session, task_id=commitment.task_id)
        job = job_db.get_job(session, job_id=commitment.job_id)
        assert task is not None and job is not None
        if task.status == TaskStatus.DONE.value:
            store.redo_task(session, task=task, now=now, reason=reason,
                            exclude_provider=commitment.provider if blame else None)
        if job.status == JobStatus.VERIFYING.value:
            status_db.set_job_status(session, job=job, target=JobStatus.RUNNING, now=now,
                                reason=f"task {task.id} redone: {reason}")

    def evidence(self, commitment: VerificationCommitment,
                 checks: Sequence[VerificationCheck]) -> dict[str, Any]:
        """Both sides' hashes, the recipe, and Merkle proofs of the disputed leaves against the
        committed root: enough for an arbiter to re-render the window and decide."""
        leaves = [Leaf.from_json(x) for x in commitment.leaves]
        tree = Commitment.of(leaves)
        window = checks[0].window
        proofs = [{"leaf": leaf.as_json(), "hash": hex0x(leaf.hash),
                   "proof": [hex0x(p) for p in tree.proof(leaf)]}
                  for leaf in leaves if leaf.window == window]
        return {"task_id": commitment.task_id, "job_id": commitment.job_id,
                "node_id": commitment.node_id, "provider": commitment.provider,
                "attempt": commitment.attempt, "root": commitment.root,
                "seed": commitment.seed, "policy": commitment.policy, "rate": commitment.rate,
                "result_sha256": commitment.result_sha256, "chunks": commitment.chunks,
                "env": commitment.env, "recipe": checks[0].recipe, "proofs": proofs,
                "checks": [{"check_id": c.id, "node_id": c.checker_node,
                            "provider": c.checker_provider, "result": c.result,
                            "comparison": c.comparison} for c in checks]}

    # ----- reads ---------------------------------------------------------------------------
    @staticmethod
    def counts(session: Session) -> store.VerificationCounts:
        return store.counts(session)

    @staticmethod
    def task_record(session: Session, *, task_id: int) -> list[tuple[
            VerificationCommitment, list[VerificationCheck], list[Any]]] | None:
        """Every commitment of the task with its checks and evidence; None: no such task."""
        if job_db.get_task(session, task_id=task_id) is None:
            return None
        return [(row, store.checks_of(session, commitment_id=row.id),
                 store.evidence_of(session, commitment_id=row.id))
                for row in store.commitments_of_task(session, task_id=task_id)]

    # ----- settlement ----------------------------------------------------------------------
    def settle_if_verified(self, session: Session, *, job_id: str, now: float) -> bool:
        """A job whose tasks are all done, each with a passed (or not drawn) latest
        commitment, is accepted through the one settlement path (`services.work`). The job
        is locked first: two last checks passing at once (two replicas) would each see the
        other's commitment undecided."""
        job = job_db.lock_job(session, job_id=job_id)
        if job is None or job.status != JobStatus.VERIFYING.value:
            return False
        tasks = job_db.job_tasks(session, job_id=job_id)
        if len(settlement.verified_tasks(session, job_id=job_id)) != len(tasks):
            return False
        work.accept_job(session, job=job, pls=self.pls, now=now)
        log.info("job %s verified: settlement queued", job_id)
        return True

    def accept_by_operator(self, session: Session, *, job: Job, operator: str,
                           now: float) -> int:
        """The operator override: undecided results are marked OVERRIDDEN and the job is
        accepted through the same settlement path. Returns results overridden. The caller logs
        the override once its transaction has committed (`services.admin.accept`)."""
        overridden = self.override(session, job=job, operator=operator, now=now)
        work.accept_job(session, job=job, pls=self.pls, now=now)
        return overridden

    def override(self, session: Session, *, job: Job, operator: str, now: float) -> int:
        """Every undecided commitment of the job is marked OVERRIDDEN, its checks void.
        Returns how many were overridden."""
        overridden = 0
        for row in store.latest_commitments(session, job_id=job.id).values():
            if row.status in (VerificationStatus.COMMITTED.value,
                              VerificationStatus.CHECKING.value,
                              VerificationStatus.DISPUTED.value):
                store.void_open_checks(session, commitment=row, now=now, reason="override")
                store.set_status(session, commitment=row, target=VerificationStatus.OVERRIDDEN,
                                 now=now, reason=f"operator override by {operator}")
                overridden += 1
        return overridden


def env_of(render: Any) -> RenderEnv | None:
    """The RenderEnv of an API body's `render` (anything with `blender` and `kernel`)."""
    return None if render is None else RenderEnv(str(render.blender), str(render.kernel))


def report_of(render: Any) -> RenderReport | None:
    """The RenderReport of a completion's `render` (env fields plus `chunks`)."""
    if render is None:
        return None
    return RenderReport(env_of(render), tuple(ChunkRef(c.offset, c.length, c.sha256)
                                              for c in render.chunks))


def redundancy_of(payload: dict[str, Any]) -> Redundancy | None:
    """The k-of-n rule of a `command` task that declares itself non-deterministic."""
    if payload.get("kind") != "command" or payload.get("deterministic", True):
        return None
    rule = payload.get("redundancy") or {}
    return Redundancy(int(rule.get("k", 2)), int(rule.get("n", 3)))
