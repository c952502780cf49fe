// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

/// @notice The few Foundry cheatcodes the suites use (forge-std is not available offline).
interface Vm {
    function warp(uint256 timestamp) external;
    function roll(uint256 blockNumber) external;
    function prank(address sender) external;
    function startPrank(address sender) external;
    function stopPrank() external;
    function expectRevert(bytes4 selector) external;
    function expectRevert(bytes calldata revertData) external;
    function expectRevert() external;
    function snapshotState() external returns (uint256 snapshotId);
    function revertToState(uint256 snapshotId) external returns (bool success);
    function label(address account, string calldata name) external;
    function envOr(string calldata name, uint256 defaultValue) external view returns (uint256 value);
}
