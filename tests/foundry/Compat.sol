// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Base} from "./Base.sol";

/// @notice The one place the attack suite touches an interface the fixes changed: score findings
/// (commit to the finding, then reveal it in a later block). Everything else the attacks check through behaviour
/// that both the reviewed and the fixed contracts expose, so the same tests ran against both.
abstract contract Compat is Base {
    /// @dev `who` commits to and then reveals a finding against `provider_` in `epoch`.
    function _findAndSlash(address who, address provider_, uint64 epoch, uint256 scoreBps, bytes32 digest)
        internal
        returns (bool ok)
    {
        bytes32 salt = keccak256(abi.encode(who, epoch));
        vm.prank(who);
        sm.commitFinding(keccak256(abi.encode(who, provider_, epoch, scoreBps, digest, salt)));
        _skip(12);
        return _reveal(who, provider_, epoch, scoreBps, digest, salt);
    }

    /// @dev `who` sends the reveal of `salt` without a commitment of its own (a copied call).
    function _reveal(address who, address provider_, uint64 epoch, uint256 scoreBps, bytes32 digest, bytes32 salt)
        internal
        returns (bool ok)
    {
        vm.prank(who);
        try sm.slashForScore(provider_, epoch, scoreBps, digest, new bytes32[](0), salt) {
            ok = true;
        } catch {}
    }
}
