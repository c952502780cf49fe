"""A scene's pack: the files a .blend reads besides itself (textures, UDIM tiles, image
sequences, linked libraries, caches, fonts, sounds), each named by its path relative to the
.blend's folder and addressed by its sha256. The manifest (path -> sha256) is part of the signed
job spec; the customer's client builds it (`mesh.pack`), the service checks every path with
`asset_path_problem` before it takes the spec, and whoever lays a pack out on disk checks it
again, so a path never leads outside the folder it is laid out in.

Files outside the .blend's folder are named under `OUTSIDE/` by their absolute path
(`outside_name`); the .blend packed points at them there (`mesh.scene_check`)."""

from __future__ import annotations

import re

MAX_ASSETS = 1024  # files in one pack besides the .blend
MAX_ASSET_PATH = 256  # characters of one manifest path
OUTSIDE = "_outside"  # the folder that files outside the .blend's folder are named under
_PART = re.compile(r"^[^\x00-\x1f\\:*?\"<>|]+$")  # no control characters, no Windows specials


def outside_name(path: str) -> str:
    """The pack path of a file outside the .blend's folder, by its absolute POSIX `path`."""
    return f"{OUTSIDE}/{path.lstrip('/')}"


def asset_path_problem(name: str) -> str | None:
    """Why `name` cannot be a manifest path, or None when it can: a relative POSIX path of at
    most MAX_ASSET_PATH characters whose parts are neither empty, '.' nor '..' and hold no
    control character, backslash or character a Windows file name refuses."""
    if not name or len(name) > MAX_ASSET_PATH:
        return f"a path of 1 to {MAX_ASSET_PATH} characters"
    if name.startswith("/"):
        return "a relative path, not an absolute one"
    for part in name.split("/"):
        if part in ("", ".", ".."):
            return "a path without '.', '..' or empty parts"
        if not _PART.match(part):
            return "a path without control characters, backslashes or :*?\"<>|"
    return None
