"""Process trees of `mesh up` (`mesh/processes.py`): the orphans a grid adopts as the child
subreaper are reaped while it serves, and the children it started itself are left to their
own `Popen`."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_subreaper_reaps_the_orphans_it_adopted_and_leaves_its_own_children() -> None:
    script = textwrap.dedent("""
        import os, subprocess, time
        from mesh.processes import _processes, adopt_orphans, reap_orphans

        def zombies():
            return sorted(p for p, parent, state in _processes()
                          if parent == os.getpid() and state == "Z")

        adopt_orphans()
        own = subprocess.Popen(["true"])  # a child of its own, ended, not yet waited for
        for _ in range(3):  # each leaves an orphan that ends: adopted here, then a zombie
            subprocess.run(["sh", "-c", "sleep 0.2 & exit 0"], check=True)
        time.sleep(1.0)
        before = zombies()
        reaped = reap_orphans({own.pid})
        print(len(before), reaped, zombies() == [own.pid], own.wait())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == ["4", "3", "True", "0"], done.stderr
