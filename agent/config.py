"""What `mesh agent run` is told: the orchestrator it serves, the node it is, where it keeps
its state, and the pace and limits of its work."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from agent.sandbox import Limits


@dataclass(frozen=True, slots=True)
class AgentConfig:
    orchestrator: str
    node_id: str
    state_dir: Path
    chain_id: int = 31337
    orchestrator_id: str = "depin-mesh-orchestrator"
    region: str = "local"
    price_per_gpu_hour: int = 100
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    limits: Limits = field(default_factory=Limits)
    heartbeat_s: float = 1.0
    poll_s: float = 1.0
    popw_class: str | None = None  # answer a PoPW handshake of this GPU class at start
    max_backoff_s: float = 30.0
    exit_when_idle_s: float | None = None  # leave after this long without work (bench, tests)
    # re-checks of other providers' results run when no lease waits for this node, and at
    # least once this often before its next lease (a busy grid still verifies)
    check_every_s: float = 60.0
    cpu_kernel: str | None = None  # "sse42": Cycles without its AVX2 kernel (a cross-kernel grid)
