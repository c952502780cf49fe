"""A local anvil chain as a context manager, for tests, benchmarks and the demo.

Each instance takes its own free port so that several engineers, test sessions and
benchmarks can run chains side by side on one machine without clashing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_typing import HexStr
from web3 import Web3
from web3.types import RPCEndpoint

from orchestrator.chain.artifacts import REPO_ROOT
from orchestrator.domain.ids import hex0x
from orchestrator.processes import free_port, stop_process

# anvil's default mnemonic, so its funded dev accounts are the same keys everywhere.
DEV_MNEMONIC = "test test test test test test test test test test test junk"


class AnvilError(RuntimeError):
    """anvil is not installed, failed to start, or did not answer in time."""


def find_anvil_binary() -> Path:
    """The repo's npm-installed anvil first (pinned version), then whatever is on PATH."""
    local = REPO_ROOT / "node_modules" / ".bin" / "anvil"
    if local.exists():
        return local
    on_path = shutil.which("anvil")
    if on_path is None:
        raise AnvilError("anvil not found in node_modules/.bin or PATH; run `make setup`")
    return Path(on_path)


@cache
def dev_account(index: int) -> LocalAccount:
    """The `index`-th account anvil funds from DEV_MNEMONIC (test keys: never hold value)."""
    Account.enable_unaudited_hdwallet_features()
    return Account.from_mnemonic(DEV_MNEMONIC, account_path=f"m/44'/60'/0'/0/{index}")


class Anvil:
    """Start anvil on a free port, wait until its RPC answers, stop it on exit."""

    def __init__(
        self,
        *,
        port: int | None = None,
        accounts: int = 10,
        balance_ether: int = 10_000,
        chain_id: int = 31337,
        block_time: float | None = None,
        steps_tracing: bool = False,
        startup_timeout_s: float = 15.0,
    ) -> None:
        self.port = port or free_port()
        self.chain_id = chain_id
        self._args = [
            str(find_anvil_binary()),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--accounts", str(accounts),
            "--balance", str(balance_ether),
            "--chain-id", str(chain_id),
            "--mnemonic", DEV_MNEMONIC,
            "--silent",
        ]
        if block_time is not None:
            self._args += ["--block-time", str(block_time)]
        if steps_tracing:  # geth-style structLogs from debug_traceTransaction (slower)
            self._args.append("--steps-tracing")
        self._startup_timeout_s = startup_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def rpc_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Anvil:
        if self._process is not None:
            raise AnvilError("anvil already started")
        self._process = subprocess.Popen(
            self._args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, "NO_COLOR": "1"},
        )
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self._startup_timeout_s
        request = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                stderr = self._process.stderr.read().decode() if self._process.stderr else ""
                raise AnvilError(f"anvil exited with {self._process.returncode}: {stderr[-500:]}")
            try:
                response = httpx.post(self.rpc_url, json=request, timeout=1.0)
                if response.status_code == 200 and "result" in response.json():
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AnvilError(
            f"anvil did not answer on {self.rpc_url} within {self._startup_timeout_s}s")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        stop_process(process, timeout_s=5)
        if process.stderr is not None:
            process.stderr.close()

    def __enter__(self) -> Anvil:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _rpc(w3: Web3, method: str, params: list[Any]) -> Any:
    response = w3.provider.make_request(RPCEndpoint(method), params)
    if "error" in response:
        raise AnvilError(f"{method} failed: {response['error']}")
    return response["result"]


def snapshot(w3: Web3) -> str:
    """Mark chain state to return to with `revert_to` (anvil's evm_snapshot)."""
    return str(_rpc(w3, "evm_snapshot", []))


def revert_to(w3: Web3, snapshot_id: str) -> None:
    """Roll back to a snapshot; local nonce caches must be resynced afterwards."""
    if _rpc(w3, "evm_revert", [snapshot_id]) is not True:
        raise AnvilError(f"evm_revert to {snapshot_id} refused")


def increase_time(w3: Web3, seconds: int) -> int:
    """Advance the chain clock and mine a block at the new time; returns that timestamp."""
    _rpc(w3, "evm_increaseTime", [seconds])
    _rpc(w3, "evm_mine", [])
    return int(w3.eth.get_block("latest")["timestamp"])


def set_balance(w3: Web3, address: str, wei: int) -> None:
    """Give a (generated) account native gas money without a funding transaction."""
    _rpc(w3, "anvil_setBalance", [address, hex(wei)])


def opcode_breakdown(w3: Web3, tx_hash: str) -> dict[str, int]:
    """Gas of one transaction by cost centre, from anvil's geth-style step trace.

    Tells the contracts engineer what dominates: storage writes and reads, events,
    calldata, and everything else (execution, calls, intrinsic cost).
    """
    response = w3.provider.make_request(RPCEndpoint("debug_traceTransaction"), [
        tx_hash, {"disableStorage": True, "disableMemory": True, "disableStack": True}])
    steps = response["result"]["structLogs"]
    centres = {"sstore": 0, "sload": 0, "log": 0}
    for step in steps:
        op = step["op"]
        if op in ("SSTORE", "SLOAD"):
            centres[op.lower()] += step["gasCost"]
        elif op.startswith("LOG"):
            centres["log"] += step["gasCost"]
    calldata = bytes(w3.eth.get_transaction(HexStr(tx_hash))["input"])
    centres["calldata"] = sum(16 if byte else 4 for byte in calldata)
    total = int(w3.eth.get_transaction_receipt(HexStr(tx_hash))["gasUsed"])
    centres["other"] = total - sum(centres.values())
    centres["total"] = total
    return centres


def mine(w3: Web3, blocks: int = 1) -> int:
    """Mine `blocks` empty blocks; returns the new head."""
    _rpc(w3, "anvil_mine", [hex(blocks)])
    return int(w3.eth.block_number)


def reorg(w3: Web3, depth: int, replacements: list[tuple[bytes, int]] | None = None) -> None:
    """Replace the last `depth` blocks with as many new ones (anvil_reorg). Their transactions
    are gone unless listed in `replacements` as (signed bytes, block offset from the fork):
    the way a real reorg drops or moves transactions."""
    txs = [[hex0x(raw), offset] for raw, offset in replacements or []]
    _rpc(w3, "anvil_reorg", [depth, txs])


def rollback(w3: Web3, depth: int) -> None:
    """Remove the last `depth` blocks without replacing them (anvil_rollback)."""
    _rpc(w3, "anvil_rollback", [depth])


def block_transactions(w3: Web3, number: int) -> list[tuple[str, bytes]]:
    """The transactions of block `number` in order, as (sender, signed bytes): what a reorg
    can put back into the new blocks (`reorg`'s replacements)."""
    block = w3.eth.get_block(number)
    txs = []
    for tx_hash in block["transactions"]:
        hexed = hex0x(tx_hash)  # type: ignore[arg-type]
        sender = str(w3.eth.get_transaction(HexStr(hexed))["from"])
        txs.append((sender, bytes.fromhex(str(_rpc(w3, "eth_getRawTransactionByHash",
                                                     [hexed]))[2:])))
    return txs
