"""A real network cut between an agent and the orchestrator on loopback: a small TCP proxy
the agent talks through. `cut()` drops every connection and stops listening, so the agent's
requests fail as on a dead uplink (connection refused); `restore()` listens again on the same
port. Nothing is mocked: the bytes of every request go through it.

For a JSON-RPC node behind it (the outbox sender's faults), `delay_s` holds each request that
contains `delay_only` (every request when None) that long before passing it on: a slow node,
or one that answers after the client gave up. `tap` sees every chunk before it is passed on,
with the request it belongs to, and may drop the connection instead: the place to SIGKILL a
process at an exact step (when it sends a transaction, when it reads a receipt)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.processes import free_port


@dataclass
class Exchange:
    """One connection's current request and whether its response has begun (HTTP/1.1 keeps
    one request at a time on a connection)."""

    request: bytes = b""
    responding: bool = False
    answered: threading.Event = field(default_factory=threading.Event)


ANSWER_WAIT_S = 30.0  # how long a request whose client hung up may take to be answered
REQUEST_HEAD = 65536  # enough of a request to name its JSON-RPC method; uploads stay cheap
# tap(request, response_chunk): response_chunk None for a request chunk; False drops it.
Tap = Callable[[bytes, bytes | None], bool]


class CutProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.delay_s = 0.0
        self.delay_only: bytes | None = None
        self.tap: Tap | None = None
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restore(self) -> CutProxy:
        listener = socket.create_server(("127.0.0.1", self.port))
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            doomed, self._open = self._open, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut while connecting
                    client.close()
                    upstream.close()
                    return
                self._open |= {client, upstream}
            exchange = Exchange()
            for source, sink, is_request in ((client, upstream, True),
                                             (upstream, client, False)):
                threading.Thread(target=self._pump, args=(source, sink, exchange, is_request),
                                 daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, exchange: Exchange,
              is_request: bool) -> None:
        try:
            while data := source.recv(65536):
                if is_request:
                    if exchange.responding:
                        exchange.request, exchange.responding = b"", False
                        exchange.answered.clear()
                    if len(exchange.request) < REQUEST_HEAD:
                        exchange.request += data
                    if self.delay_s and (self.delay_only is None
                                         or self.delay_only in exchange.request):
                        time.sleep(self.delay_s)
                else:
                    exchange.responding = True
                    exchange.answered.set()
                tap = self.tap
                if tap is not None and not tap(exchange.request, None if is_request else data):
                    for sock in (source, sink):
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            if is_request and exchange.request and not exchange.responding:
                # A client that gave up still sent the request: hold the node's side open
                # until it answers, as a node that got the bytes would; a half-close now
                # lets it drop the request unprocessed.
                exchange.answered.wait(ANSWER_WAIT_S)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)


def process_tree(pid: int) -> list[int]:
    """`pid` and every descendant (the agent, its sandboxes and their Blender workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def signal_tree(pid: int, signum: signal.Signals) -> None:
    for member in process_tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signum)
