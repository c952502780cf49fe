"""Where the mesh contracts live on one chain, and who holds which role there.

Saved as JSON (`.mesh/deployment.json`) by the deployer so that `mesh`, the orchestrator
and the demo all find the same contracts without redeploying.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from eth_utils import is_checksum_address

DEPLOYMENT_FILE_NAME = "deployment.json"


class DeploymentError(ValueError):
    """A deployment file that is missing, incomplete or for another chain."""


@dataclass(frozen=True, slots=True)
class Deployment:
    chain_id: int
    token: str  # ERC-20 used for stake, escrow and bonds
    stake_manager: str
    job_escrow: str
    disputes: str
    admin: str  # holds DEFAULT_ADMIN_ROLE; grants and revokes the roles below
    orchestrator: str  # locks collateral, settles jobs, commits epochs
    slasher: str  # slashes stake for low scores and abandoned work
    arbiter: str  # resolves disputes
    treasury: str  # receives slash proceeds that have no injured customer
    deployed_at_block: int  # where an event indexer starts scanning

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if field.type == "str" and not is_checksum_address(value):
                raise DeploymentError(f"{field.name} is not a checksummed address: {value!r}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Deployment:
        try:
            data: dict[str, Any] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DeploymentError(f"deployment is not valid JSON: {exc}") from None
        expected = {field.name for field in fields(cls)}
        missing = expected - data.keys()
        if missing:
            raise DeploymentError(f"deployment lacks {sorted(missing)}")
        return cls(**{name: data[name] for name in expected})

    def save(self, data_dir: Path) -> Path:
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / DEPLOYMENT_FILE_NAME
        path.write_text(self.to_json() + "\n")
        return path

    @classmethod
    def load(cls, data_dir: Path) -> Deployment:
        path = data_dir / DEPLOYMENT_FILE_NAME
        try:
            return cls.from_json(path.read_text())
        except FileNotFoundError:
            raise DeploymentError(f"{path} not found; deploy first (`mesh up` or "
                                  "`ape run deploy`)") from None
