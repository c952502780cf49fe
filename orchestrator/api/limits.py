"""Limits on what one client may send: body sizes enforced before any parsing (pure ASGI, so
nothing is buffered twice), and per-wallet request rates."""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Sequence

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.api.errors import error_body


class BodyLimit:
    """Refuse a JSON body over `max_bytes` with 413: by Content-Length before reading, or
    while reading when the length is not declared. Streamed blob uploads (a PUT under
    `stream_prefix`) pass through; their route applies its own, larger limit while
    streaming. A few routes whose bodies are larger by design (a PoPW answer carries Merkle
    openings, a job spec its pack's manifest) get their own limit through `route_limits`:
    (full-match path pattern, bytes)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, stream_prefix: str,
                 route_limits: Sequence[tuple[str, int]] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.stream_prefix = stream_prefix
        self.route_limits = [(re.compile(pattern), limit) for pattern, limit in route_limits]

    def limit_for(self, path: str) -> int:
        for pattern, limit in self.route_limits:
            if pattern.fullmatch(path):
                return limit
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"] == "PUT"
                                       and scope["path"].startswith(self.stream_prefix)):
            await self.app(scope, receive, send)
            return
        max_bytes = self.limit_for(scope["path"])
        too_large = JSONResponse(error_body("body_too_large",
                                            f"request bodies are limited to {max_bytes} "
                                            "bytes"), status_code=413)
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                if not value.isdigit():
                    await JSONResponse(error_body("bad_content_length", "bad Content-Length"),
                                       status_code=400)(scope, receive, send)
                    return
                if int(value) > max_bytes:
                    await too_large(scope, receive, send)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                await too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class PerKeyRate:
    """At most `limit` admitted events per key in any `window_s` (a sliding window of their
    times). Memory stays bounded: a key's old events go when it is next seen, and idle keys
    are dropped once `max_keys` are held."""

    def __init__(self, *, limit: int, window_s: float, max_keys: int = 100_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_keys = max_keys
        self._events: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def admit(self, key: str, now: float) -> float | None:
        """Record an event for `key` and return None, or return the seconds until one more
        would be admitted (nothing recorded)."""
        with self._lock:
            events = self._events.setdefault(key, deque())
            while events and events[0] <= now - self.window_s:
                events.popleft()
            if len(events) >= self.limit:
                return events[0] + self.window_s - now
            events.append(now)
            if len(self._events) > self.max_keys:
                self._events = {k: q for k, q in self._events.items()
                                if q and q[-1] > now - self.window_s}
            return None
