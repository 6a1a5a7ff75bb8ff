#!/usr/bin/env bash
# The determinism matrix on the release binary (issue 20): one seed's state checksum must be
# the same on 1, 2 and 64 threads, with each signature backend this CPU runs forced
# (TALLY_VERIFY_BACKEND), on the memory and the log store, and for a run killed (-9) half-way
# and resumed from its data directory. The debug-build test
# `benches/tests/all/determinism.rs` covers the same matrix in-process.
#
#   bash .ci/determinism.sh path/to/release/tally
set -euo pipefail
tally="${1:?the release tally binary}"
args=(bench --accounts 2000 --dist zipf --seed 7 --block-size 2500)
transfers=60000
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

checksum() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state_checksum"])' "$1"; }

expected=""
cells=0
for backend in dalek avx2 avx512; do
  if ! TALLY_VERIFY_BACKEND=$backend "$tally" "${args[@]}" --transfers 1000 --store memory \
      --json "$work/probe.json" >/dev/null 2>"$work/probe.err"; then
    echo "determinism: backend $backend not on this CPU: $(tail -n 1 "$work/probe.err")"
    continue
  fi
  for threads in 1 2 64; do
    for store in memory log; do
      TALLY_VERIFY_BACKEND=$backend "$tally" "${args[@]}" --transfers "$transfers" \
        --threads "$threads" --store "$store" --json "$work/out.json" >/dev/null
      got="$(checksum "$work/out.json")"
      expected="${expected:-$got}"
      if [ "$got" != "$expected" ]; then
        echo "determinism: $backend, $threads threads, $store store gave $got, not $expected"
        exit 1
      fi
      cells=$((cells + 1))
    done
  done
done
if [ "$cells" -eq 0 ]; then
  echo "determinism: no backend ran: $(tail -n 1 "$work/probe.err")"
  exit 1
fi

# Killed half-way, then resumed on the same data directory: the same final checksum.
data="$work/data"
"$tally" "${args[@]}" --transfers $((transfers * 10)) --data "$data" --json "$work/killed.json" >/dev/null 2>&1 &
pid=$!
sleep 2
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
"$tally" "${args[@]}" --transfers $((transfers * 10)) --data "$data" --json "$work/resumed.json" >/dev/null 2>&1
"$tally" "${args[@]}" --transfers $((transfers * 10)) --store memory --json "$work/whole.json" >/dev/null 2>&1
if [ "$(checksum "$work/resumed.json")" != "$(checksum "$work/whole.json")" ]; then
  echo "determinism: the run resumed after kill -9 ends at another checksum"
  exit 1
fi
echo "determinism: $cells cells and a resumed run agree on $expected"
