#!/usr/bin/env bash
# Rebuilds the creation bytecode `tally bench --baseline evm` deploys in revm, with solc-js
# from npm, the exact compiler and flags they were built with:
#   ERC20.bin  from ERC20.sol (the transfer baseline, and both tokens of the swap baseline)
#   Pool.bin   from Pool.sol  (the constant-product pool of the swap baseline)
# With --check, fails if a committed .bin differs from its rebuild (for CI).
set -euo pipefail
cd "$(dirname "$0")"
SOLC_VERSION=0.8.28
CONTRACTS=(ERC20 Pool)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
for name in "${CONTRACTS[@]}"; do
    # One source per compile, into its own directory: solc-js names each output
    # <file>_sol_<contract>.bin, and Pool.sol's interface would otherwise land beside it.
    # solc 0.8.28 targets the cancun EVM by default; the metadata hash at the end of the code
    # depends on the file name, so build from this directory.
    mkdir "$out/$name"
    npx --yes "solc@${SOLC_VERSION}" --bin --optimize --optimize-runs 200 \
        --output-dir "$out/$name" "$name.sol" >/dev/null
    bin="$out/$name/${name}_sol_${name}.bin"
    if [ "${1:-}" = "--check" ]; then
        if ! diff <(tr -d '\n' < "$bin") <(tr -d '\n' < "$name.bin") >/dev/null; then
            echo "contracts/evm/$name.bin differs from solc ${SOLC_VERSION}'s build; run contracts/evm/build.sh" >&2
            status=1
        else
            echo "contracts/evm/$name.bin matches solc ${SOLC_VERSION}"
        fi
    else
        tr -d '\n' < "$bin" > "$name.bin"
        echo "wrote contracts/evm/$name.bin ($(($(wc -c < "$name.bin") / 2)) bytes) with solc ${SOLC_VERSION}"
    fi
done
exit "$status"
