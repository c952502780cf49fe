"""The revert decoder turns raw revert bytes into named domain errors using only ABIs."""

from __future__ import annotations

from eth_abi import encode
from eth_utils import keccak

from orchestrator.chain.errors import (
    ContractError,
    ErrorDecoder,
    OutOfGasError,
    RevertError,
    ran_out_of_gas,
    snake_case,
)

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


ARRAY_ABI = [
    {"type": "error", "name": "JobEscrowBadProviders",
     "inputs": [{"name": "providers", "type": "address[]"},
                {"name": "pairs", "type": "tuple[]", "components": [
                    {"name": "who", "type": "address"}, {"name": "amount", "type": "uint96"}]}]},
    {"type": "error", "name": "Bare", "inputs": []},
    {"type": "event", "name": "NotAnError", "inputs": []},
]


def test_decode_checksums_addresses_inside_arrays_and_struct_arrays() -> None:
    lower = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"
    checksummed = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    data = _revert("JobEscrowBadProviders(address[],(address,uint96)[])",
                   ["address[]", "(address,uint96)[]"], [[lower, lower], [(lower, 5)]])

    error = ErrorDecoder([ARRAY_ABI]).decode(data)

    assert isinstance(error, ContractError)
    assert error.arguments == {"providers": (checksummed, checksummed),
                               "pairs": ((checksummed, 5),)}
    assert str(error) == (f"JobEscrowBadProviders(providers=('{checksummed}', '{checksummed}'),"
                          f" pairs=(('{checksummed}', 5),))")


def test_decoder_knows_every_error_of_every_abi_and_nothing_else() -> None:
    decoder = ErrorDecoder([ESCROW_ABI, ARRAY_ABI])
    assert decoder.known_errors() == {"JobEscrowAlreadySettled", "JobEscrowUnauthorized",
                                      "JobEscrowBadSettlement", "JobEscrowBadProviders", "Bare"}
    bare = decoder.decode(keccak(text="Bare()")[:4])
    assert isinstance(bare, ContractError) and (bare.name, bare.arguments, str(bare)) == (
        "Bare", {}, "Bare()")


def test_decode_reports_unknown_and_undecodable_errors_and_keeps_the_raw_data() -> None:
    decoder = ErrorDecoder([ESCROW_ABI])
    unknown = b"\xde\xad\xbe\xef\x00\x01"
    for data, reason in ((unknown, "reverted with unknown error 0xdeadbeef"),
                         (keccak(text="JobEscrowAlreadySettled(bytes32)")[:4] + b"\x00" * 5,
                          "JobEscrowAlreadySettled with undecodable arguments")):
        error = decoder.decode(data)
        assert isinstance(error, RevertError)
        assert (error.reason, error.data, str(error)) == (reason, data, reason)
    assert decoder.decode(_revert("Panic(uint256)", ["uint256"], [1])).reason == "panic 0x01"


def test_snake_case_splits_after_lowercase_letters_and_digits_only() -> None:
    assert snake_case("__deadline") == "deadline"
    assert snake_case("epoch2Root") == "epoch2_root"
    assert snake_case("maxBPS") == "max_bps"  # a run of capitals stays one word
    assert snake_case("ID") == "id"


def test_malformed_require_strings_and_panics_are_named_and_keep_their_data() -> None:
    decoder = ErrorDecoder([ESCROW_ABI])
    for data, reason in (
            (keccak(text="Error(string)")[:4] + b"\x00" * 5,
             "reverted with malformed Error(string)"),
            (keccak(text="Panic(uint256)")[:4] + b"\x01", "malformed panic")):
        error = decoder.decode(data)
        assert isinstance(error, RevertError)
        assert (error.reason, error.data) == (reason, data)
    reason_data = _revert("Error(string)", ["string"], ["no"])
    panic_data = _revert("Panic(uint256)", ["uint256"], [0x132])
    reason = decoder.decode(reason_data)
    assert isinstance(reason, RevertError) and reason.data == reason_data
    panic = decoder.decode(panic_data)
    assert isinstance(panic, RevertError)
    assert (panic.reason, panic.data) == ("panic 0x132", panic_data)


NESTED_ABI = [
    {"type": "error", "name": "NoInputsKey"},  # an ABI may leave out an empty `inputs`
    {"name": "Untyped", "inputs": []},  # no `type`: not an error entry
    {"type": "error", "name": "BadPair", "inputs": [
        {"name": "pair", "type": "tuple[2]", "components": [
            {"name": "payee", "type": "tuple", "components": [
                {"name": "wallet", "type": "address"}, {"name": "memo", "type": "string"}]},
            {"name": "amount", "type": "uint256"}]}]},
    {"type": "error", "name": "Why", "inputs": [{"name": "explanation", "type": "string"},
                                                {"type": "bool"}]},
]


def test_fixed_arrays_of_nested_structs_decode_with_checksummed_addresses() -> None:
    lower = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"
    checksummed = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    data = _revert("BadPair(((address,string),uint256)[2])", ["((address,string),uint256)[2]"],
                   [[((lower, "a"), 1), ((lower, "b"), 2)]])
    error = ErrorDecoder([NESTED_ABI]).decode(data)
    assert isinstance(error, ContractError)
    assert error.arguments == {"pair": (((checksummed, "a"), 1), ((checksummed, "b"), 2))}


def test_entries_without_inputs_or_type_are_read_as_the_abi_means_them() -> None:
    decoder = ErrorDecoder([NESTED_ABI])
    assert decoder.known_errors() == {"NoInputsKey", "BadPair", "Why"}
    bare = decoder.decode(keccak(text="NoInputsKey()")[:4])
    assert isinstance(bare, ContractError) and bare.name == "NoInputsKey"
    assert isinstance(decoder.decode(keccak(text="Untyped()")[:4]), RevertError)


def test_a_parameter_without_a_name_is_named_by_its_position() -> None:
    data = _revert("Why(string,bool)", ["string", "bool"], ["too late", True])
    error = ErrorDecoder([NESTED_ABI]).decode(data)
    assert isinstance(error, ContractError)
    assert error.arguments == {"explanation": "too late", "arg1": True}
    assert str(error) == "Why(explanation='too late', arg1=True)"


def test_a_revert_without_data_keeps_empty_data() -> None:
    bare = ErrorDecoder([ESCROW_ABI]).decode(b"")
    assert isinstance(bare, RevertError) and bare.data == b""
    assert RevertError("reverted").data == b""  # what the SDK raises when a node gives none


def test_snake_case_keeps_a_leading_capital() -> None:
    assert snake_case("Xpos") == "xpos"
    assert snake_case("_X") == "x"


def _word(value: int) -> bytes:
    return value.to_bytes(32, "big")


def test_an_empty_require_string_is_an_empty_reason_not_a_malformed_one() -> None:
    # `require(ok, "")` by hand: the selector, the offset 0x20, then a length of 0 (64 bytes)
    data = keccak(text="Error(string)")[:4] + _word(0x20) + _word(0)
    error = ErrorDecoder([ESCROW_ABI]).decode(data)
    assert isinstance(error, RevertError)
    assert (error.reason, error.data) == ("reverted: ", data)


def test_a_require_string_with_a_partial_word_left_over_is_malformed() -> None:
    decoder = ErrorDecoder([ESCROW_ABI])
    whole = (keccak(text="Error(string)")[:4] + _word(0x20) + _word(2)
             + b"no".ljust(32, b"\x00"))
    good = decoder.decode(whole)
    assert isinstance(good, RevertError) and good.reason == "reverted: no"
    for data in (whole + b"\x00", whole + b"\x00" * 31, whole[:-1]):
        error = decoder.decode(data)
        assert isinstance(error, RevertError)
        assert (error.reason, error.data) == ("reverted with malformed Error(string)", data)


def test_a_transaction_ran_out_of_gas_when_at_most_a_64th_of_its_limit_was_left() -> None:
    # EIP-150: a call out of gas inside a sub-call keeps at most 1/64 of it; of 6,400 that is 100
    assert ran_out_of_gas(6_400, 6_400)
    assert ran_out_of_gas(6_300, 6_400)  # exactly a 64th left
    assert not ran_out_of_gas(6_299, 6_400)  # 101 gas handed back: a revert
    assert not ran_out_of_gas(6_250, 6_400)
    assert not ran_out_of_gas(21_000, 100_000)


def test_an_out_of_gas_error_names_its_transaction_and_keeps_its_gas_limit() -> None:
    error = OutOfGasError("0xabc", 99_000, 100_000)
    assert isinstance(error, RevertError)
    assert error.gas_limit == 100_000
    assert error.reason == str(error) == (
        "transaction 0xabc ran out of gas (99,000 of its 100,000 limit used)")
    assert error.data == b""
