// SPDX-License-Identifier: Apache-2.0
// A standard ERC-20 (EIP-20) token, the EVM side of `tally bench --baseline evm`: the
// benchmark calls `transfer` on it in revm, as Tally's simplecoin transfer runs in wasm.
// Storage layout (which the benchmark writes at genesis, like simplecoin's balances):
//   slot 0: mapping(address => uint256) balanceOf
//   slot 1: mapping(address => mapping(address => uint256)) allowance
//   slot 2: uint256 totalSupply
// Rebuild: contracts/evm/build.sh (solc-js, exact version and flags there).
pragma solidity 0.8.28;

contract ERC20 {
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    uint256 public totalSupply;

    string public constant name = "Tally bench token";
    string public constant symbol = "TBT";
    uint8 public constant decimals = 0;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            require(allowed >= value, "ERC20: insufficient allowance");
            allowance[from][msg.sender] = allowed - value;
        }
        _transfer(from, to, value);
        return true;
    }

    function _transfer(address from, address to, uint256 value) internal {
        require(to != address(0), "ERC20: transfer to the zero address");
        uint256 fromBalance = balanceOf[from];
        require(fromBalance >= value, "ERC20: insufficient balance");
        unchecked {
            balanceOf[from] = fromBalance - value;
        }
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}
