#!/bin/sh
# Tests {{name}}: builds it, then runs test/{{name}}.rs, its tests on an in-process Tally chain
# (`cargo test`; the first run compiles Tally's chain crate, which takes a few minutes).
# Run: ./test.sh (TALLY=/path/to/tally picks another tally binary). Add tests to
# test/{{name}}.rs.
set -eu
cd "$(dirname "$0")"
tally="${TALLY:-tally}"

{{build}}
cargo test --quiet --manifest-path test/Cargo.toml
echo "test.sh: all checks passed"
