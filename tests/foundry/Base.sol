// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

import {StakeManager} from "../../contracts/StakeManager.sol";
import {JobEscrow} from "../../contracts/JobEscrow.sol";
import {Disputes} from "../../contracts/Disputes.sol";
import {IStakeManager} from "../../contracts/interfaces/IStakeManager.sol";
import {IJobEscrow} from "../../contracts/interfaces/IJobEscrow.sol";
import {TestToken} from "../../contracts/test/TestToken.sol";
import {Vm} from "./Vm.sol";

/// @notice A DePIN Mesh deployment wired as contracts/README.md documents (the same order as
/// tests/contracts/conftest.py::deploy_mesh), plus small assertion helpers.
abstract contract Base {
    Vm internal constant vm = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    uint256 internal constant TOKEN = 1e18;
    uint64 internal constant UNBONDING_PERIOD = 7 days;
    uint64 internal constant SLASH_DISPUTE_WINDOW = 2 days;
    uint64 internal constant GRACE = 1 days;
    uint64 internal constant WINDOW = 1 days;
    uint96 internal constant BOND = 10e18;
    uint64 internal constant RULING = 3 days;
    bytes32 internal constant ROOT = bytes32(uint256(0x33));

    address internal admin = address(0xA11CE);
    address internal orchestrator = address(0x0C);
    address internal arbiter = address(0xA2B);
    address internal treasury = address(0x7EA);
    address internal customer = address(0xC1);
    address internal provider = address(0x51);
    address internal provider2 = address(0x52);
    address internal stranger = address(0x5E);
    address internal finder = address(0xF1);

    TestToken internal token;
    StakeManager internal sm;
    JobEscrow internal escrow;
    Disputes internal disputes;

    function _deploy(TestToken token_) internal {
        vm.warp(1_800_000_000);
        vm.roll(100);
        token = token_;
        vm.startPrank(admin);
        sm = new StakeManager(IERC20(address(token)), admin, treasury, UNBONDING_PERIOD, SLASH_DISPUTE_WINDOW);
        escrow = new JobEscrow(IERC20(address(token)), sm, admin, GRACE, WINDOW);
        sm.setJobEscrow(address(escrow));
        disputes = new Disputes(IERC20(address(token)), sm, escrow, admin, BOND, RULING);
        sm.grantRole(sm.DISPUTES_ROLE(), address(disputes));
        sm.grantRole(sm.SLASHER_ROLE(), address(disputes));
        escrow.grantRole(escrow.DISPUTES_ROLE(), address(disputes));
        sm.grantRole(sm.ORCHESTRATOR_ROLE(), orchestrator);
        sm.grantRole(sm.SLASHER_ROLE(), orchestrator);
        escrow.grantRole(escrow.ORCHESTRATOR_ROLE(), orchestrator);
        disputes.grantRole(disputes.ARBITER_ROLE(), arbiter);
        vm.stopPrank();
    }

    function _fund(address who, uint256 amount) internal {
        token.mint(who, amount);
        vm.startPrank(who);
        token.approve(address(sm), type(uint256).max);
        token.approve(address(escrow), type(uint256).max);
        token.approve(address(disputes), type(uint256).max);
        vm.stopPrank();
    }

    function _stake(address who, uint256 amount) internal {
        _fund(who, amount);
        vm.prank(who);
        sm.stake(amount);
    }

    function _job(bytes32 jobId, uint256 amount) internal {
        _fund(customer, amount);
        vm.prank(customer);
        escrow.createJob(jobId, amount, uint64(block.timestamp + 1 hours), ROOT);
    }

    function _lock(bytes32 jobId, address who, uint256 amount) internal {
        address[] memory ps = new address[](1);
        ps[0] = who;
        uint256[] memory amounts = new uint256[](1);
        amounts[0] = amount;
        vm.prank(orchestrator);
        escrow.lockCollateral(jobId, ps, amounts);
    }

    function _settle(bytes32 jobId, address who, uint256 payout) internal {
        address[] memory ps = new address[](1);
        ps[0] = who;
        uint256[] memory payouts = new uint256[](1);
        payouts[0] = payout;
        vm.prank(orchestrator);
        escrow.settle(jobId, ps, payouts, ROOT);
        _provePaid(jobId, who, payout);
    }

    /// @dev Proves what `jobId` paid `who` from the one-pair list `_settle` committed (anyone may;
    /// a dispute of a payee's payout needs it); a no-op when that list did not pay `who`.
    function _provePaid(bytes32 jobId, address who, uint256 payout) internal {
        IJobEscrow.SoloSettlement[] memory pairs = new IJobEscrow.SoloSettlement[](1);
        pairs[0] = IJobEscrow.SoloSettlement({jobId: jobId, provider: who, payout: payout, resultRoot: ROOT});
        vm.prank(stranger);
        try escrow.provePayout(jobId, who, pairs) {} catch {}
    }

    function _one(address who) internal pure returns (address[] memory ps) {
        ps = new address[](1);
        ps[0] = who;
    }

    function _skip(uint256 seconds_) internal {
        vm.warp(block.timestamp + seconds_);
        vm.roll(block.number + 1);
    }

    function _claimable(address who) internal view returns (uint256) {
        return escrow.balanceOf(who).claimable;
    }

    function assertEq(uint256 a, uint256 b, string memory what) internal pure {
        if (a != b) revert(string.concat(what, ": ", _str(a), " != ", _str(b)));
    }

    function assertLe(uint256 a, uint256 b, string memory what) internal pure {
        if (a > b) revert(string.concat(what, ": ", _str(a), " > ", _str(b)));
    }

    function assertTrue(bool ok, string memory what) internal pure {
        if (!ok) revert(what);
    }

    function _str(uint256 v) internal pure returns (string memory) {
        if (v == 0) return "0";
        bytes memory b;
        while (v != 0) {
            b = bytes.concat(bytes1(uint8(48 + v % 10)), b);
            v /= 10;
        }
        return string(b);
    }
}
