"""Child processes at their simplest: a free loopback port, and a stop that never leaves an
orphan. The local chain (`chain.anvil`) and the tools' process management use these."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGTERM (a graceful shutdown: uvicorn runs its lifespan end), then SIGKILL if it hangs."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
