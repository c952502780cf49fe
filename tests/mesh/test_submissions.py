"""The customer's submission records (`mesh/submissions.py`): what a rerun of the same submit
finds, and what it must not."""

from __future__ import annotations

from pathlib import Path

from mesh.submissions import Step, Submission, Submissions, request_key

CUSTOMER = "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65"


def submission(job: str, request: str, created_at: float) -> Submission:
    return Submission(job_id="0x" + job * 64, request=request, spec={"deadline": 1},
                      amount=3, idempotency_key="key-" + job * 8, created_at=created_at)


def test_a_rerun_finds_the_newest_unfinished_submission_of_the_same_request(
        tmp_path: Path) -> None:
    asked = request_key(frames=[1, 2], budget=3, scene="ab")
    assert asked == request_key(budget=3, scene="ab", frames=[1, 2])  # order does not matter
    other = request_key(frames=[1, 3], budget=3, scene="ab")
    journal = Submissions(tmp_path, CUSTOMER)
    older, newer = submission("a", asked, 1.0), submission("b", asked, 2.0)
    for record in (older, newer, submission("c", other, 3.0)):
        journal.save(record)
    journal.save(newer.after(Step.ESCROWED, escrow_tx="0x01"))

    again = Submissions(tmp_path, CUSTOMER.lower())  # a new process, the address in any case
    assert again.unfinished(asked) == newer.after(Step.ESCROWED, escrow_tx="0x01")
    again.save(again.unfinished(asked).after(Step.SUBMITTED))  # type: ignore[union-attr]
    assert again.unfinished(asked) == older  # taken jobs are never resumed
    assert [r.job_id[2:3] for r in again.all()] == ["c", "b", "a"]  # newest first
    assert not list(again.dir.glob("*.partial"))


def test_no_records_yet(tmp_path: Path) -> None:
    journal = Submissions(tmp_path / "nothing", CUSTOMER)
    assert journal.all() == [] and journal.unfinished("x") is None
