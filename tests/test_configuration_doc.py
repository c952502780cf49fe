"""docs/configuration.md is generated from `Settings` (tools/config_reference.py): a setting
added, renamed or redescribed without regenerating the page fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from orchestrator.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_reference",
                                                  ROOT / "tools" / "config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_theConfigurationReference_isCurrent() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == tool().render(), (
        "docs/configuration.md is stale: run python tools/config_reference.py")


def test_theReference_namesEverySetting_once() -> None:
    text = tool().render()
    for name in Settings.model_fields:
        assert text.count(f"| `MESH_{name.upper()}` |") == 1, name


def test_check_failsOnAStalePage(tmp_path: Path) -> None:
    module = tool()
    stale = tmp_path / "configuration.md"
    stale.write_text(module.render().replace("MESH_RPC_URL", "MESH_RPC"))
    module.__dict__.update(TARGET=stale, ROOT=tmp_path)
    assert module.main(["--check"]) == 1
    module.main([])
    assert module.main(["--check"]) == 0
