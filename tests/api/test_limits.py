"""BodyLimit and PerKeyRate on their own, as ASGI and as a clock-driven counter: what passes,
what is refused with which status, how much of a body is read before the refusal, and how long
a refused key waits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from starlette.types import Message, Receive, Scope, Send

from orchestrator.api.limits import BodyLimit, PerKeyRate

LIMIT = 100


@dataclass
class Downstream:
    """The app behind the limit: records the body it was handed and answers 200."""

    bodies: list[bytes] = field(default_factory=list)
    after_body: list[Message] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body", False):
                    break
            self.bodies.append(body)
            self.after_body.append(await receive())
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
        else:
            self.bodies.append(b"<" + scope["type"].encode() + b">")


@dataclass
class Exchange:
    status: int | None
    body: dict[str, object] | None
    reads: int  # receive() calls the limit made


def call(limit: BodyLimit, *, method: str = "POST", path: str = "/v1/jobs",
         chunks: Sequence[bytes] = (b"{}",), length: bytes | None = None,
         scope_type: str = "http", whole: bool = True) -> Exchange:
    """`whole`: the client sends its last chunk as the end of the body (else it disconnects
    after it)."""
    messages: list[Message] = [{"type": "http.request", "body": chunk,
                                "more_body": not whole or i < len(chunks) - 1}
                               for i, chunk in enumerate(chunks)]
    reads = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal reads
        reads += 1
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    headers = [] if length is None else [(b"content-length", length)]
    scope = {"type": scope_type, "method": method, "path": path, "headers": headers}
    asyncio.run(limit(scope, receive, send))
    start = next((m for m in sent if m["type"] == "http.response.start"), None)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    parsed = json.loads(body) if start is not None and start["status"] != 200 else None
    return Exchange(None if start is None else start["status"], parsed, reads)


def limited(app: Downstream, **routes: int) -> BodyLimit:
    return BodyLimit(app, max_bytes=LIMIT, stream_prefix="/v1/blobs/",
                     route_limits=[(pattern, size) for pattern, size in
                                   {"/v1/popw/[0-9]+/answer": 400, **routes}.items()])


def test_a_body_within_the_limit_reaches_the_app_whole_and_the_stream_goes_on_after_it(
        ) -> None:
    app = Downstream()
    chunks = [b"a" * 40, b"b" * 60]  # exactly the limit, in two messages, length undeclared

    exchange = call(limited(app), chunks=chunks)

    assert exchange.status == 200 and app.bodies == [b"a" * 40 + b"b" * 60]
    assert app.after_body == [{"type": "http.disconnect"}]  # the replay hands back the stream


def test_a_declared_length_over_the_limit_is_refused_before_any_read() -> None:
    app = Downstream()

    exchange = call(limited(app), chunks=[b"x" * (LIMIT + 1)], length=str(LIMIT + 1).encode())

    assert exchange.status == 413 and exchange.reads == 0 and app.bodies == []
    assert exchange.body == {"error": {"code": "body_too_large",
                                       "message": f"request bodies are limited to {LIMIT} bytes"}}


def test_a_declared_length_at_the_limit_passes() -> None:
    app = Downstream()

    assert call(limited(app), chunks=[b"x" * LIMIT], length=str(LIMIT).encode()).status == 200
    assert app.bodies == [b"x" * LIMIT]


def test_a_length_that_is_not_a_number_is_a_bad_request() -> None:
    app = Downstream()

    exchange = call(limited(app), length=b"12; drop")

    assert exchange.status == 400 and app.bodies == [] and exchange.reads == 0
    assert exchange.body == {"error": {"code": "bad_content_length",
                                       "message": "bad Content-Length"}}


def test_an_undeclared_body_over_the_limit_is_refused_as_soon_as_it_passes_it() -> None:
    app = Downstream()
    chunks = [b"x" * 60, b"x" * 41, b"x" * 1000, b"x" * 1000]

    exchange = call(limited(app), chunks=chunks)

    assert exchange.status == 413 and app.bodies == []
    assert exchange.reads == 2  # the chunk that crossed the limit was the last one read


def test_a_route_of_its_own_gets_its_own_limit_and_only_a_full_match_does() -> None:
    app = Downstream()
    limit = limited(app)

    assert call(limit, path="/v1/popw/7/answer", chunks=[b"x" * 400]).status == 200
    refused = call(limit, path="/v1/popw/7/answer", chunks=[b"x" * 401])
    assert refused.status == 413 and refused.body is not None
    assert "limited to 400 bytes" in json.dumps(refused.body)
    assert call(limit, path="/v1/popw/7/answer/x", chunks=[b"x" * 101]).status == 413
    assert call(limit, path="/x/v1/popw/7/answer", chunks=[b"x" * 101]).status == 413


def test_only_a_streamed_upload_passes_unread() -> None:
    app = Downstream()
    limit = limited(app)
    big = [b"x" * (LIMIT * 3)]

    upload = call(limit, method="PUT", path="/v1/blobs/" + "a" * 64, chunks=big,
                  length=str(LIMIT * 3).encode())
    assert upload.status == 200 and app.bodies == [b"x" * (LIMIT * 3)]
    assert call(limit, method="POST", path="/v1/blobs/lacking", chunks=big).status == 413
    assert call(limit, method="PUT", path="/v1/jobs/1", chunks=big).status == 413


def test_a_request_without_headers_or_body_field_is_read_as_empty() -> None:
    """ASGI makes both optional: no headers is no declared length, no body is b''."""
    app = Downstream()
    sent: list[Message] = []
    messages: list[Message] = [{"type": "http.request"}]

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(limited(app)({"type": "http", "method": "POST", "path": "/v1/jobs"},
                             receive, send))

    assert app.bodies == [b""] and sent[0]["status"] == 200


def test_what_is_not_an_http_request_passes_through() -> None:
    app = Downstream()

    call(limited(app), scope_type="lifespan", length=b"not a number")

    assert app.bodies == [b"<lifespan>"]


def test_a_client_gone_mid_body_hands_on_what_came() -> None:
    app = Downstream()

    exchange = call(limited(app), chunks=[b"abc", b"def"], whole=False)

    assert exchange.status == 200 and app.bodies == [b"abcdef"]
    assert exchange.reads == 4  # three by the limit (the last one the disconnect), one after


# ----- PerKeyRate ---------------------------------------------------------------------------

def test_a_key_gets_its_limit_per_window_and_is_told_exactly_how_long_to_wait() -> None:
    rate = PerKeyRate(limit=3, window_s=60.0)

    assert [rate.admit("w", t) for t in (0.0, 10.0, 20.0)] == [None, None, None]
    assert rate.admit("w", 30.0) == pytest.approx(30.0)  # the first event leaves at 60
    assert rate.admit("w", 59.0) == pytest.approx(1.0)  # a refusal recorded nothing
    assert rate.admit("w", 60.0) is None  # an event exactly a window old has left
    assert rate.admit("w", 60.5) == pytest.approx(9.5)


def test_keys_are_counted_apart() -> None:
    rate = PerKeyRate(limit=1, window_s=60.0)

    assert rate.admit("a", 0.0) is None
    assert rate.admit("b", 0.0) is None
    assert rate.admit("a", 1.0) == pytest.approx(59.0)


def test_idle_keys_are_dropped_past_the_bound_and_busy_ones_keep_their_history() -> None:
    rate = PerKeyRate(limit=1, window_s=60.0, max_keys=3)
    assert rate.admit("idle-1", 0.0) is None
    assert rate.admit("idle-2", 1.5) is None
    assert rate.admit("busy", 61.0) is None
    assert sorted(rate._events) == ["busy", "idle-1", "idle-2"]  # at the bound: all kept

    assert rate.admit("new", 61.5) is None  # past it: the idle ones go, one exactly a window

    assert sorted(rate._events) == ["busy", "new"]
    assert rate.admit("busy", 61.9) == pytest.approx(59.1)  # its event still counts
    assert rate.admit("idle-1", 62.0) is None
