"""Map EVM revert data to domain exceptions, driven by the ABIs' `error` entries.

Contracts revert with custom errors (`JobEscrowAlreadySettled(bytes32 jobId)`); callers
should catch those by name and read their arguments, not parse node-specific messages.
The decoder is built from every ABI in the manifest, so a new error in Solidity needs no
Python change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from eth_abi.grammar import ABIType, TupleType, parse
from eth_utils import keccak, to_checksum_address

from orchestrator.chain.artifacts import Abi
from orchestrator.domain.ids import hex0x

_ERROR_STRING_SELECTOR = keccak(text="Error(string)")[:4]
_PANIC_SELECTOR = keccak(text="Panic(uint256)")[:4]


class ChainError(Exception):
    """Base of every failure the chain SDK raises."""


class ContractError(ChainError):
    """A contract reverted with a custom error named in one of our ABIs.

    `name` is the Solidity error name; `arguments` maps snake_case parameter names to
    decoded values (bytes32 as bytes, addresses checksummed).
    """

    def __init__(self, name: str, arguments: Mapping[str, Any]) -> None:
        self.name = name
        self.arguments = dict(arguments)
        rendered = ", ".join(f"{key}={_render(value)}" for key, value in self.arguments.items())
        super().__init__(f"{name}({rendered})")


class RevertError(ChainError):
    """A revert that is not one of our custom errors: `require` string, panic, or bare revert."""

    def __init__(self, reason: str, data: bytes = b"") -> None:
        self.reason = reason
        self.data = data
        super().__init__(reason)


class OutOfGasError(RevertError):
    """A mined transaction that ran out of gas: its estimate was made on a state cheaper than
    the block it landed in. Nothing took effect and its nonce is spent; sign it again with a
    fresh estimate."""

    def __init__(self, tx_hash: str, gas_used: int, gas_limit: int) -> None:
        self.gas_limit = gas_limit
        super().__init__(f"transaction {tx_hash} ran out of gas ({gas_used:,} of its "
                         f"{gas_limit:,} limit used)")


def ran_out_of_gas(gas_used: int, gas_limit: int) -> bool:
    """A revert hands back its unused gas, an exhausted call does not: a call that runs out
    of gas inside a sub-call keeps at most 1/64 of it to unwind (EIP-150)."""
    return 64 * gas_used >= 63 * gas_limit


@dataclass(frozen=True, slots=True)
class _ErrorSpec:
    name: str
    param_names: tuple[str, ...]
    param_types: tuple[str, ...]


def _render(value: Any) -> str:
    return hex0x(value) if isinstance(value, bytes) else repr(value)


def snake_case(name: str) -> str:
    """`jobId` -> `job_id`, `providerAddr` -> `provider_addr`; leading underscores dropped."""
    name = name.lstrip("_")
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _abi_type(param: Mapping[str, Any]) -> str:
    """Canonical type string; tuples (structs) expand to their component types."""
    type_name: str = param["type"]
    if type_name.startswith("tuple"):
        inner = ",".join(_abi_type(component) for component in param["components"])
        return f"({inner}){type_name[len('tuple'):]}"
    return type_name


def _checksum_addresses(abi_type: ABIType, value: Any) -> Any:
    """eth_abi returns lowercase addresses; callers compare against checksummed ones."""
    if abi_type.is_array:
        return tuple(_checksum_addresses(abi_type.item_type, item) for item in value)
    if isinstance(abi_type, TupleType):
        return tuple(
            _checksum_addresses(component, item)
            for component, item in zip(abi_type.components, value, strict=True)
        )
    return to_checksum_address(value) if abi_type.to_type_str() == "address" else value


class ErrorDecoder:
    """Selector -> error spec for every `error` entry across a set of ABIs."""

    def __init__(self, abis: Iterable[Abi]) -> None:
        self._by_selector: dict[bytes, _ErrorSpec] = {}
        for abi in abis:
            for entry in abi:
                if entry.get("type") != "error":
                    continue
                inputs = entry.get("inputs", [])
                types = tuple(_abi_type(param) for param in inputs)
                names = tuple(
                    snake_case(param.get("name") or f"arg{index}")
                    for index, param in enumerate(inputs)
                )
                selector = keccak(text=f"{entry['name']}({','.join(types)})")[:4]
                self._by_selector[selector] = _ErrorSpec(entry["name"], names, types)

    def known_errors(self) -> set[str]:
        return {spec.name for spec in self._by_selector.values()}

    def decode(self, data: bytes) -> ChainError:
        """The exception that revert `data` stands for (never raises for odd data)."""
        selector, payload = data[:4], data[4:]
        # Lengths are checked here, not left to eth_abi: other libraries in the process
        # (ape) change how leniently the shared codec decodes short data.
        if selector == _ERROR_STRING_SELECTOR:
            try:
                if len(payload) < 64 or len(payload) % 32:
                    raise DecodingError("not a whole ABI-encoded string")
                (reason,) = abi_decode(["string"], payload)
                return RevertError(f"reverted: {reason}", data)
            except DecodingError:
                return RevertError("reverted with malformed Error(string)", data)
        if selector == _PANIC_SELECTOR:
            if len(payload) != 32:
                return RevertError("malformed panic", data)
            (code,) = abi_decode(["uint256"], payload)
            return RevertError(f"panic 0x{code:02x}", data)
        spec = self._by_selector.get(selector)
        if spec is None:
            if not data:
                return RevertError("reverted without data", data)
            return RevertError(f"reverted with unknown error 0x{data[:4].hex()}", data)
        try:
            values = abi_decode(list(spec.param_types), payload)
        except DecodingError:
            return RevertError(f"{spec.name} with undecodable arguments", data)
        arguments = {
            name: _checksum_addresses(parse(type_str), value)
            for name, type_str, value in zip(spec.param_names, spec.param_types, values,
                                             strict=True)
        }
        return ContractError(spec.name, arguments)
