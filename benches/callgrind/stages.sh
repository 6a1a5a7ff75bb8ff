#!/usr/bin/env bash
# Instructions per transfer of each stage of `tally bench --store memory --unsigned --threads
# 1`, counted by callgrind (repeatable to a few instructions, unlike timings on a shared
# machine). Issue 26's per-stage table comes from here.
#
#   bash benches/callgrind/stages.sh            # build, run, print the table
#   bash benches/callgrind/stages.sh --no-build # reuse the last profile binary
#   bash benches/callgrind/stages.sh --no-build -- --contract swap --block-size 1000 --sequential
#                                               # any other workload: these bench arguments
#                                               # are added to both runs (issue 26's goal 5)
#   bash benches/callgrind/stages.sh --no-build -- --store log
#                                               # (the script sets --unsigned, --threads 1,
#                                               # --transfers and --json itself)
#
# Two runs, of 20,000 and 60,000 transfers, and the difference divided by 40,000: genesis,
# the contract's compile and the process's start cancel out.
#
# valgrind 3.19 cannot map the instance pool's address space (a 2-thread runtime reserves
# 56 slots, ~450 GiB; see runtime/src/engine.rs), so the profile binary is built with a pool
# of 4 instances: one contract's transfers need one. The source is patched for that build
# only, in a target dir of its own (target/callgrind/build: the first build is a whole
# release build), and put back on exit; the binary goes to target/callgrind/tally.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="target/callgrind"
mkdir -p "$out"

build=1
if [ "${1:-}" = "--no-build" ]; then
  build=0
  shift
fi
if [ "${1:-}" = "--" ]; then
  shift
fi
extra=("$@")
# The memory store unless the arguments name another (`-- --store log`: the log store's commit).
store=(--store memory)
for arg in ${extra[@]+"${extra[@]}"}; do
  case "$arg" in --store | --store=*) store=() ;; esac
done

if [ "$build" = 1 ]; then
  engine=runtime/src/engine.rs
  cp "$engine" "$out/engine.rs.orig"
  trap 'cp "$out/engine.rs.orig" "$engine"' EXIT
  sed -i 's/^    WARM_INSTANCES as u32 + threads \* MAX_CALL_DEPTH + PREPARE_INSTANCES$/    let _ = (threads, WARM_INSTANCES, MAX_CALL_DEPTH, PREPARE_INSTANCES); 4/' "$engine"
  grep -q '; 4$' "$engine" || { echo "stages.sh: pool_instances changed; update the patch" >&2; exit 1; }
  CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
    cargo build --release --bin tally --target-dir "$out/build"
  cp "$out/engine.rs.orig" "$engine"
  trap - EXIT
  cp "$out/build/release/tally" "$out/tally"
fi

command -v valgrind >/dev/null || { echo "stages.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
pids=()
for n in 20000 60000; do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$n.out" "$out/tally" bench \
    ${store[@]+"${store[@]}"} --unsigned --threads 1 --transfers "$n" --json "$out/bench.$n.json" \
    ${extra[@]+"${extra[@]}"} \
    > "$out/run.$n.log" 2>&1 &
  pids+=("$!")
done
# A failed run (the pool, a bench error) would leave a profile of nothing: say so, not a table.
for i in 0 1; do
  wait "${pids[$i]}" || { echo "stages.sh: a profiled run failed; see $out/run.*.log" >&2; exit 1; }
done
python3 benches/callgrind/stages.py "$out/cg.20000.out" "$out/cg.60000.out" 40000
