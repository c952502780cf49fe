"""When each request reached the app: the earliest instant the service can read, before it
waits for a worker thread, its dependencies or its database. A timed probe's echo is dated
here, so the orchestrator's own queue under load is not counted against the node's link."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

ARRIVED_AT = "mesh.arrived_at"


class ArrivalTime:
    """Pure ASGI: stamps every HTTP request's scope with `clock()` as it arrives."""

    def __init__(self, app: ASGIApp, *, clock: Callable[[], float]) -> None:
        self.app = app
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[ARRIVED_AT] = self.clock()
        await self.app(scope, receive, send)


def arrived_at(request: Request, default: float) -> float:
    """The request's arrival stamp; `default` where no `ArrivalTime` stamped it."""
    return float(request.scope.get(ARRIVED_AT, default))
