"""The indexer's chain reads against anvil: eth_getLogs ranges shrink when the node refuses
them as too large (a loopback proxy plays a provider with a range limit) and grow back after
successes; the finality point is the chain's `finalized` tag where it is stricter than the
margin; every mesh event decodes to a `ChainEvent` with plain Python values."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from orchestrator.chain.anvil import Anvil, mine
from orchestrator.chain.indexer import ChainIndexReader, LogRangeTooLarge
from orchestrator.chain.sdk import MeshAccount, MeshChain
from orchestrator.chain.tx import connect

pytestmark = pytest.mark.anvil
RANGE_LIMIT = 5  # blocks the proxy lets one eth_getLogs span


class RangeLimitedProxy:
    """JSON-RPC on loopback that forwards to anvil, except eth_getLogs over more than
    RANGE_LIMIT blocks, which it refuses the way hosted providers do."""

    def __init__(self, upstream: str) -> None:
        self.refused = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                answer = proxy.answer(body, upstream)
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, body: dict[str, Any], upstream: str) -> dict[str, Any]:
        if body.get("method") == "eth_getLogs":
            (query,) = body["params"]
            span = int(query["toBlock"], 16) - int(query["fromBlock"], 16) + 1
            if span > RANGE_LIMIT:
                self.refused += 1
                return {"jsonrpc": "2.0", "id": body["id"],
                        "error": {"code": -32005,
                                  "message": "query returned more than 10000 results"}}
        answer: dict[str, Any] = httpx.post(upstream, json=body, timeout=10).json()
        return answer

    def __enter__(self) -> RangeLimitedProxy:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(anvil: Anvil) -> Iterator[RangeLimitedProxy]:
    with RangeLimitedProxy(anvil.rpc_url) as running:
        yield running


def test_a_refused_range_is_halved_until_the_node_answers_and_grows_back(
        chain: MeshChain, orchestrator: MeshAccount, proxy: RangeLimitedProxy) -> None:
    start = int(chain.w3.eth.block_number)
    for epoch in range(6):
        orchestrator.commit_epoch(5_000 + epoch, b"\x01" * 32)
        mine(chain.w3, 2)
    head = int(chain.w3.eth.block_number)
    limited = MeshChain(connect(proxy.url), chain.deployment)
    reader = ChainIndexReader(limited, finality_tag="none", max_chunk=64)
    committed, block = 0, start + 1
    chunks: list[int] = []
    while block <= head:
        got = reader.read_logs(block, head, 64 if not chunks else chunks[-1])
        assert got.last_block - block + 1 <= RANGE_LIMIT
        committed += sum(1 for event in got.events if event.name == "EpochCommitted")
        chunks.append(got.chunk)
        block = got.last_block + 1
    assert committed == 6 and proxy.refused > 0
    assert chunks[0] > 4  # a success grows the range it asks for next
    with pytest.raises(LogRangeTooLarge):  # a node refusing even one block is an error
        ChainIndexReader(limited, max_chunk=1)._logs(start, head)


def test_the_finalized_tag_decides_where_it_is_stricter_than_the_margin(
        chain: MeshChain) -> None:
    head = mine(chain.w3, 70)
    finalized = int(chain.w3.eth.get_block("finalized")["number"])
    assert finalized < head - 3
    assert ChainIndexReader(chain, finality_tag="finalized").heights(3).final == finalized
    assert ChainIndexReader(chain, finality_tag="none").heights(3).final == head - 3
    assert ChainIndexReader(chain, finality_tag="safe").heights(40).final == head - 40
    with pytest.raises(ValueError, match="finality tag"):
        ChainIndexReader(chain, finality_tag="latest")


def test_events_decode_to_plain_values(chain: MeshChain, customer: MeshAccount,
                                       orchestrator: MeshAccount) -> None:
    start = int(chain.w3.eth.block_number) + 1
    job_id = b"\x07" * 32
    deadline = int(chain.w3.eth.get_block("latest")["timestamp"]) + 3600
    customer.create_job(job_id, 10**18, deadline, b"\x08" * 32)
    orchestrator.commit_epoch(1234, b"\x09" * 32)
    reader = ChainIndexReader(chain)
    events = reader.read_logs(start, int(chain.w3.eth.block_number), 100).events
    by_name = {event.name: event for event in events}
    created, committed = by_name["JobCreated"], by_name["EpochCommitted"]
    assert created.contract == "JobEscrow" and created.args["jobId"] == job_id
    assert type(created.args["jobId"]) is bytes and created.args["customer"] == customer.address
    assert committed.contract == "StakeManager" and committed.args == {
        "epoch": 1234, "scoreRoot": b"\x09" * 32}
    assert [event.key for event in events] == sorted(event.key for event in events)
