"""`python -m mesh.bench.cheating_agent CHEAT agent run ...`: the real agent, with the cheat
`CHEAT` (`cheaters.CheatModel.parse`) installed in place of `blender.render`."""

from __future__ import annotations

import sys

from agent.workloads import blender
from mesh.bench.cheaters import CheatModel, cheating
from mesh.cli import app


def main(argv: list[str]) -> None:
    """`CHEAT agent run ...`: install the cheat, then run the `mesh` command line as usual."""
    model = CheatModel.parse(argv[0])
    blender.render = cheating(model, blender.render)
    app(argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
