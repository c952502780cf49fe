"""The transaction sender: locally counted nonces, EIP-1559 fees, receipts, decoded failures."""

from __future__ import annotations

from web3.types import RPCEndpoint

from orchestrator.chain.anvil import dev_account
from orchestrator.chain.errors import ErrorDecoder
from orchestrator.chain.sdk import MeshChain
from orchestrator.chain.tx import TransactionSender

TOKEN = 10**18


def test_transact_sendsDynamicFeeTransactionsWithConsecutiveNonces(chain: MeshChain) -> None:
    sender = TransactionSender(chain.w3, dev_account(8), ErrorDecoder([]))
    start = chain.w3.eth.get_transaction_count(sender.address)

    receipts = [sender.transact(dev_account(9).address, "0x", value=1) for _ in range(3)]

    transactions = [chain.w3.eth.get_transaction(receipt.tx_hash) for receipt in receipts]
    assert [tx["nonce"] for tx in transactions] == [start, start + 1, start + 2]
    assert all(tx["type"] == 2 for tx in transactions)
    assert all(receipt.gas_used == 21_000 for receipt in receipts)


def test_transact_recoversWhenAnotherWriterUsedTheSameKey(chain: MeshChain) -> None:
    ours = TransactionSender(chain.w3, dev_account(8), ErrorDecoder([]))
    foreign = TransactionSender(chain.w3, dev_account(8), ErrorDecoder([]))
    ours.transact(dev_account(9).address, "0x", value=1)
    foreign.transact(dev_account(9).address, "0x", value=1)  # takes the nonce ours expects next

    receipt = ours.transact(dev_account(9).address, "0x", value=1)

    mined = chain.w3.eth.get_transaction(receipt.tx_hash)
    assert mined["nonce"] == chain.w3.eth.get_transaction_count(ours.address) - 1


def test_deploy_returnsTheNewContractAddress(chain: MeshChain) -> None:
    sender = TransactionSender(chain.w3, dev_account(8), ErrorDecoder([]))
    # init code: CODECOPY the last byte (STOP) to memory and RETURN it as the runtime code
    stop_contract_init = "0x6001600c60003960016000f300"

    address, receipt = sender.deploy(stop_contract_init)

    assert chain.w3.eth.get_code(address) == b"\x00"
    assert receipt.block_number == chain.w3.eth.block_number


def test_transact_rereadsTheBaseFeeWhenTheNodeRefusesACachedOne(chain: MeshChain) -> None:
    sender = TransactionSender(chain.w3, dev_account(8), ErrorDecoder([]),
                               priority_fee_wei=0, base_fee_ttl_s=3600)
    sender.transact(dev_account(9).address, "0x", value=1)  # caches today's base fee
    ten_gwei = 10 * 10**9
    chain.w3.provider.make_request(RPCEndpoint("anvil_setNextBlockBaseFeePerGas"),
                                   [hex(ten_gwei)])

    receipt = sender.transact(dev_account(9).address, "0x", value=1)

    mined = chain.w3.eth.get_transaction(receipt.tx_hash)
    assert mined["maxFeePerGas"] >= ten_gwei



def test_a_transaction_estimated_within_the_second_of_the_last_block_lands_in_a_later_one(
        chain: MeshChain) -> None:
    # A stake writes a checkpoint keyed by its block's second: a second stake estimated
    # within that second rewrites it in place, and mined a minute later takes a fresh slot.
    provider = chain.account(dev_account(6))
    provider.ensure_allowance(chain.stake_manager.address, 2 * TOKEN)
    provider.stake(TOKEN)
    bonded = chain.provider_stake(provider.address).bonded
    last = int(chain.w3.eth.get_block("latest")["timestamp"])
    chain.w3.provider.make_request(RPCEndpoint("evm_setNextBlockTimestamp"), [last])
    signed = provider.sender.sign(chain.stake_manager.address,
                                  chain.stake_manager.encode_abi("stake", [TOKEN]))
    chain.w3.provider.make_request(RPCEndpoint("evm_setNextBlockTimestamp"), [last + 60])

    provider.sender.broadcast(signed.raw)

    receipt = chain.w3.eth.wait_for_transaction_receipt(signed.tx_hash)
    assert receipt["status"] == 1
    assert chain.provider_stake(provider.address).bonded == bonded + TOKEN
