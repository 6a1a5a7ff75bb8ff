#!/usr/bin/env bash
# A short run of every fuzz target, for CI: builds them all, then runs each for
# FUZZ_SMOKE_SECONDS (default 20), printing how long each step took. Fails if a target finds
# a crash, a hang (-timeout) or an out-of-memory input.
#
#   bash fuzz/smoke.sh
#
# Built without a sanitizer (`-s none`: coverage only). Most of Tally is safe Rust, and an
# AddressSanitizer build of wasmtime and Cranelift takes several times longer, which CI's
# time budget does not allow; run a target with the default (ASan) build for long sessions.
# Needs the nightly toolchain and cargo-fuzz (see fuzz/README.md).
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${FUZZ_SMOKE_SECONDS:-20}"
targets=(tx_decode module_upload host_args log_open verify_differential calls snapshot_restore)
# 16 codegen units rather than cargo-fuzz's one, so the largest crates (wasmtime, Cranelift,
# the chain) can use both cores in LLVM; the smoke's seconds a target do not need the faster
# code. Measured gain is small: a build of every target and crate took 486 s against 490 s.
flags=(-s none --codegen-units 16)
# FUZZ_TARGET_DIR: where the build goes (CI keeps it beside its cargo cache).
if [ -n "${FUZZ_TARGET_DIR:-}" ]; then
  flags+=(--target-dir "$FUZZ_TARGET_DIR")
fi
# verify_differential compares every signature backend the CPU runs (dalek, and the lane
# backend on AVX2, on AVX-512F and on AVX-512 IFMA). Without AVX-512F (CI's machines today) it runs the AVX-512
# backend on its scalar emulation instead, built with the feature into the same target
# directory (the other targets keep the real backend choice); the AVX2 one runs on the CPU.
target_flags() {
  if [ "$1" = verify_differential ] && ! grep -qw avx512f /proc/cpuinfo; then
    echo "smoke: no AVX-512F on this CPU: verify_differential runs the AVX-512 backend emulated" >&2
    echo --features emulated-avx512
  fi
}
# libFuzzer options of one target. verify_differential's inputs need a few bytes per crafted
# signature, and at 10-20 executions a second libFuzzer's slow growth of the input length
# would keep it at batches without edits for minutes: with whole lengths from the start, an
# injected bug (x = 0 with the sign bit refused) was found in 323 executions, and not in 5,284
# without.
target_args() {
  if [ "$1" = verify_differential ]; then
    echo -len_control=0 -max_len=512
  fi
}

now() { date +%s; }
start=$(now)

step=$(now)
cargo +nightly fuzz build "${flags[@]}"
echo "smoke: build of ${#targets[@]} targets took $(( $(now) - step )) s"

for target in "${targets[@]}"; do
  step=$(now)
  mkdir -p "fuzz/corpus/$target"
  # -timeout: an input that runs longer than this is a hang, and fails the smoke.
  # shellcheck disable=SC2046 # target_flags and target_args print whole words or nothing
  cargo +nightly fuzz run "${flags[@]}" $(target_flags "$target") "$target" -- \
    -max_total_time="$seconds" -timeout=30 -rss_limit_mb=3072 -print_final_stats=1 \
    $(target_args "$target") \
    2> "fuzz/smoke-$target.log" || {
      tail -n 60 "fuzz/smoke-$target.log"
      echo "smoke: $target FAILED; the input is in fuzz/artifacts/$target/" >&2
      exit 1
    }
  grep -E '^#[0-9]+[[:space:]]+DONE' "fuzz/smoke-$target.log" | tail -n 1 || true
  grep -E '^stat::number_of_executed_units' "fuzz/smoke-$target.log" || true
  echo "smoke: $target ran $(( $(now) - step )) s"
done
echo "smoke: all targets passed in $(( $(now) - start )) s"
