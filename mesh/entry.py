"""The `mesh` console script's first frame. It imports nothing but the standard library before
the command line itself (`mesh.cli`, which loads typer and every command group), so a Ctrl-C
that lands while the command line loads ends the command with one line and exit 130, as a
Ctrl-C later does, never with an import traceback."""

from __future__ import annotations

import sys

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command Ctrl-C stopped


def main() -> None:
    """Load the command line and run it; a KeyboardInterrupt before it has taken over is one
    line on stderr and exit 130."""
    try:
        from mesh.cli import main as run_command_line

        run_command_line()
    except KeyboardInterrupt:
        sys.stderr.write("mesh: interrupted\n")
        sys.exit(INTERRUPTED)


if __name__ == "__main__":
    main()
