#!/bin/sh
# Tests {{name}} on a throwaway local chain: builds it, deploys it, pushes actions and checks the
# state they leave. Run: ./test.sh (TALLY=/path/to/tally picks another tally binary).
# Add checks at the end: `push ACTION ARGS... --auth ACCOUNT`, then expect_u64, expect_none
# or push_fails.
set -eu
cd "$(dirname "$0")"
tally="${TALLY:-tally}"

fail() { echo "FAIL: $*" >&2; exit 1; }

# push ACTION ARGS... --auth ACCOUNT: must succeed.
push() {
    "$tally" push {{name}} "$@" --data "$chain" >/dev/null || fail "push $*"
}
# push_fails REASON ACTION ARGS... --auth ACCOUNT: must fail, saying REASON.
push_fails() {
    reason="$1"
    shift
    if out="$("$tally" push {{name}} "$@" --data "$chain" 2>&1)"; then
        fail "push $* succeeded"
    fi
    case "$out" in *"$reason"*) ;; *) fail "push $* failed without saying \"$reason\": $out" ;; esac
}
# expect_u64 ACCOUNT N: the key of ACCOUNT's name holds the u64 N.
expect_u64() {
    got="$("$tally" get {{name}} "name:$1" --as u64 --data "$chain" 2>&1)"
    [ "$got" = "$2" ] || fail "expected $1 -> $2, got: $got"
}
# expect_none ACCOUNT: the key of ACCOUNT's name is absent.
expect_none() {
    got="$("$tally" get {{name}} "name:$1" --data "$chain")"
    case "$got" in *"has no key"*) ;; *) fail "expected no key for $1, got: $got" ;; esac
}

{{build}}
chain="$(mktemp -d)"
trap 'status=$?; rm -rf "$chain"; [ "$status" -ne 0 ] || echo "test.sh: all checks passed"' EXIT
"$tally" init --data "$chain" >/dev/null
for account in {{name}} alice bob; do
    "$tally" account create "$account" --data "$chain" >/dev/null
done
"$tally" deploy {{name}} {{name}}.wasm --data "$chain" >/dev/null

push hit alice --auth alice
push hit alice --auth alice
expect_u64 alice 2
case "$("$tally" query {{name}} count alice --data "$chain")" in
    2*) ;; *) fail "query count alice did not answer 2" ;;
esac
push_fails unauthorized hit alice --auth bob
expect_u64 alice 2
push reset alice --auth alice
expect_none alice
{{harness}}
