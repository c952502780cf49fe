"""A `mesh` command's own settings (`mesh/settings.py`, so that a provider's agent-only install
needs none of the service) read every `MESH_*` variable they share with the service's
`Settings` exactly as the service does: same names, types, defaults, descriptions, `.env`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mesh.settings import ClientSettings
from orchestrator.config import Settings


def test_everyClientSetting_isTheServicesSetting() -> None:
    assert set(ClientSettings.model_fields) <= set(Settings.model_fields)
    for name, field in ClientSettings.model_fields.items():
        theirs = Settings.model_fields[name]
        assert (field.annotation, field.default, field.description) == (
            theirs.annotation, theirs.default, theirs.description), name
    for key in ("env_prefix", "env_file", "extra", "case_sensitive", "env_file_encoding"):
        assert ClientSettings.model_config.get(key) == Settings.model_config.get(key), key


def test_bothRead_theSameEnvironmentAndDotEnv_alike(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MESH_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("MESH_ORCHESTRATOR_URL=http://from-dotenv:1\n"
                                   "MESH_CHAIN_ID=5\n")
    monkeypatch.setenv("MESH_CHAIN_ID", "11155111")  # the environment beats .env
    monkeypatch.setenv("mesh_wallet_dir", "/tmp/w")  # case-insensitive, as the service
    monkeypatch.setenv("MESH_ORCHESTRATOR_ID", "grid-7")
    monkeypatch.setenv("MESH_DATA_DIR", "state")
    client, service = ClientSettings(), Settings()
    for name in ClientSettings.model_fields:
        assert getattr(client, name) == getattr(service, name), name
    assert (client.orchestrator_url, client.chain_id, client.wallet_dir) == (
        "http://from-dotenv:1", 11155111, Path("/tmp/w"))


def test_aBadServiceSetting_doesNotStopAClientCommand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESH_LEASE_TTL_S", "soon")
    assert ClientSettings(_env_file=None).chain_id == 31337
