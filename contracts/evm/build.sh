#!/usr/bin/env bash
# Rebuilds contracts/evm/ERC20.bin (the creation bytecode `tally bench --baseline evm` deploys
# in revm) with solc-js from npm, the exact compiler and flags it was built with. With --check,
# fails if the committed .bin differs from the rebuild (for CI).
set -euo pipefail
cd "$(dirname "$0")"
SOLC_VERSION=0.8.28
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# solc 0.8.28 targets the cancun EVM by default; the metadata hash at the end of the code
# depends on the file name, so build from this directory.
npx --yes "solc@${SOLC_VERSION}" --bin --optimize --optimize-runs 200 --output-dir "$out" \
    ERC20.sol >/dev/null 2>&1
bin=$(ls "$out"/*ERC20.bin)
if [ "${1:-}" = "--check" ]; then
    if ! diff <(tr -d '\n' < "$bin") <(tr -d '\n' < ERC20.bin) >/dev/null; then
        echo "contracts/evm/ERC20.bin differs from solc ${SOLC_VERSION}'s build; run contracts/evm/build.sh" >&2
        exit 1
    fi
    echo "contracts/evm/ERC20.bin matches solc ${SOLC_VERSION}"
else
    tr -d '\n' < "$bin" > ERC20.bin
    echo "wrote contracts/evm/ERC20.bin ($(($(wc -c < ERC20.bin) / 2)) bytes) with solc ${SOLC_VERSION}"
fi
