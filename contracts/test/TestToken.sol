// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// @title TestToken
/// @notice Freely mintable ERC-20 for local chains and tests; production uses any plain ERC-20.
contract TestToken is ERC20 {
    constructor() ERC20("Mesh Test Token", "MESH") {}

    /// @notice Mints `amount` to `to`. Anyone may mint: local chains only.
    function mint(address to, uint256 amount) external {
        _mint(to, amount);
    }
}
