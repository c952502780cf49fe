"""A customer's submissions, kept on disk beside its wallet before anything is paid.

`mesh job submit` writes the job id, the spec (with its deadline) and the idempotency key here
*before* it escrows, and moves the record on after each step. A submit cut short (Ctrl-C, a
crash, a lost answer) and run again with the same command finds the unfinished record and
finishes that job: the escrow is sent only if the chain has none for the job id (a second
`createJob` of one id reverts on chain anyway), and the submission goes out under the same
idempotency key, so the orchestrator answers with the job it already took. `mesh job list`
reads the records too: a job escrowed but never submitted is there, nowhere else.

One JSON file per job under `<wallet dir>/jobs/<customer address>/`, each written whole
(temporary file, fsync, rename), so a kill mid-write leaves the old record or the new one.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any


class Step(StrEnum):
    """How far a submission got. Each step is recorded once it is done:
    ESCROWING -> ESCROWED: the chain holds the job's escrow;
    ESCROWED -> SUBMITTED: the orchestrator took the job (a rerun starts a new one)."""

    ESCROWING = "escrowing"  # recorded before the escrow is sent
    ESCROWED = "escrowed"
    SUBMITTED = "submitted"


@dataclass(frozen=True, slots=True)
class Submission:
    job_id: str  # 0x + 64 hex, the escrow's job id
    request: str  # sha256 of what was asked (`request_key`): the same command finds it again
    spec: dict[str, Any]  # the job spec as submitted (its deadline fixed at the first try)
    amount: int  # token units escrowed
    idempotency_key: str  # every submission of this job goes out under it
    created_at: float  # unix seconds
    step: Step = Step.ESCROWING
    escrow_tx: str | None = None

    def after(self, step: Step, **changes: Any) -> Submission:
        return replace(self, step=step, **changes)


def request_key(**asked: Any) -> str:
    """The identity of a submit command: everything the customer asked for (the scene's
    sha256, frames, budget, options, the orchestrator and the chain), not when it ran."""
    return hashlib.sha256(json.dumps(asked, sort_keys=True, default=str).encode()).hexdigest()


class Submissions:
    """The records of one customer's submissions under `root`."""

    def __init__(self, root: Path, customer: str) -> None:
        self.dir = root / customer.lower()

    def save(self, submission: Submission) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        target = self.dir / f"{submission.job_id}.json"
        partial = target.with_suffix(".partial")
        with partial.open("w") as out:
            json.dump(asdict(submission), out, indent=2, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)

    def all(self) -> list[Submission]:
        """Every record, newest first."""
        if not self.dir.is_dir():
            return []
        found = []
        for path in self.dir.glob("0x*.json"):
            data = json.loads(path.read_text())
            found.append(Submission(**{**data, "step": Step(data["step"])}))
        return sorted(found, key=lambda s: s.created_at, reverse=True)

    def unfinished(self, request: str) -> Submission | None:
        """The newest submission of this request the orchestrator has not taken yet."""
        return next((s for s in self.all()
                     if s.request == request and s.step is not Step.SUBMITTED), None)
