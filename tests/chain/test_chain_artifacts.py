"""Artifacts come from ape's ethpm manifest; a missing or wrong manifest is a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.chain.artifacts import ArtifactError, load_artifacts


def _write_manifest(tmp_path: Path, contract_types: object) -> Path:
    path = tmp_path / "__local__.json"
    path.write_text(json.dumps({"manifest": "ethpm/3", "contractTypes": contract_types}))
    return path


def test_load_artifacts_readsAbiAndCreationBytecodePerContract(tmp_path: Path) -> None:
    abi = [{"type": "function", "name": "x", "inputs": [], "outputs": []}]
    path = _write_manifest(tmp_path, {
        "Probe": {"abi": abi, "deploymentBytecode": {"bytecode": "0x6080"}},
        "IProbe": {"abi": abi, "deploymentBytecode": {}},
    })

    artifacts = load_artifacts(path)

    assert artifacts["Probe"].abi == abi
    assert artifacts["Probe"].bytecode == "0x6080"
    assert artifacts["Probe"].deployable
    assert not artifacts["IProbe"].deployable


def test_load_artifacts_isCachedPerPath(tmp_path: Path) -> None:
    path = _write_manifest(tmp_path, {"Probe": {"abi": []}})

    assert load_artifacts(path) is load_artifacts(path)


def test_load_artifacts_failsClearlyWhenManifestIsMissing(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="run `make compile`"):
        load_artifacts(tmp_path / "absent.json")


def test_artifacts_lookupOfUnknownContractNamesTheKnownOnes(tmp_path: Path) -> None:
    artifacts = load_artifacts(_write_manifest(tmp_path, {"Probe": {"abi": []}}))

    with pytest.raises(ArtifactError, match="Probe"):
        artifacts["JobEscrow"]


def test_load_artifacts_readsTheRealCompiledManifest() -> None:
    artifacts = load_artifacts()

    for name in ("TestToken", "StakeManager", "JobEscrow", "Disputes"):
        assert artifacts[name].deployable, name
