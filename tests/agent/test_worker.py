"""The node's Blender workers: one warm for the next lease while a task renders."""

from __future__ import annotations

import threading
from pathlib import Path

from agent.config import AgentConfig
from agent.worker import Worker


def test_the_next_warm_worker_starts_while_the_taken_one_renders(tmp_path: Path) -> None:
    config = AgentConfig(orchestrator="http://127.0.0.1:9", node_id="n1", state_dir=tmp_path)
    worker = Worker(config, None, None, None, threading.Event())  # type: ignore[arg-type]
    box = worker.take_warm()
    try:
        spare = worker._spare
        assert box.started and spare is not None and spare is not box and spare.started
        worker.warm()  # after the task: the spare already waits, none more is started
        assert worker._spare is spare
    finally:
        box.close()
        worker.close()
