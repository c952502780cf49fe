"""One codec between bytes and `0x` hex, and the job id on it: the text the service keeps is
the bytes32 the contracts take, whichever side made it."""

from __future__ import annotations

import pytest

from orchestrator.domain.ids import JobId, hex0x, unhex

RAW = bytes(range(32))


def test_hex_and_back_is_the_identity() -> None:
    assert hex0x(RAW) == "0x" + RAW.hex()
    assert unhex(hex0x(RAW)) == RAW
    assert unhex(RAW.hex()) == RAW  # without the prefix too
    assert hex0x(b"") == "0x"
    with pytest.raises(ValueError):
        unhex("0xzz")


def test_a_job_id_is_its_bytes32_in_lowercase_hex() -> None:
    job = JobId.of(RAW)
    assert job == "0x" + RAW.hex() and isinstance(job, str)
    assert job.raw == RAW
    assert JobId(job.upper().replace("0X", "0x")) == job  # any case names the same job
    assert JobId(job) == job


@pytest.mark.parametrize("text", ["", "0x", "0x" + "a" * 63, "0x" + "a" * 65, "a" * 64,
                                  "0x" + "g" * 64, " 0x" + "a" * 64])
def test_anything_else_is_not_a_job_id(text: str) -> None:
    with pytest.raises(ValueError, match="a job id is 0x and 64 hex digits"):
        JobId(text)


@pytest.mark.parametrize("raw", [b"", b"\x01" * 31, b"\x01" * 33])
def test_only_32_bytes_make_a_job_id(raw: bytes) -> None:
    with pytest.raises(ValueError, match="a job id is 32 bytes"):
        JobId.of(raw)
