"""Ctrl-C at any moment of `mesh up`'s start-up (while the command line loads, while the chain
and the orchestrator start) ends the command with exit 130 and no traceback (real processes).
The delay counts from the console script's first line: a Ctrl-C while the interpreter itself
starts (its site packages) is Python's, before any of ours runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mesh.entry import INTERRUPTED

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("after_s", [0.05, 0.2, 0.5, 1.5, 4.0])
def test_ctrl_c_during_start_up_is_one_line_not_a_traceback(tmp_path: Path,
                                                              after_s: float) -> None:
    script = ("import sys; print('started', file=sys.stderr, flush=True); "
              f"sys.argv = ['mesh', 'up', '--providers', '1', '--out', {str(tmp_path / 'g')!r}]; "
              "from mesh.entry import main; main()")
    up = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert up.stderr is not None and up.stderr.readline() == "started\n"
    time.sleep(after_s)
    up.send_signal(signal.SIGINT)
    try:
        out, err = up.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        up.kill()
        out, err = up.communicate()
        pytest.fail(f"mesh up did not stop within 180 s of Ctrl-C: {err[-2000:]}")
    assert "Traceback" not in out + err, (out + err)[-3000:]
    assert up.returncode in (INTERRUPTED, 0), (up.returncode, (out + err)[-3000:])
