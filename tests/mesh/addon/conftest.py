"""The `mesh` command fixtures (a user's environment, on the session's chain) for the add-on's
tests."""

from tests.mesh.commands.conftest import mesh, on_chain

__all__ = ["mesh", "on_chain"]
