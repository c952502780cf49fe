"""Proof that a silent node's process rendered on through a network cut.

At start an agent makes an ephemeral session key and names it in its login, which its wallet
signs: the key is bound to the wallet, and it lives only in that process's memory. After a
cut the process signs, with that key, the manifest of the chunks it rendered for the task it
held meanwhile. A stopped process cannot sign (a new one has a new key), and a node that cut
its own network and idled has no new chunks to name: `StakingPolicy.progress_shown` judges
the proof (same session, the task it held, new content rendered after the DEAD verdict).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eth_abi import encode
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_utils import keccak, to_checksum_address


@dataclass(frozen=True, slots=True)
class ChunkMark:
    """One checkpoint chunk: its content hash (sha256, 32 bytes) and when it was rendered."""

    sha256: bytes
    rendered_at: float


@dataclass(frozen=True, slots=True)
class ProgressProof:
    """The chunks of `task_id` a node's process signed with its session key on reconnect."""

    node_id: str
    task_id: str
    chunks: tuple[ChunkMark, ...]
    resumed_at: float
    signature: bytes  # 65 bytes, EIP-191 over `progress_digest`

    def signer(self) -> str | None:
        """The session key that signed the proof (checksummed), or None when it is malformed."""
        try:
            digest = progress_digest(self.node_id, self.task_id, self.chunks, self.resumed_at)
            return str(Account.recover_message(encode_defunct(primitive=digest),
                                               signature=self.signature))
        except Exception:  # any malformed signature (bad v, s out of range) is no signer
            return None


def progress_digest(node_id: str, task_id: str, chunks: Sequence[ChunkMark],
                    resumed_at: float) -> bytes:
    """What the session key signs: node, task, every chunk with its time, and the moment."""
    for chunk in chunks:
        if len(chunk.sha256) != 32:
            raise ValueError("a chunk hash is 32 bytes")
    return keccak(encode(["string", "string", "bytes32[]", "uint64[]", "uint64"],
                         [node_id, task_id, [c.sha256 for c in chunks],
                          [round(c.rendered_at * 1000) for c in chunks],
                          round(resumed_at * 1000)]))


def sign_progress(session_key: bytes, node_id: str, task_id: str,
                  chunks: Sequence[ChunkMark], resumed_at: float) -> ProgressProof:
    """The agent's side: sign the manifest with the process's session key."""
    digest = progress_digest(node_id, task_id, chunks, resumed_at)
    signature = Account.sign_message(encode_defunct(primitive=digest), session_key).signature
    return ProgressProof(node_id, task_id, tuple(chunks), resumed_at, bytes(signature))


def session_address(session_key: bytes) -> str:
    """The address a login names for a session key."""
    return to_checksum_address(Account.from_key(session_key).address)
