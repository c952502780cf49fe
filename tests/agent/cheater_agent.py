"""`python -m tests.agent.cheater_agent CHEAT agent run ...`: the real `mesh agent run` with a
dishonest renderer (`agent.workloads.cheaters`) in place of `blender.render`; for the
verification tests, which must show each cheat caught through real agents."""

from __future__ import annotations

import sys

from agent.workloads import blender, cheaters
from orchestrator.cli import app


def main(argv: list[str]) -> None:
    model = cheaters.CheatModel.parse(argv[0])
    blender.render = cheaters.cheating(model, blender.render)  # type: ignore[assignment]
    app(argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
