"""Agent fixtures: the sample scene, built once per session with bpy in a child process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scene") / "scene.blend"
    subprocess.run([sys.executable, "-m", "mesh.sample_scene", str(path)],
                   check=True, capture_output=True, timeout=120)
    return path
