"""Deploy the mesh contracts to a local chain with least-privilege roles.

Order (see contracts/README.md): TestToken -> StakeManager -> JobEscrow -> Disputes, then
wire them: the escrow may lock collateral, the disputes contract may freeze payouts and
slashes, and the orchestrator, slasher and arbiter keys each get exactly one power. The
admin key keeps only DEFAULT_ADMIN_ROLE (parameters, pause, role grants).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_abi import encode
from eth_account import Account
from eth_typing import ChecksumAddress, HexAddress, HexStr
from web3 import Web3
from web3.contract import Contract

from orchestrator.chain.artifacts import Artifacts, ContractArtifact, load_artifacts
from orchestrator.chain.deployment import Deployment
from orchestrator.chain.errors import ErrorDecoder
from orchestrator.chain.tx import TransactionSender

DAY = 86_400


@dataclass(frozen=True, slots=True)
class DeployParams:
    """Protocol parameters fixed at deployment (the admin can change most of them later)."""

    unbonding_period_s: int = 7 * DAY
    slash_dispute_window_s: int = 2 * DAY
    reclaim_grace_s: int = DAY
    settlement_dispute_window_s: int = DAY
    ruling_period_s: int = 3 * DAY
    dispute_bond: int = 10 * 10**18


def _constructor_args(artifact: ContractArtifact, args: list[Any]) -> bytes:
    constructor = next((entry for entry in artifact.abi if entry["type"] == "constructor"), None)
    types = [param["type"] for param in constructor["inputs"]] if constructor else []
    if len(types) != len(args):
        raise ValueError(f"{artifact.name} constructor takes {len(types)} args, got {len(args)}")
    return encode(types, args)


class _Deployer:
    def __init__(self, w3: Web3, sender: TransactionSender, artifacts: Artifacts) -> None:
        self.w3 = w3
        self.sender = sender
        self.artifacts = artifacts
        self.blocks: list[int] = []  # where each deployment landed; the first starts indexing

    def deploy(self, name: str, *args: Any) -> Contract:
        artifact = self.artifacts[name]
        address, receipt = self.sender.deploy(artifact.bytecode,
                                              _constructor_args(artifact, list(args)))
        self.blocks.append(receipt.block_number)
        return self.w3.eth.contract(address=ChecksumAddress(HexAddress(HexStr(address))),
                                    abi=artifact.abi)

    def call(self, contract: Contract, function: str, *args: Any) -> None:
        self.sender.transact(contract.address, contract.encode_abi(function, list(args)))

    def grant(self, contract: Contract, role_getter: str, account: str) -> None:
        role = contract.functions[role_getter]().call()
        self.call(contract, "grantRole", role, account)


def deploy_local(
    w3: Web3,
    admin_key: str | bytes,
    *,
    orchestrator: str,
    slasher: str,
    arbiter: str,
    treasury: str | None = None,
    params: DeployParams | None = None,
    artifacts: Artifacts | None = None,
) -> Deployment:
    """Deploy and wire TestToken, StakeManager, JobEscrow and Disputes; `admin_key` pays gas."""
    params = params or DeployParams()
    artifacts = artifacts or load_artifacts()
    admin_account = Account.from_key(admin_key)
    admin = str(admin_account.address)
    treasury = treasury or admin
    sender = TransactionSender(w3, admin_account, ErrorDecoder(artifacts.all_abis()))
    deployer = _Deployer(w3, sender, artifacts)

    token = deployer.deploy("TestToken")
    stake_manager = deployer.deploy("StakeManager", token.address, admin, treasury,
                                    params.unbonding_period_s, params.slash_dispute_window_s)
    escrow = deployer.deploy("JobEscrow", token.address, stake_manager.address, admin,
                             params.reclaim_grace_s, params.settlement_dispute_window_s)
    disputes = deployer.deploy("Disputes", token.address, stake_manager.address, escrow.address,
                               admin, params.dispute_bond, params.ruling_period_s)

    deployer.call(stake_manager, "setJobEscrow", escrow.address)
    deployer.grant(stake_manager, "ORCHESTRATOR_ROLE", orchestrator)
    deployer.grant(stake_manager, "SLASHER_ROLE", slasher)
    deployer.grant(stake_manager, "DISPUTES_ROLE", disputes.address)
    # A granted customer dispute may slash the provider: only through the arbiter's ruling.
    deployer.grant(stake_manager, "SLASHER_ROLE", disputes.address)
    deployer.grant(escrow, "ORCHESTRATOR_ROLE", orchestrator)
    deployer.grant(escrow, "DISPUTES_ROLE", disputes.address)
    deployer.grant(disputes, "ARBITER_ROLE", arbiter)

    return Deployment(
        chain_id=w3.eth.chain_id,
        token=str(token.address),
        stake_manager=str(stake_manager.address),
        job_escrow=str(escrow.address),
        disputes=str(disputes.address),
        admin=admin,
        orchestrator=Web3.to_checksum_address(orchestrator),
        slasher=Web3.to_checksum_address(slasher),
        arbiter=Web3.to_checksum_address(arbiter),
        treasury=Web3.to_checksum_address(treasury),
        deployed_at_block=min(deployer.blocks),
    )
