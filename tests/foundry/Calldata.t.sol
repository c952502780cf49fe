// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IJobEscrow} from "../../contracts/interfaces/IJobEscrow.sol";
import {IStakeManager} from "../../contracts/interfaces/IStakeManager.sol";
import {TestToken} from "../../contracts/test/TestToken.sol";
import {Base} from "./Base.sol";

/// @notice Malformed calldata on the assembly paths of batch settlement (JobEscrow.settleBatchSolo
/// builds its event array in assembly; StakeManager.settleCollateral reads pairs straight from
/// calldata): every malformed call reverts and changes nothing.
contract CalldataTest is Base {
    bytes32 internal constant JOB = keccak256("calldata job");

    function setUp() public {
        _deploy(new TestToken());
        _stake(provider, 1_000 * TOKEN);
        _job(JOB, 10 * TOKEN);
        _lock(JOB, provider, TOKEN);
    }

    function _solo() internal view returns (IJobEscrow.SoloSettlement[] memory batch) {
        batch = new IJobEscrow.SoloSettlement[](1);
        batch[0] = IJobEscrow.SoloSettlement(JOB, provider, 10 * TOKEN, ROOT);
    }

    function _unchanged() internal view {
        assertEq(uint256(uint8(escrow.jobOf(JOB).status)), 1, "job changed");
        assertEq(sm.lockedFor(JOB, provider), TOKEN, "collateral changed");
        assertEq(escrow.balanceOf(provider).pending, 0, "payout credited");
    }

    function _call(address target, address caller, bytes memory data) internal returns (bool ok, bytes memory ret) {
        vm.prank(caller);
        (ok, ret) = target.call(data);
    }

    function test_settleBatchSolo_dirtyAddressReverts() public {
        bytes memory data = abi.encodeCall(escrow.settleBatchSolo, (_solo()));
        data[4 + 32 * 3 + 3] = 0xff;
        (bool ok,) = _call(address(escrow), orchestrator, data);
        assertTrue(!ok, "dirty address accepted");
        _unchanged();
    }

    function test_settleBatchSolo_lengthPastTheCalldataReverts() public {
        bytes memory data = abi.encodeCall(escrow.settleBatchSolo, (_solo()));
        data[4 + 32 * 2 - 1] = 0x02; // claims two pairs, carries one
        (bool ok,) = _call(address(escrow), orchestrator, data);
        assertTrue(!ok, "a short array was read past its end");
        _unchanged();
    }

    function test_settleBatchSolo_truncatedPairReverts() public {
        bytes memory full = abi.encodeCall(escrow.settleBatchSolo, (_solo()));
        bytes memory data = new bytes(full.length - 40);
        for (uint256 i; i < data.length; ++i) data[i] = full[i];
        (bool ok,) = _call(address(escrow), orchestrator, data);
        assertTrue(!ok, "a truncated pair settled");
        _unchanged();
    }

    function test_settleBatchSolo_offsetOutOfBoundsReverts() public {
        bytes memory data = abi.encodeCall(escrow.settleBatchSolo, (_solo()));
        data[4 + 31] = 0xf0; // the array's offset points past the calldata
        (bool ok,) = _call(address(escrow), orchestrator, data);
        assertTrue(!ok, "an out-of-bounds offset was followed");
        _unchanged();
    }

    function test_settleCollateral_lengthPastTheCalldataReverts() public {
        bytes memory data = abi.encodeCall(sm.settleCollateral, (_solo(), block.timestamp + 1 days));
        data[4 + 32 * 3 - 1] = 0x03;
        (bool ok,) = _call(address(sm), address(escrow), data);
        assertTrue(!ok, "a short array was read past its end");
        _unchanged();
    }

    function test_settleCollateral_dirtyAddressRevertsWithTheWord() public {
        bytes memory data = abi.encodeCall(sm.settleCollateral, (_solo(), block.timestamp + 1 days));
        data[4 + 32 * 4] = 0x80;
        (bool ok, bytes memory ret) = _call(address(sm), address(escrow), data);
        assertTrue(!ok, "dirty address accepted");
        uint256 word = uint256(uint160(provider)) | (uint256(0x80) << 248);
        assertTrue(keccak256(ret) == keccak256(abi.encodeWithSelector(IStakeManager.StakeManagerInvalidAddress.selector, word)), "wrong revert data");
        _unchanged();
    }

    function test_settleBatchSolo_emptyBatchChangesNothing() public {
        vm.prank(orchestrator);
        escrow.settleBatchSolo(new IJobEscrow.SoloSettlement[](0));
        _unchanged();
    }
}
