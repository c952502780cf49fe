// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// @title TestReentrantToken
/// @notice ERC-20 that, once armed, calls back into a target during its next transfer (as a
/// malicious token or an ERC-777 hook would) and bubbles up the callee's revert.
contract TestReentrantToken is ERC20 {
    address private _target;
    bytes private _callData;

    constructor() ERC20("Reentrant Token", "REENT") {}

    /// @notice Mints `amount` to `to`.
    function mint(address to, uint256 amount) external {
        _mint(to, amount);
    }

    /// @notice On the next transfer between two accounts, call `target` with `callData`, once.
    function arm(address target, bytes calldata callData) external {
        _target = target;
        _callData = callData;
    }

    function _update(address from, address to, uint256 value) internal override {
        super._update(from, to, value);
        address target = _target;
        if (target == address(0) || from == address(0) || to == address(0)) return;
        bytes memory callData = _callData;
        delete _target;
        delete _callData;
        (bool ok, bytes memory returned) = target.call(callData);
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(returned, 0x20), mload(returned))
            }
        }
    }
}
