// SPDX-License-Identifier: Apache-2.0
// A constant-product pool of two ERC-20 tokens (Uniswap v2's pair: it counts what arrived),
// the EVM side of `tally bench --contract swap --baseline evm`: the swap path of
// contracts/swap (Rust) with the same checks, the same arithmetic and the same 0.3% fee, over
// two instances of contracts/evm/ERC20.sol.
//
// A trade: the trader calls `transfer(pool, amount)` on the token it sells, then
// `swap(trader, minOut)` here, which asks both tokens for the pool's balance (two `balanceOf`
// calls), takes what arrived beyond the recorded reserves as the input, pays the output out
// with the other token's `transfer` and emits `Swapped`.
//
// Liquidity is not deposited through this contract: the benchmark writes the reserves into
// storage at genesis, as Tally's genesis writes swap's "pool" record. Storage layout (which
// that genesis writes):
//   slot 0: uint64 reserveA (bits 0-63) | uint64 reserveB (bits 64-127) | uint64 shares
//           (bits 128-191), contracts/swap's `Pool` fields, packed by solc into one slot (so
//           a swap writes both reserves with one SSTORE; declared first, since after an
//           address reserveA would share the address's slot)
//   slot 1: address tokenA
//   slot 2: address tokenB
// Rebuild: contracts/evm/build.sh (solc-js, exact version and flags there).
pragma solidity 0.8.28;

interface IERC20 {
    function balanceOf(address owner) external view returns (uint256);
    function transfer(address to, uint256 value) external returns (bool);
}

contract Pool {
    // u64, as contracts/swap's reserves and token-rs's balances.
    uint64 public reserveA;
    uint64 public reserveB;
    uint64 public shares;
    address public tokenA;
    address public tokenB;

    // The fee on what a swap puts in, in basis points: Uniswap v2's 0.3% (contracts/swap's
    // FEE_BPS).
    uint256 private constant FEE_BPS = 30;

    event Swapped(address indexed user, address tokenIn, uint256 amountIn, uint256 amountOut);

    constructor(address a, address b) {
        require(a != b, "Pool: a pool needs two different tokens");
        tokenA = a;
        tokenB = b;
    }

    // What the pool holds of each token, as it last counted (contracts/swap's `reserves`).
    function reserves() external view returns (uint64, uint64) {
        return (reserveA, reserveB);
    }

    // Sells what arrived of one token since the last count for the other, at the constant
    // product less the fee: at least `minOut` of it, or the call reverts. Only `user` itself
    // may call it (contracts/swap's `require_auth(user)`).
    function swap(address user, uint256 minOut) external returns (uint256 amountOut) {
        require(msg.sender == user, "Pool: call swap from the user's own account");
        require(shares > 0, "Pool: the pool has no liquidity");
        (address a, address b) = (tokenA, tokenB);
        (bool sellsA, uint256 amountIn, uint256 balanceA, uint256 balanceB) = _arrived(a, b);
        (uint256 reserveIn, uint256 reserveOut) =
            sellsA ? (uint256(reserveA), uint256(reserveB)) : (uint256(reserveB), uint256(reserveA));
        uint256 inWithFee = amountIn * (10_000 - FEE_BPS);
        amountOut = (inWithFee * reserveOut) / (reserveIn * 10_000 + inWithFee);
        require(amountOut > 0 && amountOut >= minOut, "Pool: the swap gives less than minOut");
        // What the pool holds once it has paid: all that arrived, less what it pays out.
        // Recorded before the token is called, since an EVM token could call back in (Tally
        // refuses re-entry, so contracts/swap may record after paying).
        if (sellsA) {
            (reserveA, reserveB) = (uint64(balanceA), uint64(balanceB - amountOut));
        } else {
            (reserveA, reserveB) = (uint64(balanceA - amountOut), uint64(balanceB));
        }
        require(
            IERC20(sellsA ? b : a).transfer(user, amountOut),
            "Pool: the token transfer out of the pool failed"
        );
        emit Swapped(user, sellsA ? a : b, amountIn, amountOut);
    }

    // Whether token A is the one that arrived (only one may have), how much of it, and the
    // pool's balances of both tokens now, asked of the tokens.
    function _arrived(address a, address b)
        private
        view
        returns (bool sellsA, uint256 amountIn, uint256 balanceA, uint256 balanceB)
    {
        balanceA = IERC20(a).balanceOf(address(this));
        balanceB = IERC20(b).balanceOf(address(this));
        (uint256 reserveA_, uint256 reserveB_) = (reserveA, reserveB);
        require(
            balanceA >= reserveA_ && balanceB >= reserveB_,
            "Pool: the pool holds less than its reserves"
        );
        require(
            balanceA <= type(uint64).max && balanceB <= type(uint64).max,
            "Pool: a balance beyond 2^64 - 1, which the reserves cannot hold"
        );
        (uint256 inA, uint256 inB) = (balanceA - reserveA_, balanceB - reserveB_);
        if (inA > 0 && inB == 0) {
            return (true, inA, balanceA, balanceB);
        }
        if (inA == 0 && inB > 0) {
            return (false, inB, balanceA, balanceB);
        }
        revert(inA == 0 ? "Pool: transfer a token to the pool first" : "Pool: transfer only the token you sell");
    }
}
