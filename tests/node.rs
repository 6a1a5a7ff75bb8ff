//! Tally under real CometBFT: `tally devnet` processes on 127.0.0.1, `tally load`, kills and
//! restarts. Each test bounds its waits; each network is stopped when its test ends.
//!
//! They need `cometbft` (v0.38) on PATH, in $COMETBFT or in ~/go/bin. Without it they skip
//! with a message, except in CI (CI=true), where they fail: .ci/run installs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use base64::Engine;
use prost::Message;
use serde_json::{Value, json};
use tally_bench::workload;
use tally_chain::{Action, SignedTransaction, Transaction, Transfer};
use tendermint_proto::v0_38::abci::{
    Request, RequestFinalizeBlock, RequestInitChain, RequestProcessProposal, Response, request,
    response, response_process_proposal::ProposalStatus,
};

const TALLY: &str = env!("CARGO_BIN_EXE_tally");

/// One network at a time: several validators already share two cores, and two networks at
/// once made block times (and so these tests' waits) depend on what else was running.
static ONE_NETWORK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_network() -> std::sync::MutexGuard<'static, ()> {
    ONE_NETWORK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The `cometbft` binary, or `None` (after saying why) when it is missing outside CI.
fn cometbft() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("COMETBFT")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("cometbft")));
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join("go/bin/cometbft"));
    }
    if let Some(found) = candidates.into_iter().find(|p| p.is_file()) {
        return Some(found);
    }
    let how = "install it with `go install github.com/cometbft/cometbft/cmd/cometbft@v0.38.26`";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("cometbft is missing in CI: {how} (.ci/run does)");
    }
    eprintln!("SKIPPED: cometbft is not on PATH, in $COMETBFT or in ~/go/bin; {how}");
    None
}

fn tally(args: &[&str]) -> Output {
    tally_env(args, &[])
}

fn tally_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(TALLY);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let cometbft = cometbft().expect("checked by the test");
    cmd.env("COMETBFT", cometbft);
    cmd.output().expect("tally runs")
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A running devnet, stopped when dropped (also when the test fails).
struct Net {
    dir: tempfile::TempDir,
    rpcs: Vec<String>,
}

impl Net {
    fn start(validators: usize, base_port: u16, accounts: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_str().unwrap().to_string();
        let mut net = Self {
            dir,
            rpcs: Vec::new(),
        };
        let out = ok(
            tally(&[
                "devnet",
                "--validators",
                &validators.to_string(),
                "--data",
                &data,
                "--accounts",
                &accounts.to_string(),
                "--base-port",
                &base_port.to_string(),
                "--empty-blocks-ms",
                "0",
                "--json",
            ]),
            "tally devnet",
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        net.rpcs = v["rpc"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_string())
            .collect();
        net
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn data(&self) -> &str {
        self.path().to_str().unwrap()
    }

    fn devnet_json(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.path().join("devnet.json")).unwrap()).unwrap()
    }

    /// Process ids of validator `i`: (tally node, cometbft).
    fn pids(&self, i: usize) -> (u32, u32) {
        let v = &self.devnet_json()["validators"][i];
        (
            v["tally_pid"].as_u64().unwrap() as u32,
            v["cometbft_pid"].as_u64().unwrap() as u32,
        )
    }

    fn log(&self, i: usize, which: &str) -> String {
        std::fs::read_to_string(self.path().join(format!("v{i}/{which}.log"))).unwrap_or_default()
    }

    /// Starts every validator process not running, with `env` for the new processes.
    fn restart(&self, env: &[(&str, &str)]) {
        ok(
            tally_env(&["devnet", "--data", self.data()], env),
            "tally devnet (restart)",
        );
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        let _ = tally(&["devnet", "--data", self.data(), "--stop"]);
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| !c.is_empty())
}

fn kill9(pid: u32) {
    // SAFETY: kill(2) of a process this test's devnet started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
}

fn rpc(url: &str, method: &str, params: Value) -> Option<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .post(format!("http://{url}"))
        .header("Content-Type", "application/json")
        .send(serde_json::to_vec(&body).unwrap().as_slice())
        .ok()?;
    let v: Value = serde_json::from_str(&resp.body_mut().read_to_string().ok()?).ok()?;
    v.get("result").cloned()
}

fn height(url: &str) -> u64 {
    rpc(url, "status", json!({}))
        .and_then(|s| s["sync_info"]["latest_block_height"].as_str()?.parse().ok())
        .unwrap_or(0)
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The app hash validator `url` computed for block `h` (its own FinalizeBlock answer).
fn app_hash(url: &str, h: u64) -> Option<String> {
    rpc(url, "block_results", json!({"height": h.to_string()}))
        .and_then(|r| r["app_hash"].as_str().map(str::to_string))
}

fn broadcast(url: &str, tx: &[u8]) -> (u64, String) {
    let b64 = base64::engine::general_purpose::STANDARD.encode(tx);
    let r = rpc(url, "broadcast_tx_sync", json!({"tx": b64})).expect("broadcast answered");
    (
        r["code"].as_u64().unwrap_or(0),
        r["log"].as_str().unwrap_or("").to_string(),
    )
}

/// A bundle (node/bundle.rs): tag 0x01, count, then each transaction with its length.
fn bundle(txs: &[&[u8]]) -> Vec<u8> {
    let mut out = vec![0x01];
    out.extend_from_slice(&(txs.len() as u32).to_le_bytes());
    for tx in txs {
        out.extend_from_slice(&(tx.len() as u32).to_le_bytes());
        out.extend_from_slice(tx);
    }
    out
}

/// The chain's head as the node reports it: (ref_block_num, ref_block_prefix, time_ms).
fn head(url: &str) -> (u16, u32, u64) {
    let r = rpc(url, "abci_query", json!({"path": "head", "data": ""})).expect("head");
    let value = base64::engine::general_purpose::STANDARD
        .decode(r["response"]["value"].as_str().unwrap())
        .unwrap();
    let h: Value = serde_json::from_slice(&value).unwrap();
    (
        h["ref_block_num"].as_u64().unwrap() as u16,
        h["ref_block_prefix"].as_u64().unwrap() as u32,
        h["time_ms"].as_u64().unwrap(),
    )
}

/// A signed transfer of `amount` from benchmark account `from` to `to` (seed 1).
fn transfer(
    tapos: (u16, u32, u64),
    from: u64,
    to: u64,
    memo: &str,
    data_pad: usize,
) -> SignedTransaction {
    let from_name = workload::account_name(from);
    let mut data = Transfer {
        from: from_name,
        to: workload::account_name(to),
        amount: 1,
        memo: memo.to_string(),
    }
    .encode();
    data.extend(std::iter::repeat_n(0u8, data_pad));
    let tx = Transaction {
        expiration_ms: tapos.2 + 60_000,
        ref_block_num: tapos.0,
        ref_block_prefix: tapos.1,
        actions: vec![Action {
            account: workload::SIMPLECOIN,
            name: workload::TRANSFER,
            authorization: vec![from_name],
            data,
        }],
    };
    let key = tally_chain::crypto::derived_key(1, from % workload::KEY_POOL);
    SignedTransaction::sign(tx, &[(from_name, &key)])
}

fn load(net: &Net, rpcs: &[String], transfers: u64, accounts: u64, bundle: u64) -> Value {
    let report = net
        .path()
        .join(format!("load-{}.json", Instant::now().elapsed().as_nanos()));
    ok(
        tally(&[
            "load",
            "--rpc",
            &rpcs.join(","),
            "--transfers",
            &transfers.to_string(),
            "--accounts",
            &accounts.to_string(),
            "--bundle",
            &bundle.to_string(),
            "--timeout",
            "120",
            "--json",
            report.to_str().unwrap(),
        ]),
        "tally load",
    );
    serde_json::from_slice(&std::fs::read(report).unwrap()).unwrap()
}

#[test]
fn one_validator_commits_transfers_answers_balances_and_resumes_without_replay() {
    if cometbft().is_none() {
        return;
    }
    let _one = one_network();
    let accounts = 50;
    let net = Net::start(1, 27_100, accounts);
    let url = net.rpcs[0].clone();
    let report = load(&net, &net.rpcs, 3_000, accounts, 250);
    assert_eq!(report["committed"], 3_000, "{report:#}");
    assert_eq!(report["app_hashes_agree"], true);

    // Every coin is still there, and some moved. Nothing is in flight once the load has seen
    // every transfer committed, so reading account by account gives one state.
    let read_all = || -> (u64, Vec<u64>, u64) {
        let h = height(&url);
        let balances: Vec<u64> = (0..accounts)
            .map(|i| {
                let name = workload::account_name(i).to_string();
                let out = ok(
                    tally(&["balance", &name, "--rpc", &url, "--json"]),
                    "tally balance",
                );
                serde_json::from_str::<Value>(&out).unwrap()["balance"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        (h, balances, height(&url))
    };
    let (h0, balances, h1) = read_all();
    let total: u64 = balances.iter().sum();
    assert_eq!(
        total,
        accounts * workload::INITIAL_BALANCE,
        "coins were created or destroyed (read between heights {h0} and {h1}): {balances:?}\nload: {report:#}"
    );
    assert!(
        balances.iter().any(|&b| b != workload::INITIAL_BALANCE),
        "3,000 transfers moved no coin"
    );
    let out = ok(
        tally(&["get", "simplecoin", "name:nobody", "--rpc", &url, "--json"]),
        "tally get",
    );
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["value"],
        Value::Null
    );

    // kill -9 both processes; the restarted node resumes at its last commit, not at genesis.
    let before = height(&url);
    assert!(before > 5);
    let (tally_pid, cometbft_pid) = net.pids(0);
    kill9(cometbft_pid);
    kill9(tally_pid);
    wait_for(
        "the killed processes to end",
        Duration::from_secs(10),
        || !alive(tally_pid) && !alive(cometbft_pid),
    );
    let log_before = net.log(0, "tally").len();
    net.restart(&[]);
    wait_for("blocks after the restart", Duration::from_secs(60), || {
        height(&url) > before + 5
    });
    let log = net.log(0, "tally")[log_before..].to_string();
    let resumed: u64 = log
        .lines()
        .find_map(|l| l.strip_prefix("tally node: resuming at height "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no resume line in the restarted node's log:\n{log}"));
    let first: u64 = log
        .lines()
        .find_map(|l| l.strip_prefix("tally node: first block since start: height "))
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("no block line in the restarted node's log:\n{log}"));
    assert!(
        resumed + 1 >= before,
        "resumed at {resumed}, but {before} blocks were committed"
    );
    assert_eq!(
        first,
        resumed + 1,
        "the restarted node replayed blocks it had: {log}"
    );
    assert!(log.contains(&format!("Info: last committed height {resumed}")));
    // And it still takes transfers.
    let report = load(&net, &net.rpcs, 500, accounts, 100);
    assert_eq!(report["committed"], 500, "{report:#}");
}

#[test]
fn four_validators_agree_at_every_height_and_recover_from_kill_9_and_a_crash_before_commit() {
    if cometbft().is_none() {
        return;
    }
    let _one = one_network();
    let accounts = 200;
    let net = Net::start(4, 27_200, accounts);
    let rpcs = net.rpcs.clone();
    // Transfers through every validator while the network passes 200 blocks.
    let report = load(&net, &rpcs, 10_000, accounts, 250);
    assert_eq!(
        report["committed"].as_u64().unwrap() + report["failed"].as_u64().unwrap(),
        10_000,
        "{report:#}"
    );
    wait_for("200 blocks", Duration::from_secs(240), || {
        rpcs.iter().all(|r| height(r) >= 201)
    });
    for h in 1..=200 {
        let hashes: Vec<_> = rpcs.iter().map(|r| app_hash(r, h)).collect();
        assert!(hashes[0].is_some(), "no results at height {h}");
        assert!(
            hashes.iter().all(|x| *x == hashes[0]),
            "app hashes differ at height {h}: {hashes:?}"
        );
    }

    // kill -9 validator 3 (both processes): the other three keep committing.
    let (t3, c3) = net.pids(3);
    kill9(c3);
    kill9(t3);
    let at_kill = height(&rpcs[0]);
    wait_for(
        "the other three to commit 30 more blocks",
        Duration::from_secs(60),
        || height(&rpcs[0]) >= at_kill + 30,
    );
    let others: Vec<String> = rpcs[..3].to_vec();
    let report = load(&net, &others, 2_000, accounts, 250);
    assert_eq!(
        report["committed"].as_u64().unwrap() + report["failed"].as_u64().unwrap(),
        2_000
    );

    // Restarted with a crash armed: its tally node aborts between FinalizeBlock and Commit
    // of a block it catches up on.
    let crash_at = height(&rpcs[0]).saturating_sub(5).max(at_kill + 1);
    net.restart(&[("TALLY_TEST_ABORT_BEFORE_COMMIT", &crash_at.to_string())]);
    let (t3, _) = net.pids(3);
    wait_for(
        "validator 3 to crash before a commit",
        Duration::from_secs(60),
        || !alive(t3),
    );
    assert!(
        net.log(3, "tally")
            .contains("aborting before committing block"),
        "{}",
        net.log(3, "tally")
    );

    // Restarted again, it recovers the uncommitted block and converges.
    net.restart(&[]);
    let target = height(&rpcs[0]);
    wait_for("validator 3 to catch up", Duration::from_secs(90), || {
        height(&rpcs[3]) >= target
    });
    let common = rpcs.iter().map(|r| height(r)).min().unwrap() - 1;
    for h in (1..=common).rev().take(300) {
        let a = app_hash(&rpcs[0], h);
        assert!(a.is_some(), "no results at height {h}");
        assert_eq!(
            app_hash(&rpcs[3], h),
            a,
            "validator 3 differs at height {h}"
        );
    }
}

#[test]
fn bad_input_is_refused_at_check_tx_with_a_clear_code_and_log() {
    if cometbft().is_none() {
        return;
    }
    let _one = one_network();
    let net = Net::start(1, 27_300, 10);
    let url = net.rpcs[0].clone();
    let tapos = head(&url);
    let good = transfer(tapos, 1, 2, "good", 0).encode();
    let cases: Vec<(&str, Vec<u8>, u64, &str)> = vec![
        ("not a bundle", b"hello".to_vec(), 1, "not a Tally bundle"),
        (
            "a cut-short bundle",
            bundle(&[&good])[..20].to_vec(),
            1,
            "malformed bundle framing",
        ),
        (
            "a malformed transaction",
            bundle(&[&good, b"\x01\x02"]),
            2,
            "transaction 1: malformed",
        ),
        (
            "an oversized action",
            bundle(&[&transfer(tapos, 1, 2, "big", 70_000).encode()]),
            2,
            "the limit is 65536",
        ),
        (
            "a bad signature",
            {
                let mut t = transfer(tapos, 3, 4, "forged", 0);
                t.signatures[0].signature[7] ^= 1;
                bundle(&[&t.encode()])
            },
            2,
            "bad signature",
        ),
        (
            "a signature by another key",
            {
                let mut t = transfer(tapos, 5, 6, "stolen", 0);
                let other = transfer(tapos, 7, 6, "stolen", 0);
                t.signatures[0].public_key = other.signatures[0].public_key;
                bundle(&[&t.encode()])
            },
            2,
            "bad signature",
        ),
        (
            "a transaction without its signature",
            {
                let mut t = transfer(tapos, 8, 9, "unsigned", 0);
                t.signatures.clear();
                bundle(&[&t.encode()])
            },
            2,
            "missing signature",
        ),
        (
            "an expired transaction",
            {
                let mut t = transfer(tapos, 1, 2, "old", 0).transaction;
                t.expiration_ms = tapos.2.saturating_sub(1);
                let key = tally_chain::crypto::derived_key(1, 1);
                bundle(&[
                    &SignedTransaction::sign(t, &[(workload::account_name(1), &key)]).encode(),
                ])
            },
            3,
            "expired",
        ),
        (
            "a transaction twice",
            bundle(&[&good, &good]),
            4,
            "duplicate",
        ),
    ];
    for (what, tx, code, log) in &cases {
        let (got, got_log) = broadcast(&url, tx);
        assert_eq!(got, *code, "{what}: code {got}, log {got_log:?}");
        assert!(
            got_log.contains(log),
            "{what}: log {got_log:?} lacks {log:?}"
        );
    }
    // The good transfer alone is accepted and committed.
    let (code, log) = broadcast(&url, &bundle(&[&good]));
    assert_eq!(code, 0, "{log}");
    wait_for(
        "the good transfer to commit",
        Duration::from_secs(30),
        || {
            let out = tally(&["balance", "u3", "--rpc", &url, "--json"]);
            serde_json::from_slice::<Value>(&out.stdout)
                .is_ok_and(|v| v["balance"] == workload::INITIAL_BALANCE + 1)
        },
    );
}

/// One ABCI exchange over a unix socket, as CometBFT would send it.
fn abci(stream: &mut std::os::unix::net::UnixStream, value: request::Value) -> response::Value {
    use std::io::{Read, Write};
    let mut out = Vec::new();
    Request { value: Some(value) }
        .encode_length_delimited(&mut out)
        .unwrap();
    Request {
        value: Some(request::Value::Flush(Default::default())),
    }
    .encode_length_delimited(&mut out)
    .unwrap();
    stream.write_all(&out).unwrap();
    let mut read_one = || {
        let mut len = 0u64;
        for i in 0.. {
            let mut b = [0u8];
            stream.read_exact(&mut b).unwrap();
            len |= u64::from(b[0] & 0x7f) << (7 * i);
            if b[0] & 0x80 == 0 {
                break;
            }
        }
        let mut buf = vec![0u8; len as usize];
        stream.read_exact(&mut buf).unwrap();
        Response::decode(buf.as_slice()).unwrap().value.unwrap()
    };
    let answer = read_one();
    assert!(matches!(read_one(), response::Value::Flush(_)));
    answer
}

#[test]
fn a_proposal_holding_a_bad_transaction_is_rejected() {
    // The `tally node` process alone, driven over its socket as CometBFT drives it.
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("abci.sock");
    let node = Command::new(TALLY)
        .args(["node", "--data", dir.path().join("data").to_str().unwrap()])
        .args(["--abci", &format!("unix://{}", socket.display())])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _guard = Kill(node);
    wait_for("the node's socket", Duration::from_secs(30), || {
        socket.exists()
    });
    let mut s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();

    let key = tally_chain::crypto::derived_key(1, 1);
    let genesis = json!({
        "accounts": [{"name": workload::account_name(1).to_string(), "key": hex::encode(key.verifying_key().to_bytes())}],
        "contracts": [{"account": "simplecoin", "code": hex::encode(workload::SIMPLECOIN_WASM)}],
        "allocations": [{"contract": "simplecoin", "key": hex::encode(workload::account_name(1).0.to_le_bytes()), "value": hex::encode(5u64.to_le_bytes())}],
    });
    let init = abci(
        &mut s,
        request::Value::InitChain(RequestInitChain {
            time: Some(tendermint_proto::google::protobuf::Timestamp {
                seconds: 1_800_000_000,
                nanos: 0,
            }),
            chain_id: "test".into(),
            app_state_bytes: serde_json::to_vec(&genesis).unwrap().into(),
            initial_height: 1,
            ..Default::default()
        }),
    );
    let response::Value::InitChain(init) = init else {
        panic!("{init:?}")
    };
    assert_eq!(init.app_hash.len(), 32);

    let (code, value, _) = {
        let r = abci(
            &mut s,
            request::Value::Query(tendermint_proto::v0_38::abci::RequestQuery {
                path: "head".into(),
                ..Default::default()
            }),
        );
        let response::Value::Query(q) = r else {
            panic!("{r:?}")
        };
        (q.code, q.value, q.log)
    };
    assert_eq!(code, 0);
    let h: Value = serde_json::from_slice(&value).unwrap();
    let tapos = (
        h["ref_block_num"].as_u64().unwrap() as u16,
        h["ref_block_prefix"].as_u64().unwrap() as u32,
        h["time_ms"].as_u64().unwrap(),
    );
    let good = transfer(tapos, 1, 2, "ok", 0).encode();
    let mut forged = transfer(tapos, 1, 2, "forged", 0);
    forged.signatures[0].signature[0] ^= 1;
    let process = |s: &mut std::os::unix::net::UnixStream, txs: Vec<Vec<u8>>| {
        let r = abci(
            s,
            request::Value::ProcessProposal(RequestProcessProposal {
                txs: txs.into_iter().map(Into::into).collect(),
                height: 1,
                ..Default::default()
            }),
        );
        let response::Value::ProcessProposal(p) = r else {
            panic!("{r:?}")
        };
        p.status
    };
    assert_eq!(
        process(&mut s, vec![bundle(&[&good])]),
        ProposalStatus::Accept as i32
    );
    for bad in [
        bundle(&[&good, &forged.encode()]),
        b"junk".to_vec(),
        bundle(&[b"\x00"]),
    ] {
        assert_eq!(
            process(&mut s, vec![bundle(&[&good]), bad]),
            ProposalStatus::Reject as i32
        );
    }
    // A node that did not vote (catching up) still never applies the forged transfer: its
    // FinalizeBlock verifies what it did not see, and rejects it.
    let r = abci(
        &mut s,
        request::Value::FinalizeBlock(RequestFinalizeBlock {
            txs: vec![bundle(&[&forged.encode(), &good]).into()],
            height: 1,
            time: Some(tendermint_proto::google::protobuf::Timestamp {
                seconds: 1_800_000_001,
                nanos: 0,
            }),
            ..Default::default()
        }),
    );
    let response::Value::FinalizeBlock(f) = r else {
        panic!("{r:?}")
    };
    assert_eq!(f.tx_results.len(), 1);
    let result = &f.tx_results[0];
    assert_eq!(result.code, 5, "{}", result.log);
    assert_eq!(
        &result.data[32..],
        &[2, 0],
        "forged rejected, good included"
    );
    assert!(
        result
            .log
            .contains("transaction 0: rejected: bad signature"),
        "{}",
        result.log
    );
}
