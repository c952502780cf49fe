"""Body size limits enforced before any parsing (pure ASGI, so nothing is buffered twice)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.api.errors import error_body


class BodyLimit:
    """Refuse a JSON body over `max_bytes` with 413: by Content-Length before reading, or
    while reading when the length is not declared. Streamed blob uploads (`stream_prefix`)
    pass through; their route applies its own, larger limit while streaming. A few routes
    whose bodies are larger by design (a PoPW answer carries Merkle openings) get their own
    limit through `route_limits`: (full-match path pattern, bytes)."""

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
        if scope["type"] != "http" or scope["path"].startswith(self.stream_prefix):
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
