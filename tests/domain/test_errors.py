"""`domain.errors`: a refusal over quota says when to come back."""

from __future__ import annotations

from orchestrator.domain.errors import OverQuota, Refused


def test_over_quota_is_a_refusal_that_says_when_it_frees_up() -> None:
    refused = OverQuota("upload_quota", "too many pending bytes", retry_after_s=42.5)

    assert isinstance(refused, Refused) and refused.retry_after_s == 42.5
    assert (refused.code, str(refused)) == ("upload_quota", "too many pending bytes")
