"""The revert decoder turns raw revert bytes into named domain errors using only ABIs."""

from __future__ import annotations

from eth_abi import encode
from eth_utils import keccak

from orchestrator.chain.errors import ContractError, ErrorDecoder, RevertError, snake_case

ESCROW_ABI = [
    {"type": "error", "name": "JobEscrowAlreadySettled",
     "inputs": [{"name": "jobId", "type": "bytes32"}]},
    {"type": "error", "name": "JobEscrowUnauthorized",
     "inputs": [{"name": "account", "type": "address"}, {"name": "", "type": "uint256"}]},
    {"type": "error", "name": "JobEscrowBadSettlement",
     "inputs": [{"name": "settlement", "type": "tuple", "components": [
         {"name": "jobId", "type": "bytes32"}, {"name": "payouts", "type": "uint256[]"}]}]},
    {"type": "function", "name": "settle", "inputs": [], "outputs": []},
]


def _revert(signature: str, types: list[str], values: list[object]) -> bytes:
    return keccak(text=signature)[:4] + encode(types, values)


def test_decode_namesTheCustomErrorAndItsArgumentsInSnakeCase() -> None:
    job_id = b"\x11" * 32
    data = _revert("JobEscrowAlreadySettled(bytes32)", ["bytes32"], [job_id])

    error = ErrorDecoder([ESCROW_ABI]).decode(data)

    assert isinstance(error, ContractError)
    assert error.name == "JobEscrowAlreadySettled"
    assert error.arguments == {"job_id": job_id}
    assert str(error) == f"JobEscrowAlreadySettled(job_id=0x{job_id.hex()})"


def test_decode_checksumsAddressesAndNamesUnnamedArgumentsByPosition() -> None:
    account = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    data = _revert("JobEscrowUnauthorized(address,uint256)", ["address", "uint256"],
                   [account, 7])

    error = ErrorDecoder([ESCROW_ABI]).decode(data)

    assert isinstance(error, ContractError)
    assert error.arguments == {"account": account, "arg1": 7}


def test_decode_handlesStructArgumentsThroughTheirCanonicalTupleType() -> None:
    data = _revert("JobEscrowBadSettlement((bytes32,uint256[]))", ["(bytes32,uint256[])"],
                   [(b"\x01" * 32, [1, 2])])

    error = ErrorDecoder([ESCROW_ABI]).decode(data)

    assert isinstance(error, ContractError)
    assert error.arguments == {"settlement": (b"\x01" * 32, (1, 2))}


def test_decode_reportsRequireStringsPanicsAndUnknownSelectorsAsRevertError() -> None:
    decoder = ErrorDecoder([ESCROW_ABI])

    reason = decoder.decode(_revert("Error(string)", ["string"], ["too late"]))
    panic = decoder.decode(_revert("Panic(uint256)", ["uint256"], [0x11]))
    unknown = decoder.decode(b"\xde\xad\xbe\xef")
    bare = decoder.decode(b"")

    assert isinstance(reason, RevertError) and reason.reason == "reverted: too late"
    assert isinstance(panic, RevertError) and panic.reason == "panic 0x11"
    assert isinstance(unknown, RevertError) and "0xdeadbeef" in unknown.reason
    assert isinstance(bare, RevertError) and bare.reason == "reverted without data"


def test_decode_neverRaisesOnTruncatedArguments() -> None:
    data = keccak(text="JobEscrowAlreadySettled(bytes32)")[:4] + b"\x00" * 5

    error = ErrorDecoder([ESCROW_ABI]).decode(data)

    assert isinstance(error, RevertError)
    assert "JobEscrowAlreadySettled" in error.reason


def test_snake_case_convertsSolidityParameterNames() -> None:
    assert snake_case("jobId") == "job_id"
    assert snake_case("_provider") == "provider"
    assert snake_case("scoreBps") == "score_bps"
    assert snake_case("amount") == "amount"
