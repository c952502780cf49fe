"""The one codec between bytes and their `0x` hex text, and the job id built on it.

On chain a job id is a `bytes32`; everywhere else (the API, the database, logs, the tools) it is
`0x` and 64 lowercase hex digits. `JobId` is that text, checked and normalised once where it is
made, with the bytes a contract call takes at `.raw`.
"""

from __future__ import annotations

import re

_JOB_ID = re.compile(r"0x[0-9a-fA-F]{64}")


def hex0x(data: bytes) -> str:
    """`data` as `0x` and lowercase hex (hashes, roots, nonces, signatures, ids)."""
    return "0x" + bytes(data).hex()


def unhex(text: str) -> bytes:
    """The bytes of hex text, with or without `0x`; ValueError if it is not hex."""
    return bytes.fromhex(text.removeprefix("0x"))


class JobId(str):
    """A job's id as the service keeps it: `0x` and 64 lowercase hex digits."""

    __slots__ = ()

    def __new__(cls, text: str) -> JobId:
        if not _JOB_ID.fullmatch(text):
            raise ValueError(f"a job id is 0x and 64 hex digits, not {text!r}")
        return super().__new__(cls, text.lower())

    @classmethod
    def of(cls, raw: bytes) -> JobId:
        """The id of the `bytes32` a contract names a job by."""
        if len(raw) != 32:
            raise ValueError(f"a job id is 32 bytes, not {len(raw)}")
        return cls(hex0x(raw))

    @property
    def raw(self) -> bytes:
        """The `bytes32` the contracts take."""
        return unhex(self)
