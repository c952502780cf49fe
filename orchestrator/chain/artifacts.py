"""Compiled contract artifacts, read from ape's manifest (`.build/__local__.json`).

One loader for the whole process: the manifest is parsed once per path, because the SDK,
the deployer and the error decoder all need the same ABIs and re-reading a multi-megabyte
JSON file per call would dominate short benchmarks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MANIFEST = REPO_ROOT / ".build" / "__local__.json"

Abi = list[dict[str, Any]]


class ArtifactError(LookupError):
    """The manifest is missing, malformed, or lacks the asked-for contract."""


@dataclass(frozen=True, slots=True)
class ContractArtifact:
    name: str
    abi: Abi
    bytecode: str  # 0x-prefixed creation bytecode; "0x" for interfaces and abstract contracts

    @property
    def deployable(self) -> bool:
        return len(self.bytecode) > 2


@dataclass(frozen=True, slots=True)
class Artifacts:
    """Every contract type of one compiled project, by contract name."""

    contracts: dict[str, ContractArtifact]

    def __getitem__(self, name: str) -> ContractArtifact:
        try:
            return self.contracts[name]
        except KeyError:
            known = ", ".join(sorted(self.contracts)) or "none"
            raise ArtifactError(
                f"contract {name!r} is not in the manifest (known: {known}); run `ape compile`"
            ) from None

    def all_abis(self) -> list[Abi]:
        return [artifact.abi for artifact in self.contracts.values()]


def _parse_contract_type(name: str, contract_type: dict[str, Any]) -> ContractArtifact:
    bytecode = (contract_type.get("deploymentBytecode") or {}).get("bytecode") or "0x"
    if not bytecode.startswith("0x"):
        bytecode = "0x" + bytecode
    return ContractArtifact(name=name, abi=list(contract_type.get("abi", [])), bytecode=bytecode)


@lru_cache(maxsize=4)
def load_artifacts(manifest_path: Path = DEFAULT_MANIFEST) -> Artifacts:
    """Parse an ethpm-types PackageManifest (`contractTypes` -> `abi`, `deploymentBytecode`)."""
    try:
        manifest = json.loads(manifest_path.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{manifest_path} not found: the contracts are not built; run "
                            "`make compile` (or `ape compile`) first") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{manifest_path} is not valid JSON: {exc}") from None
    contract_types = manifest.get("contractTypes")
    if not isinstance(contract_types, dict):
        raise ArtifactError(f"{manifest_path} has no contractTypes; is it an ape manifest?")
    return Artifacts(
        contracts={
            name: _parse_contract_type(name, contract_type)
            for name, contract_type in contract_types.items()
        }
    )
