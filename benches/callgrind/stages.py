#!/usr/bin/env python3
"""Per-transfer instructions of each stage, from two callgrind profiles of `tally bench`
that differ only in their transfer count (benches/callgrind/stages.sh runs them).

    python3 stages.py SMALL.out LARGE.out TRANSFERS_BETWEEN_THEM
"""
import re
import subprocess
import sys


def annotate(path, *args):
    return subprocess.run(
        ["callgrind_annotate", "--auto=no", "--threshold=100", *args, path],
        capture_output=True, text=True, check=True).stdout


def inclusive(path):
    """Inclusive instructions of each function, by symbol. Inlined code is listed under its
    own source file too, so a symbol's largest entry is its whole."""
    costs = {}
    for line in annotate(path, "--inclusive=yes").split("\n"):
        m = re.match(r"^\s*([\d,]+) \([^)]*\)\s+(.*)$", line)
        if not m:
            continue
        name = re.sub(r" \[.*\]$", "", m.group(2)).split(":", 1)[-1]
        costs[name] = max(costs.get(name, 0), int(m.group(1).replace(",", "")))
    return costs


def called_from(path, callee, caller):
    """Inclusive instructions of `callee` when called from `caller`."""
    total, block = 0, []
    for line in annotate(path, "--tree=caller").split("\n"):
        if not line.strip():
            block = []
            continue
        block.append(line)
        m = re.match(r"^\s*[\d,]+ \([^)]*\)\s+\*\s+(.*)$", line)
        if m and m.group(1).split(":", 1)[-1].startswith(callee + " "):
            for b in block[:-1]:
                mm = re.match(r"^\s*([\d,]+) \([^)]*\)\s+<\s+(.*)$", b)
                if mm and caller in mm.group(2):
                    total += int(mm.group(1).replace(",", ""))
    return total


def main():
    small, large, n = sys.argv[1], sys.argv[2], float(sys.argv[3])
    a, b = inclusive(small), inclusive(large)

    def per(symbol):
        return (b.get(symbol, 0) - a.get(symbol, 0)) / n

    ids = (called_from(large, "blake3::hash", "PreparedTx::new")
           - called_from(small, "blake3::hash", "PreparedTx::new")) / n
    execute = per("tally_chain::chain::Chain::execute_block_by")
    run_tx = per("tally_chain::exec::Exec::run_tx")
    sort = per("tally_chain::exec::journal::Journal::take_changes")
    checksum = (per("tally_chain::block::chain_checksum")
                + per("tally_chain::store::changes::Changes::checksum"))
    body = per("tally_chain::phase::finalize::BodyBuilder::finish")
    step = per("tally_bench::workload::Run::step")
    generate = per("tally_bench::workload::TransferGen::next_block")
    rows = [
        ("a block step, timed (generation excluded)", step - generate),
        ("  prepare: encode, id, admission limits", per("tally_chain::pipeline::prepare_block")),
        ("    encode", per("tally_chain::tx::SignedTransaction::encode")),
        ("    id: BLAKE3 of the encoding", ids),
        ("  execute the block", execute),
        ("    the actions (run_tx)", run_tx),
        ("      the runtime: instance, wasm, host calls", per("tally_runtime::Runtime::execute_call")),
        ("        host load (2 a transfer, 7 a trade)", per("tally_host_api::imports::load")),
        ("        host store (2 a transfer, 5 a trade)", per("tally_host_api::imports::store")),
        ("        restore the instance", per("tally_runtime::instance::Slot::restore")),
        ("    checks, fees, receipt, body (per transaction)", execute - run_tx - sort - checksum - body),
        ("    sort the block's changes", sort),
        ("    state checksum", checksum),
        ("    body and transactions root", body),
        ("  commit", per("tally_chain::chain::Chain::commit")),
        ("generate the next block (client, not timed)", generate),
    ]
    print(f"{'stage':<52} {'instructions a transaction':>27}")
    for label, value in rows:
        print(f"{label:<52} {value:>27,.0f}")


if __name__ == "__main__":
    main()
