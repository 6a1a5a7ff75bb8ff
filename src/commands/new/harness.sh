
# The Rust tests on the in-process chain (test/{{name}}.rs), built in one directory that every
# project on this machine shares: the first run compiles Tally's chain crate (a few minutes),
# later ones reuse it. TALLY_TEST_TARGET picks another directory; TALLY_SKIP_HARNESS=1 skips them.
if [ "${TALLY_SKIP_HARNESS:-}" != 1 ]; then
    echo "running test/{{name}}.rs (the first run on this machine compiles Tally's chain crate)"
    CARGO_TARGET_DIR="${TALLY_TEST_TARGET:-${XDG_CACHE_HOME:-$HOME/.cache}/tally/test-target}" \
        cargo test --quiet --manifest-path test/Cargo.toml >&2 \
        || fail "the Rust tests in test/{{name}}.rs failed (above)"
fi
