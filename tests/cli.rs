//! The `tally` binary as a user runs it.

use std::path::Path;
use std::process::{Command, Output};

fn tally(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run tally")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "tally failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// Whether clang with wasm32 is here. CI installs it (`.ci/run`), so there a missing toolchain
/// is a failure, not a skip.
fn have_clang() -> bool {
    let found = Command::new("clang")
        .arg("-print-targets")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32"));
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have clang: apt-get install clang lld"
        );
        eprintln!("skipping: clang with wasm32 not found (apt-get install clang lld)");
    }
    found
}

#[test]
fn committed_contracts_rebuild_byte_identically() {
    if !have_clang() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources: Vec<_> = std::fs::read_dir(root.join("contracts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    sources.sort();
    assert!(!sources.is_empty());
    for source in sources {
        let out = dir.path().join("out.wasm");
        stdout(&tally(&[
            "build",
            source.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ]));
        let committed = source.with_extension("wasm");
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&committed).unwrap(),
            "{} does not match a rebuild of {}: rebuild it (contracts/README.md)",
            committed.display(),
            source.display()
        );
    }
}

#[test]
fn build_without_a_toolchain_says_what_to_install() {
    let out = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["build", "contracts/simplecoin.c", "-o", "/dev/null"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("TALLY_CLANG", "/nonexistent/clang")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("apt-get install clang lld"), "{err}");
}

/// Issue 23: a C contract that includes a C library header is told there is none, and what
/// tally.h has instead, rather than clang's bare "file not found".
#[test]
fn issue_23_build_of_a_c_contract_that_includes_stdio_says_contracts_have_no_libc() {
    if !have_clang() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("hello.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include \"tally.h\"\nint x;\n",
    )
    .unwrap();
    let out = tally(&["build", source.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("includes <stdio.h>, but contracts have no libc: use tally.h's prints"),
        "{err}"
    );
}

/// Issue 23: `--stack-size` gives a C contract a bigger stack (the memory grows to hold it),
/// and a size wasm-ld cannot use is refused with the one to use instead.
#[test]
fn issue_23_build_stack_size_gives_a_c_contract_a_bigger_stack() {
    if !have_clang() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("deep.c");
    std::fs::write(
        &source,
        "#include \"tally.h\"\n\
         TALLY_EXPORT(\"apply\") void apply(uint64_t r, uint64_t c, uint64_t a) {\n\
             volatile char big[60000];\n\
             big[0] = 1;\n\
             store(\"k\", 1, (const void *)big, 1);\n\
         }\n",
    )
    .unwrap();
    let src = source.to_str().unwrap();
    let out = tally(&["build", src, "--stack-size", "131072"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tally(&["build", src, "--stack-size", "1025"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("16-byte aligned") && err.contains("use 1040"),
        "{err}"
    );
}

#[test]
fn build_rejects_a_missing_source_clearly() {
    let out = tally(&["build", "no/such/file.c"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/file.c is not a file"));
}

fn bench_json(seed: &str) -> serde_json::Value {
    let out = tally(&[
        "bench",
        "--transfers",
        "3000",
        "--accounts",
        "100",
        "--seed",
        seed,
        "--json",
        "-",
        "--block-size",
        "1000",
    ]);
    serde_json::from_str(&stdout(&out)).expect("JSON on stdout")
}

#[test]
fn bench_reports_json_and_the_same_seed_gives_the_same_checksum() {
    let a = bench_json("5");
    for field in [
        "transfers",
        "failed",
        "seconds",
        "tps",
        "state_checksum",
        "config",
    ] {
        assert!(a.get(field).is_some(), "missing {field} in {a}");
    }
    assert_eq!(a["transfers"], 3000);
    assert!(a["tps"].as_f64().unwrap() > 0.0);
    assert_eq!(a["config"]["dist"], "uniform");
    assert_eq!(
        (a["store"].as_str(), a["signed"].as_bool()),
        (Some("log"), Some(true))
    );
    assert_eq!(a["blocks"], 3);
    assert_eq!(a["state_checksum"], bench_json("5")["state_checksum"]);
    assert_ne!(a["state_checksum"], bench_json("6")["state_checksum"]);
}

#[test]
fn bench_reports_baselines_the_verify_ceiling_and_a_plot() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("run.svg");
    let out = tally(&[
        "bench",
        "--transfers",
        "2000",
        "--accounts",
        "50",
        "--block-size",
        "500",
        "--baseline",
        "native,wasmi",
        "--plot",
        plot.to_str().unwrap(),
        "--json",
        "-",
    ]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON on stdout");
    for baseline in ["native", "wasmi"] {
        let tps = report["baselines"][baseline]["tps"].as_f64();
        assert!(tps.is_some_and(|t| t > 0.0), "{baseline} in {report}");
    }
    assert!(report["verify_ceiling_tps"].as_f64().unwrap() > 0.0);
    assert_eq!(report["per_block"].as_array().unwrap().len(), 4);
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<polyline"));
    // With every stage off the run reaches the same state (with a baseline too: baselines
    // compare engines on a zero fee schedule, their transfers still offering the usual fee).
    let sequential = tally(&[
        "bench",
        "--transfers",
        "2000",
        "--accounts",
        "50",
        "--block-size",
        "500",
        "--baseline",
        "native",
        "--sequential",
        "--threads",
        "1",
        "--json",
        "-",
    ]);
    let sequential: serde_json::Value = serde_json::from_str(&stdout(&sequential)).unwrap();
    assert_eq!(sequential["state_checksum"], report["state_checksum"]);
    assert_eq!(sequential["pipeline"]["batch_verify"], false);
    // `--free`: the zero schedule, whose transfers offer no fee (a max fee of 0 encodes in one
    // byte, not four): nothing burned, nothing refused.
    let free: serde_json::Value = serde_json::from_str(&stdout(&tally(&[
        "bench",
        "--transfers",
        "1000",
        "--accounts",
        "50",
        "--block-size",
        "500",
        "--free",
        "--json",
        "-",
    ])))
    .unwrap();
    assert_eq!(free["failed"], 0);
    assert_eq!(free["fees"]["schedule"], "free");
    assert_eq!(free["fees"]["burned"], 0);
    let bytes = |r: &serde_json::Value| r["bytes_per_tx"].as_f64().unwrap();
    assert!(
        bytes(&free) < bytes(&report),
        "{} bytes a transfer",
        bytes(&free)
    );
    // The Rust token runs the same workload, with its own baselines.
    let token: serde_json::Value = serde_json::from_str(&stdout(&tally(&[
        "bench",
        "--contract",
        "token-rs",
        "--transfers",
        "1000",
        "--accounts",
        "50",
        "--baseline",
        "native,wasmi",
        "--json",
        "-",
    ])))
    .unwrap();
    assert_eq!(token["config"]["contract"], "token-rs");
    assert_eq!(token["failed"], 0);
    assert!(token["baselines"]["wasmi"]["tps"].as_f64().unwrap() > 0.0);
}

/// Issue 22: trades take the `evm` baseline only (the others run transfers). Built with the
/// `evm` feature, the run reports revm's trades and Tally/revm per block, checked to end where
/// Tally's do; built without, it says how to get it.
#[test]
fn issue_22_bench_swap_compares_with_the_evm_only() {
    let refused = tally(&[
        "bench",
        "--contract",
        "swap",
        "--transfers",
        "100",
        "--baseline",
        "wasmi",
    ]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("--baseline evm"), "{why}");
    let args = [
        "bench",
        "--contract",
        "swap",
        "--transfers",
        "2000",
        "--accounts",
        "50",
        "--block-size",
        "500",
        "--store",
        "memory",
        "--unsigned",
        "--baseline",
        "evm",
        "--json",
        "-",
    ];
    let out = tally(&args);
    if !cfg!(feature = "evm") {
        assert!(!out.status.success());
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(why.contains("--features evm"), "{why}");
        return;
    }
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["failed"], 0);
    let evm = &report["baselines"]["evm"];
    assert!(evm["tps"].as_f64().unwrap() > 0.0, "{report}");
    assert_eq!(evm["ratio"]["blocks"], 4);
    // Both tokens, traders' and pool's: 50 traders with 1,000,000 each, the pool 10^12.
    let supply = 2 * (50 * 1_000_000 + 1_000_000_000_000u64);
    assert_eq!(evm["accounts_supply"], supply);
    assert_eq!(report["accounts_supply"], supply);
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(
        table.contains("µs execute per trade); Tally/evm per block"),
        "{table}"
    );
}

#[test]
fn bench_rejects_bad_flags() {
    let out = tally(&["bench", "--dist", "pareto"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("uniform"));
    assert!(!tally(&["bench", "--accounts", "1"]).status.success());
    assert!(!tally(&["bench", "--block-size", "0"]).status.success());
}

#[test]
fn help_has_examples() {
    for cmd in ["build", "bench", "push", "get", "keys", "query", "balance"] {
        let help = stdout(&tally(&[cmd, "--help"]));
        assert!(help.contains("Examples:"), "{cmd} --help:\n{help}");
    }
}

#[test]
fn issue_10_output_to_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    assert!(tally(&["init", "--data", d]).status.success());
    // `tally blocks | head -0`: the reader is gone before tally writes anything.
    let mut child = Command::new(env!("CARGO_BIN_EXE_tally"))
        .args(["blocks", "--data", d])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{stderr}"
    );
}

mod crash {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use tally_bench::workload::{INITIAL_BALANCE, SIMPLECOIN, account_name};
    use tally_chain::verify::verify;
    use tally_chain::{Chain, ChainConfig, LogOptions, LogStore, StateStore};
    use tally_runtime::{Runtime, RuntimeConfig};

    const ACCOUNTS: u64 = 500;

    fn bench_args(dir: &Path, store: &str) -> Vec<String> {
        [
            "bench",
            "--data",
            dir.to_str().unwrap(),
            "--store",
            store,
            "--transfers",
            "40000",
            "--accounts",
            "500",
            "--block-size",
            "1000",
            "--dist",
            "zipf",
            "--json",
            "-",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Reopens the data dir as a node would and checks it: the head is a committed block,
    /// every retained block verifies (re-executed from genesis), and coins are conserved.
    /// `None` when the run was killed before it committed its genesis block.
    fn check_reopened(dir: &Path, store: &str) -> Option<u64> {
        let path = dir.join("store");
        if !path.exists() {
            return None; // killed before the store was created
        }
        let store: Box<dyn StateStore> = match store {
            "log" => Box::new(LogStore::open(path, LogOptions::default()).unwrap()),
            #[cfg(feature = "rocksdb")]
            "rocksdb" => Box::new(tally_chain::store::rocks::RocksStore::open(path, 512).unwrap()),
            other => panic!("no store {other}"),
        };
        store.head()?; // killed before the genesis block was committed
        let runtime = Arc::new(Runtime::new(RuntimeConfig::default()).unwrap());
        let chain = Chain::open(runtime, store, ChainConfig::default()).unwrap();
        let report = verify(chain.store(), chain.runtime().clone(), chain.config()).unwrap();
        assert_eq!(report.to, chain.head().height);
        if chain.head().height >= 1 {
            let total: u64 = (0..ACCOUNTS)
                .map(|i| {
                    let v = chain.get(SIMPLECOIN, &account_name(i).0.to_le_bytes());
                    v.unwrap()
                        .map_or(0, |v| u64::from_le_bytes(v[..8].try_into().unwrap()))
                })
                .sum();
            assert_eq!(total, ACCOUNTS * INITIAL_BALANCE, "coins not conserved");
        }
        Some(chain.head().height)
    }

    #[test]
    fn kill_9_at_random_moments_loses_no_committed_block() {
        kill_9_loop("log");
        #[cfg(feature = "rocksdb")]
        kill_9_loop("rocksdb");
    }

    fn kill_9_loop(store: &str) {
        let dir = tempfile::tempdir().unwrap();
        let args = bench_args(dir.path(), store);
        // Kill points vary with the clock: each run of the test hits other moments.
        let jitter = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_millis() as u64;
        let mut last_height = 0;
        // Three kill points in CI; TALLY_CRASH_ROUNDS=N for more (each round resumes the run
        // and kills it again, somewhere in its first two seconds).
        let rounds: u64 = std::env::var("TALLY_CRASH_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(3);
        let points = (0..rounds).map(|i| [400u64, 900, 1500][i as usize % 3]);
        for (i, base_ms) in points.enumerate() {
            let mut child = Command::new(env!("CARGO_BIN_EXE_tally"))
                .args(&args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(
                base_ms + (jitter * (i as u64 + 1)) % 400,
            ));
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            let _ = child.wait();
            let Some(height) = check_reopened(dir.path(), store) else {
                continue; // nothing was committed yet, so nothing can be lost
            };
            let verified: serde_json::Value = serde_json::from_str(&stdout(&tally(&[
                "verify",
                "--json",
                "--data",
                dir.path().to_str().unwrap(),
            ])))
            .unwrap();
            assert_eq!(verified["to"], height);
            assert!(
                height >= last_height,
                "height went back from {last_height} to {height}"
            );
            last_height = height;
        }
        eprintln!("{store}: survived {rounds} kill -9 points, last committed height {last_height}");
        // Resume to the end: the result equals an uninterrupted run's.
        let resumed: serde_json::Value = serde_json::from_str(&stdout(&tally(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        )))
        .unwrap();
        let fresh_dir = tempfile::tempdir().unwrap();
        let fresh_args = bench_args(fresh_dir.path(), "memory");
        let fresh: serde_json::Value = serde_json::from_str(&stdout(&tally(
            &fresh_args.iter().map(String::as_str).collect::<Vec<_>>(),
        )))
        .unwrap();
        assert_eq!(
            resumed["state_checksum"], fresh["state_checksum"],
            "{store}"
        );
        check_reopened(dir.path(), store);
    }

    #[test]
    fn a_data_dir_from_other_settings_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        stdout(&tally(&[
            "bench",
            "--data",
            d,
            "--transfers",
            "100",
            "--accounts",
            "10",
        ]));
        let out = tally(&[
            "bench",
            "--data",
            d,
            "--transfers",
            "100",
            "--accounts",
            "11",
        ]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("other settings"));
    }
}

#[test]
fn every_store_gives_the_same_checksum_signed_or_not() {
    let run = |store: &str, unsigned: bool| {
        let mut args = vec![
            "bench",
            "--transfers",
            "2000",
            "--accounts",
            "100",
            "--block-size",
            "500",
            "--store",
            store,
            "--json",
            "-",
        ];
        if unsigned {
            args.push("--unsigned");
        }
        let v: serde_json::Value = serde_json::from_str(&stdout(&tally(&args))).unwrap();
        v["state_checksum"].clone()
    };
    let log = run("log", false);
    assert_eq!(log, run("memory", false));
    if cfg!(feature = "rocksdb") {
        assert_eq!(log, run("rocksdb", false));
    } else {
        let out = tally(&["bench", "--store", "rocksdb"]);
        assert!(String::from_utf8_lossy(&out.stderr).contains("--features rocksdb"));
    }
    // Unsigned runs register no keys, so their state differs, but agree with each other.
    assert_eq!(run("log", true), run("memory", true));
}

mod local_chain {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn ok(args: &[&str]) -> serde_json::Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&stdout(&tally(&args))).unwrap()
    }

    fn fails(args: &[&str], says: &str) {
        let out = tally(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }

    /// Issue 20: a push is reported only once its block is on disk. The block's sync (in the
    /// foreground or the background, as the commit asks) fails here (`TALLY_TEST_EIO_AT`): the command fails naming the segment, and the
    /// next run finds the store at the block before, so the account was never created.
    #[test]
    fn issue_20_a_push_whose_block_fails_to_sync_fails_and_commits_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("chain");
        let d = d.to_str().unwrap();
        ok(&["init", "--data", d]);
        let failed = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(["account", "create", "alice", "--data", d])
            .env("TALLY_TEST_EIO_AT", "block-sync")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&failed.stderr);
        assert!(
            !failed.status.success(),
            "reported although its block is not on disk: {}",
            String::from_utf8_lossy(&failed.stdout)
        );
        assert!(
            err.contains("syncing") && err.contains("log-00000000.tlog"),
            "the error names the file: {err}"
        );
        assert!(err.contains("start it again"), "and says what to do: {err}");
        assert_eq!(ok(&["account", "create", "alice", "--data", d])["block"], 1);
    }

    #[test]
    fn init_account_deploy_push_get_blocks_verify() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("chain");
        let d = dir.to_str().unwrap();
        ok(&["init", "--data", d]);
        let mode = std::fs::metadata(dir.join("keystore.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the keystore must be owner-only");
        fails(&["init", "--data", d], "already holds a chain");

        ok(&["account", "create", "simplecoin", "--data", d]);
        ok(&["account", "create", "alice", "--data", d]);
        fails(
            &["account", "create", "alice", "--data", d],
            "already has a key",
        );
        fails(
            &["account", "create", "Bad!", "--data", d],
            "not a valid name",
        );

        let deployed = ok(&[
            "deploy",
            "simplecoin",
            "contracts/simplecoin.wasm",
            "--data",
            d,
        ]);
        assert_eq!(deployed["abi"], true);
        let pushed = ok(&[
            "push",
            "simplecoin",
            "transfer",
            "simplecoin",
            "alice",
            "250",
            "memo",
            "--auth",
            "simplecoin",
            "--data",
            d,
        ]);
        assert_eq!(pushed["success"], true);
        assert_eq!(ok(&["balance", "alice", "--data", d])["balance"], 250);
        assert_eq!(
            ok(&["get", "simplecoin", "name:alice", "--data", d])["u64"],
            250
        );
        assert_eq!(pushed["events"], serde_json::json!([]));
        // Issue 22: the code hash of every contract, and queries, which simplecoin answers none.
        let code = ok(&["code", "simplecoin", "--data", d]);
        assert_eq!(code["code_hash"].as_str().map(str::len), Some(64));
        assert_eq!(
            ok(&["code", "alice", "--data", d])["code_hash"],
            serde_json::Value::Null
        );
        fails(
            &["query", "simplecoin", "price", "--data", d],
            "answers no queries",
        );

        // A failing transfer: a receipt with the contract's reason, and a non-zero exit.
        fails(
            &[
                "push",
                "simplecoin",
                "transfer",
                "alice",
                "simplecoin",
                "999",
                "x",
                "--auth",
                "alice",
                "--data",
                d,
            ],
            "insufficient funds",
        );
        fails(
            &[
                "push",
                "simplecoin",
                "transfer",
                "alice",
                "--auth",
                "alice",
                "--data",
                d,
            ],
            "transfer takes 4 arguments",
        );
        fails(
            &[
                "push",
                "simplecoin",
                "transfer",
                "a",
                "b",
                "1",
                "m",
                "--auth",
                "bob",
                "--data",
                d,
            ],
            "no key for bob",
        );
        assert_eq!(ok(&["balance", "alice", "--data", d])["balance"], 250);

        // A .wat module deploys too; raw data pushes without an ABI.
        let wat = tmp.path().join("hello.wat");
        std::fs::write(
            &wat,
            r#"(module (import "env" "store" (func $s (param i32 i32 i32 i32)))
                 (memory (export "memory") 1) (data (i32.const 0) "hello")
                 (func (export "apply") (param i64 i64 i64)
                   (call $s (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 5))))"#,
        )
        .unwrap();
        ok(&["account", "create", "hello", "--data", d]);
        ok(&["deploy", "hello", wat.to_str().unwrap(), "--data", d]);
        ok(&[
            "push",
            "hello",
            "hi",
            "--data-hex",
            "",
            "--auth",
            "hello",
            "--data",
            d,
        ]);
        assert_eq!(
            ok(&["get", "hello", "str:h", "--data", d])["value"],
            "68656c6c6f"
        );

        let blocks = ok(&["blocks", "--data", d]);
        assert_eq!(blocks["head"], 8);
        let verified = ok(&["verify", "--data", d]);
        assert_eq!(
            (
                verified["ok"].as_bool(),
                verified["replayed"].as_bool(),
                verified["signatures_checked"].as_bool()
            ),
            (Some(true), Some(true), Some(true))
        );
    }

    /// A contract with a name section: `apply` prints, then `check_amount` divides by the
    /// message's first byte (a trap when it is zero).
    const NAMED_TRAP: &str = r#"(module
      (import "env" "read_message" (func $read_message (param i32 i32) (result i32)))
      (import "env" "print" (func $print (param i32 i32)))
      (memory (export "memory") 1)
      (data (i32.const 100) "checking amount")
      (func $check_amount (param i32) (result i32)
        (i32.div_u (i32.const 100) (local.get 0)))
      (func (export "apply") (param i64 i64 i64)
        (drop (call $read_message (i32.const 0) (i32.const 1)))
        (call $print (i32.const 100) (i32.const 15))
        (drop (call $check_amount (i32.load8_u (i32.const 0))))))"#;

    #[test]
    fn issue_15_push_trace_names_the_function_that_trapped_and_shows_the_console() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("chain");
        let d = dir.to_str().unwrap();
        ok(&["init", "--data", d]);
        ok(&["account", "create", "checker", "--data", d]);
        let wasm = tmp.path().join("checker.wasm");
        std::fs::write(&wasm, wat::parse_str(NAMED_TRAP).unwrap()).unwrap();
        ok(&["deploy", "checker", wasm.to_str().unwrap(), "--data", d]);
        let push = |data: &str, extra: &[&str]| {
            let mut args = vec![
                "push",
                "checker",
                "check",
                "--data-hex",
                data,
                "--auth",
                "checker",
                "--data",
                d,
            ];
            args.extend_from_slice(extra);
            tally(&args)
        };

        let out = push("00", &["--trace"]);
        assert!(!out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains("failed in action 0: trap: integer division by zero"),
            "{text}"
        );
        assert!(
            text.contains("stopped in check_amount (function 2) at offset 0x"),
            "{text}"
        );
        assert!(text.contains("called from apply (function 3)"), "{text}");
        assert!(text.contains("checking amount"), "{text}");
        assert!(err.contains("integer division by zero"), "{err}");

        // The same in JSON, frame by frame.
        let out = push("00", &["--trace", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["success"], false);
        assert_eq!(v["console"], "checking amount");
        let frame = &v["trace"]["actions"][0]["trap"]["frames"][0];
        assert_eq!(frame["func_name"], "check_amount");
        assert_eq!(frame["func_index"], 2);
        assert!(frame["offset"].is_u64());

        // Without --trace: the reason and the console, no location.
        let out = push("00", &[]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("checking amount"), "{text}");
        assert!(!text.contains("check_amount"), "{text}");

        // A successful push with --trace shows its fuel per action.
        let out = push("05", &["--trace"]);
        let text = stdout(&out);
        assert!(text.starts_with("success ("), "{text}");
        assert!(text.contains("action 0: "), "{text}");
    }

    #[test]
    fn issue_15_build_names_keeps_function_names_for_push_trace() {
        if !have_clang() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let source = tmp.path().join("divider.c");
        std::fs::write(
            &source,
            r#"#include "tally.h"
__attribute__((noinline)) static uint32_t split_evenly(uint32_t total, uint32_t parts) {
    return total / parts;
}
TALLY_EXPORT("apply") void apply(uint64_t receiver, uint64_t code, uint64_t action) {
    uint8_t parts = 0;
    readMessage(&parts, 1);
    uint32_t share = split_evenly(100, parts);
    store("share", 5, &share, sizeof share);
}
"#,
        )
        .unwrap();
        let (named, stripped) = (
            tmp.path().join("named.wasm"),
            tmp.path().join("stripped.wasm"),
        );
        let src = source.to_str().unwrap();
        stdout(&tally(&[
            "build",
            src,
            "-o",
            named.to_str().unwrap(),
            "--names",
        ]));
        stdout(&tally(&["build", src, "-o", stripped.to_str().unwrap()]));
        let dir = tmp.path().join("chain");
        let d = dir.to_str().unwrap();
        ok(&["init", "--data", d]);
        for (account, wasm) in [("named", &named), ("stripped", &stripped)] {
            ok(&["account", "create", account, "--data", d]);
            ok(&["deploy", account, wasm.to_str().unwrap(), "--data", d]);
        }
        let trace = |account: &str| {
            let out = tally(&[
                "push",
                account,
                "split",
                "--data-hex",
                "00",
                "--auth",
                account,
                "--data",
                d,
                "--trace",
            ]);
            assert!(!out.status.success());
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let text = trace("named");
        assert!(text.contains("stopped in split_evenly (function"), "{text}");
        // Stripped, only the export has a name.
        let text = trace("stripped");
        assert!(!text.contains("split_evenly"), "{text}");
        assert!(text.contains("apply (function"), "{text}");
    }

    /// Every file of a data directory but the store, by path.
    fn files(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        for sub in [dir.to_path_buf(), dir.join("abi")] {
            for entry in std::fs::read_dir(sub).unwrap() {
                let path = entry.unwrap().path();
                if path.is_file() {
                    out.push((path.clone(), std::fs::read(&path).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn malformed_files_and_arguments_fail_clearly_and_overwrite_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("chain");
        let d = dir.to_str().unwrap();
        ok(&["init", "--data", d]);
        ok(&["account", "create", "simplecoin", "--data", d]);
        ok(&[
            "deploy",
            "simplecoin",
            "contracts/simplecoin.wasm",
            "--data",
            d,
        ]);
        let height = ok(&["blocks", "--data", d])["head"].clone();
        let push = [
            "push",
            "simplecoin",
            "transfer",
            "simplecoin",
            "alice",
            "5",
            "m",
            "--auth",
            "simplecoin",
            "--data",
            d,
        ];
        let cases: [(&str, &str, &str); 5] = [
            ("keystore.json", "{not json", "keystore.json is not valid"),
            (
                "keystore.json",
                r#"{"accounts":{"simplecoin":"zz"}}"#,
                "not 32 bytes of hex",
            ),
            ("chain.json", r#"{"version":99}"#, "chain.json is not valid"),
            ("abi/simplecoin.json", "[1,2", "simplecoin.json"),
            (
                "abi/simplecoin.json",
                r#"{"actions":{"transfer":[["from","float128"]]}}"#,
                "simplecoin.json",
            ),
        ];
        for (file, bad, says) in cases {
            let path = dir.join(file);
            let good = std::fs::read(&path).unwrap();
            std::fs::write(&path, bad).unwrap();
            let before = files(&dir);
            fails(&push, says);
            assert_eq!(
                files(&dir),
                before,
                "{file}: a failed command changed files"
            );
            std::fs::write(&path, good).unwrap();
        }
        // Bad arguments: each refused with what is wrong.
        fails(&["balance", "NOT-A-NAME", "--data", d], "not a valid name");
        fails(
            &[
                "push",
                "simplecoin",
                "transfer",
                "simplecoin",
                "alice",
                "-5",
                "m",
                "--auth",
                "simplecoin",
                "--data",
                d,
            ],
            "",
        );
        fails(&["bench", "--transfers", "many"], "invalid value");
        // A layout from another version of tally.
        let chain_json = dir.join("chain.json");
        let good = std::fs::read_to_string(&chain_json).unwrap();
        std::fs::write(
            &chain_json,
            good.replace("\"version\": 3", "\"version\": 4"),
        )
        .unwrap();
        fails(&["verify", "--data", d], "layout version 4");
        std::fs::write(&chain_json, &good).unwrap();
        // Nothing above committed a block.
        assert_eq!(ok(&["blocks", "--data", d])["head"], height);
    }

    #[test]
    fn commands_on_a_missing_or_foreign_data_dir_fail_clearly() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("none");
        fails(
            &["balance", "alice", "--data", d.to_str().unwrap()],
            "tally init --data",
        );
        // Two chains: one's store with the other's chain.json is refused.
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        ok(&["init", "--data", a.to_str().unwrap()]);
        ok(&["init", "--data", b.to_str().unwrap()]);
        std::fs::copy(a.join("chain.json"), b.join("chain.json")).unwrap();
        fails(&["verify", "--data", b.to_str().unwrap()], "another chain");
    }

    /// A local chain whose token-rs `token` has balances for alice and five others (none of
    /// them accounts but alice: a token credits any name).
    fn token_with_holders(d: &str) -> Vec<&'static str> {
        token_with_holders_on(d, "log")
    }

    fn token_with_holders_on(d: &str, store: &str) -> Vec<&'static str> {
        ok(&["init", "--data", d, "--store", store]);
        for a in ["token", "alice"] {
            ok(&["account", "create", a, "--data", d]);
        }
        ok(&["deploy", "token", "contracts/token-rs.wasm", "--data", d]);
        ok(&[
            "push", "token", "create", "alice", "1000000", "--auth", "alice", "--data", d,
        ]);
        ok(&[
            "push", "token", "issue", "alice", "1000", "", "--auth", "alice", "--data", d,
        ]);
        let holders = vec!["bob", "carol", "dave", "erin", "frank"];
        for (i, to) in holders.iter().enumerate() {
            let amount = (i + 1).to_string();
            ok(&[
                "push", "token", "transfer", "alice", to, &amount, "", "--auth", "alice", "--data",
                d,
            ]);
        }
        holders
    }

    /// The `text` of every listed key, and whether more follow.
    fn keys(args: &[&str]) -> (Vec<String>, serde_json::Value) {
        let out = ok(args);
        let texts = out["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["text"].as_str().unwrap().to_string())
            .collect();
        (texts, out)
    }

    /// Issue 23: `tally keys` lists a contract's keys in byte order, each shown as its ABI
    /// table's with its value decoded, a page at a time: the pages joined are the whole
    /// listing, backwards is its reverse, and a prefix or a table's name narrows it.
    #[test]
    fn issue_23_keys_lists_a_contracts_keys_in_order_a_page_at_a_time() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("chain");
        let d = d.to_str().unwrap();
        let holders = token_with_holders(d);
        let (all, out) = keys(&["keys", "token", "--data", d]);
        assert_eq!(out["more"], false);
        // Byte order of the stored keys: names' 8 little-endian bytes, and "stats".
        let mut raw: Vec<Vec<u8>> = out["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| hex::decode(k["key"].as_str().unwrap()).unwrap())
            .collect();
        let listed = raw.clone();
        raw.sort();
        assert_eq!(listed, raw, "keys are listed in byte order");
        assert_eq!(all.len(), holders.len() + 2, "{all:?}");
        assert!(all.contains(&"stats".to_string()), "{all:?}");
        let bob = out["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["text"] == "balances[bob]")
            .unwrap();
        assert_eq!(
            (bob["table"].as_str(), bob["decoded"].as_u64()),
            (Some("balances"), Some(1))
        );
        let stats = &out["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["text"] == "stats")
            .unwrap()["decoded"];
        assert_eq!(stats["supply"], 1000);

        // Pages of 3: the --after each names gives the next, and together they are the whole.
        let mut paged = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..all.len() {
            let mut args = vec!["keys", "token", "--limit", "3", "--data", d];
            if let Some(a) = &after {
                args.extend(["--after", a.as_str()]);
            }
            let (page, out) = keys(&args);
            assert!(page.len() <= 3);
            paged.extend(page);
            match out["after"].as_str() {
                Some(a) => after = Some(a.to_string()),
                None => break,
            }
        }
        assert_eq!(paged, all);
        let (mut back, _) = keys(&["keys", "token", "--reverse", "--data", d]);
        back.reverse();
        assert_eq!(back, all);
        let text = stdout(&tally(&["keys", "token", "--limit", "2", "--data", d]));
        assert!(
            text.contains("2 keys shown; more follow: tally keys token --limit 2 --data"),
            "{text}"
        );

        // A prefix, and a table's name.
        assert_eq!(keys(&["keys", "token", "str:st", "--data", d]).0, ["stats"]);
        let (balances, _) = keys(&["keys", "token", "balances", "--data", d]);
        assert_eq!(balances.len(), holders.len() + 1);
        assert!(!balances.contains(&"stats".to_string()));
        // --as decodes every value as one type.
        let (_, out) = keys(&["keys", "token", "balances", "--as", "u64", "--data", d]);
        assert!(out["keys"][0]["decoded"].as_u64().is_some());

        // tally get reads a table's key by its parts.
        let text = stdout(&tally(&["get", "token", "balances[carol]", "--data", d]));
        assert_eq!(text, "balances[carol] = 2\n");
        assert_eq!(
            ok(&["get", "token", "name:carol", "--data", d])["decoded"],
            2
        );
        fails(
            &["get", "token", "balance[carol]", "--data", d],
            "its ABI's tables: balances, stats",
        );

        // Mistakes say what to do.
        fails(
            &["keys", "nobody", "--data", d],
            "there is no account nobody",
        );
        fails(
            &["keys", "alice", "--data", d],
            "alice has no contract: deploy one",
        );
        fails(&["keys", "token", "--limit", "0", "--data", d], "--limit 0");
    }

    /// Issue 23, item 5: what a new user tried, each now doing what they meant or saying
    /// what to do. `--dry-run` shows the encoding of what the command line gave, and sends
    /// nothing.
    #[test]
    fn issue_23_papercuts_negative_numbers_lists_hex_files_dry_runs_and_missing_accounts() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("chain");
        let d = d.to_str().unwrap();
        ok(&["init", "--data", d]);
        for a in ["simplecoin", "alice", "bob"] {
            ok(&["account", "create", a, "--data", d]);
        }
        ok(&[
            "deploy",
            "simplecoin",
            "contracts/simplecoin.wasm",
            "--data",
            d,
        ]);
        let abi = tmp.path().join("adjust.abi.json");
        std::fs::write(
            &abi,
            r#"{"actions": {"adjust": [{"name": "by", "type": "i64"}, {"name": "blob", "type": "bytes"},
                                      {"name": "note", "type": "string"}, {"name": "tags", "type": "i32[]"}]}}"#,
        )
        .unwrap();
        let note = tmp.path().join("note.txt");
        std::fs::write(&note, "from a file\n").unwrap();
        let at_note = format!("@{}", note.display());
        let head = ok(&["blocks", "--data", d])["head"].clone();
        // A negative number without `--`, bytes with 0x, a file's text, and --auth a,b.
        let dry = ok(&[
            "push",
            "simplecoin",
            "adjust",
            "-5",
            "0xabcd",
            &at_note,
            "[-1,2]",
            "--abi",
            abi.to_str().unwrap(),
            "--auth",
            "alice,bob",
            "--data",
            d,
            "--dry-run",
        ]);
        let action = &dry["decoded"]["actions"][0];
        assert_eq!(
            action["args"],
            serde_json::json!({"by": -5, "blob": "abcd", "note": "from a file", "tags": [-1, 2]})
        );
        assert_eq!(action["authorization"], serde_json::json!(["alice", "bob"]));
        let signers: Vec<&str> = dry["decoded"]["signatures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["account"].as_str().unwrap())
            .collect();
        assert_eq!(signers, ["alice", "bob"]);
        let bytes = dry["bytes"].as_str().unwrap();
        assert!(
            bytes.contains(action["data"].as_str().unwrap()),
            "the hex holds the action"
        );
        assert_eq!(
            ok(&["blocks", "--data", d])["head"],
            head,
            "a dry run sends nothing"
        );
        // Negative numbers among --action's values too.
        let dry = ok(&[
            "push",
            "simplecoin",
            "adjust",
            "1",
            "",
            "a",
            "[]",
            "--action",
            "simplecoin",
            "adjust",
            "-7",
            "",
            "b",
            "[]",
            "--abi",
            abi.to_str().unwrap(),
            "--auth",
            "alice",
            "--data",
            d,
            "--dry-run",
        ]);
        assert_eq!(dry["decoded"]["actions"][1]["args"]["by"], -7);
        // @@ is a literal @; --data-hex takes 0x and files too.
        let dry = ok(&[
            "push",
            "simplecoin",
            "adjust",
            "7",
            "",
            "@@home",
            "[]",
            "--abi",
            abi.to_str().unwrap(),
            "--auth",
            "alice",
            "--data",
            d,
            "--dry-run",
        ]);
        assert_eq!(dry["decoded"]["actions"][0]["args"]["note"], "@home");
        std::fs::write(&note, "0x0102\n").unwrap();
        let dry = ok(&[
            "push",
            "simplecoin",
            "transfer",
            "--data-hex",
            &at_note,
            "--auth",
            "alice",
            "--data",
            d,
            "--dry-run",
        ]);
        assert_eq!(dry["decoded"]["actions"][0]["data"], "0102");
        fails(
            &[
                "push",
                "simplecoin",
                "adjust",
                "1",
                "",
                "@/no/such/file",
                "[]",
                "--abi",
                abi.to_str().unwrap(),
                "--auth",
                "alice",
                "--data",
                d,
            ],
            "write @@ for a literal @",
        );

        // Accounts and contracts that are not there.
        fails(
            &["push", "nobody", "hi", "--auth", "alice", "--data", d],
            "there is no account nobody: create it",
        );
        fails(
            &[
                "push",
                "alice",
                "hi",
                "--data-hex",
                "",
                "--auth",
                "alice",
                "--data",
                d,
            ],
            "alice has no contract: deploy one with `tally deploy alice FILE`",
        );
        fails(
            &["get", "nobody", "str:x", "--data", d],
            "there is no account nobody",
        );
        fails(
            &["get", "alice", "str:x", "--data", d],
            "alice has no contract",
        );
        let missing = ok(&["get", "simplecoin", "name:carol", "--data", d]);
        assert_eq!(
            missing["value"],
            serde_json::Value::Null,
            "a contract's missing key is no error"
        );
        fails(&["balance", "zed", "--data", d], "there is no account zed");
        assert_eq!(ok(&["balance", "bob", "--data", d])["balance"], 0);
        fails(
            &["balance", "bob", "--contract", "nocoin", "--data", d],
            "there is no account nocoin",
        );
    }

    /// Issue 23: the same transactions give the same listing, page and order on every
    /// on-disk store (RocksDB when tally is built with it, as CI builds it).
    #[test]
    fn issue_23_keys_lists_the_same_on_every_store() {
        let tmp = tempfile::tempdir().unwrap();
        let mut stores = vec!["log"];
        if cfg!(feature = "rocksdb") {
            stores.push("rocksdb");
        }
        let listings: Vec<Vec<serde_json::Value>> = stores
            .iter()
            .map(|store| {
                let d = tmp.path().join(store);
                let d = d.to_str().unwrap();
                token_with_holders_on(d, store);
                [
                    &["keys", "token", "--data", d][..],
                    &["keys", "token", "--reverse", "--limit", "3", "--data", d],
                    &[
                        "keys",
                        "token",
                        "--after",
                        "name:carol",
                        "--limit",
                        "2",
                        "--data",
                        d,
                    ],
                    &["keys", "token", "balances", "--reverse", "--data", d],
                ]
                .iter()
                .map(|args| ok(args))
                .collect()
            })
            .collect();
        assert_eq!(listings[0][0]["keys"].as_array().unwrap().len(), 7);
        assert_eq!(listings[0][1]["more"], true);
        for (store, listing) in stores.iter().zip(&listings).skip(1) {
            assert_eq!(listing, &listings[0], "{store} lists differently from log");
        }
    }

    /// A local chain with two token-rs tokens and the exchange, alice holding 1,000,000 of
    /// each and the pool initialised: the README's devnet walk-through, on `--data`.
    fn market(d: &str) {
        for a in ["tokena", "tokenb", "swap", "alice"] {
            ok(&["account", "create", a, "--data", d]);
        }
        for (a, wasm) in [
            ("tokena", "contracts/token-rs.wasm"),
            ("tokenb", "contracts/token-rs.wasm"),
            ("swap", "contracts/swap.wasm"),
        ] {
            ok(&["deploy", a, wasm, "--data", d]);
        }
        for t in ["tokena", "tokenb"] {
            ok(&["push", t, "create", t, "10000000", "--auth", t, "--data", d]);
            ok(&[
                "push", t, "issue", "alice", "1000000", "", "--auth", t, "--data", d,
            ]);
        }
        ok(&[
            "push", "swap", "init", "tokena", "tokenb", "--auth", "swap", "--data", d,
        ]);
    }

    fn balance(d: &str, token: &str, who: &str) -> u64 {
        let key = format!("name:{who}");
        ok(&["get", token, &key, "--data", d])["u64"]
            .as_u64()
            .unwrap_or(0)
    }

    /// Issue 23: `--action` adds actions to one transaction, each encoded with its own
    /// contract's ABI: a deposit of two transfers and a call applies whole, and a swap whose
    /// second action fails leaves its first (the transfer in) undone too.
    #[test]
    fn issue_23_push_with_several_actions_applies_them_all_or_none() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("chain");
        let d = d.to_str().unwrap();
        ok(&["init", "--data", d]);
        market(d);
        let deposit = ok(&[
            "push", "tokena", "transfer", "alice", "swap", "100000", "", "--action", "tokenb",
            "transfer", "alice", "swap", "400000", "", "--action", "swap", "deposit", "alice",
            "--auth", "alice", "--data", d,
        ]);
        assert_eq!(deposit["success"], true);
        let names: Vec<_> = deposit["actions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                format!(
                    "{}::{}",
                    a["contract"].as_str().unwrap(),
                    a["action"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            names,
            ["tokena::transfer", "tokenb::transfer", "swap::deposit"]
        );
        assert_eq!(deposit["events"][0]["name"], "deposited");
        assert_eq!(balance(d, "tokena", "alice"), 900_000);
        assert_eq!(balance(d, "tokenb", "swap"), 400_000);

        fails(
            &[
                "push",
                "tokena",
                "transfer",
                "alice",
                "swap",
                "1000",
                "",
                "--action",
                "swap",
                "swap",
                "alice",
                "999999999",
                "--auth",
                "alice",
                "--data",
                d,
            ],
            "the swap gives less than min_out",
        );
        assert_eq!(
            balance(d, "tokena", "alice"),
            900_000,
            "the transfer in rolled back"
        );

        // One ABI for two contracts cannot be right for both.
        fails(
            &[
                "push",
                "tokena",
                "transfer",
                "alice",
                "swap",
                "1",
                "",
                "--action",
                "swap",
                "swap",
                "alice",
                "0",
                "--auth",
                "alice",
                "--abi",
                "contracts/swap.abi.json",
                "--data",
                d,
            ],
            "--abi CONTRACT=PATH",
        );
        let swapped = ok(&[
            "push",
            "tokena",
            "transfer",
            "alice",
            "swap",
            "1000",
            "",
            "--action",
            "swap",
            "swap",
            "alice",
            "1",
            "--auth",
            "alice",
            "--abi",
            "tokena=contracts/token-rs.abi.json",
            "--abi",
            "swap=contracts/swap.abi.json",
            "--data",
            d,
        ]);
        assert_eq!(swapped["events"][0]["name"], "swapped");
    }

    /// Issue 23: `tally tx` shows a pushed transaction as `push --json --trace` printed it,
    /// call tree included, from the receipts log; without the log (a push that stopped before
    /// writing its line) it reads the block: the outcome and events, marked as not recorded;
    /// a torn last line is cut by the next push.
    #[test]
    fn issue_23_tx_shows_a_local_receipt_with_its_calls_and_falls_back_to_the_block() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("chain");
        let d = dir.to_str().unwrap();
        ok(&["init", "--data", d]);
        market(d);
        ok(&[
            "push", "tokena", "transfer", "alice", "swap", "100000", "", "--action", "tokenb",
            "transfer", "alice", "swap", "400000", "", "--action", "swap", "deposit", "alice",
            "--auth", "alice", "--data", d,
        ]);
        let swap = [
            "push", "tokena", "transfer", "alice", "swap", "1000", "", "--action", "swap", "swap",
            "alice", "1", "--auth", "alice", "--data", d, "--trace",
        ];
        let pushed = ok(&swap);
        let id = pushed["transaction"].as_str().unwrap().to_string();
        let shown = ok(&["tx", &id, "--data", d]);
        assert_eq!(shown, pushed);
        let calls = &shown["trace"]["actions"][1]["calls"];
        assert_eq!(calls[0]["entry"], "balance", "{calls}");
        assert_eq!(calls[2]["contract"], "tokenb", "{calls}");
        let text = stdout(&tally(&["tx", &id, "--data", d]));
        assert!(text.starts_with("success ("), "{text}");
        assert!(text.contains("call tokenb::transfer"), "{text}");
        assert!(text.contains("event swapped from swap"), "{text}");

        // A failed transaction is shown, reason and failed action included; `tx` itself
        // succeeds.
        let out = tally(&[
            "push",
            "tokena",
            "transfer",
            "alice",
            "swap",
            "1000",
            "",
            "--action",
            "swap",
            "swap",
            "alice",
            "999999999",
            "--auth",
            "alice",
            "--data",
            d,
            "--json",
        ]);
        assert!(!out.status.success());
        let failed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let failed_id = failed["transaction"].as_str().unwrap();
        let text = stdout(&tally(&["tx", failed_id, "--data", d]));
        assert!(
            text.starts_with("failed in action 1: assert failed: the swap gives less than min_out"),
            "{text}"
        );

        // Without the log: what the block holds.
        let log = dir.join("receipts.jsonl");
        let saved = std::fs::read(&log).unwrap();
        std::fs::remove_file(&log).unwrap();
        let from_block = ok(&["tx", &id, "--data", d]);
        assert_eq!(from_block["success"], true);
        assert_eq!(from_block["recorded"], false);
        assert_eq!(from_block["fuel_used"], serde_json::Value::Null);
        assert_eq!(from_block["events"], pushed["events"]);
        assert_eq!(from_block["block"], pushed["block"]);

        // A torn last line: ignored by tx, cut by the next push.
        let mut torn = saved.clone();
        torn.extend_from_slice(b"{\"height\": 99, \"id\": \"ab");
        std::fs::write(&log, &torn).unwrap();
        assert_eq!(ok(&["tx", &id, "--data", d]), pushed);
        let next = ok(&[
            "push", "tokena", "transfer", "alice", "swap", "1", "", "--auth", "alice", "--data", d,
        ]);
        let next_id = next["transaction"].as_str().unwrap();
        assert_eq!(
            ok(&["tx", next_id, "--data", d])["fuel_used"],
            next["fuel_used"]
        );
        let lines = std::fs::read_to_string(&log).unwrap();
        assert!(
            lines
                .lines()
                .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
        );

        fails(&["tx", "abc", "--data", d], "64 hex digits");
        fails(
            &["tx", &"0".repeat(64), "--data", d],
            "holds no transaction",
        );
    }

    /// Issue 23: where push finds an ABI (the one deploy kept, while the account runs that
    /// code), what account create does with a key when its transaction fails, and what --rpc
    /// needs.
    #[test]
    fn issue_23_abis_keys_and_rpc_flags_say_what_to_do() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("chain");
        let d = d.to_str().unwrap();
        ok(&["init", "--data", d]);
        ok(&["account", "create", "registry", "--data", d]);
        fails(
            &[
                "push", "registry", "set", "registry", "home", "x", "--auth", "registry", "--data",
                d,
            ],
            "registry has no contract: deploy one with `tally deploy registry FILE`",
        );
        ok(&["deploy", "registry", "contracts/registry.wasm", "--data", d]);
        ok(&[
            "push", "registry", "set", "registry", "home", "x", "--auth", "registry", "--data", d,
        ]);
        // New code without an ABI: the old one no longer applies.
        let wat = tmp.path().join("bare.wat");
        std::fs::write(
            &wat,
            "(module (memory (export \"memory\") 1) (func (export \"apply\") (param i64 i64 i64)))",
        )
        .unwrap();
        ok(&["deploy", "registry", wat.to_str().unwrap(), "--data", d]);
        fails(
            &[
                "push", "registry", "set", "registry", "home", "y", "--auth", "registry", "--data",
                d,
            ],
            "pass --abi PATH",
        );

        // An account the chain refuses to create leaves no key behind.
        ok(&["account", "create", "carol", "--data", d]);
        let keystore = Path::new(d).join("keystore.json");
        let mut keys: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&keystore).unwrap()).unwrap();
        keys["accounts"].as_object_mut().unwrap().remove("carol");
        std::fs::write(&keystore, serde_json::to_vec(&keys).unwrap()).unwrap();
        fails(&["account", "create", "carol", "--data", d], "carol");
        let keys: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&keystore).unwrap()).unwrap();
        assert!(keys["accounts"].get("carol").is_none(), "{keys}");

        fails(
            &[
                "push",
                "registry",
                "x",
                "--auth",
                "registry",
                "--rpc",
                "127.0.0.1:1",
            ],
            "--wallet",
        );
        fails(
            &[
                "push",
                "registry",
                "x",
                "--auth",
                "registry",
                "--rpc",
                "127.0.0.1:1",
                "--wallet",
                d,
                "--trace",
            ],
            "--trace needs a local chain",
        );
        fails(
            &[
                "push",
                "registry",
                "x",
                "--data-hex",
                "",
                "--auth",
                "registry",
                "--rpc",
                "127.0.0.1:1",
                "--wallet",
                d,
            ],
            "cannot reach CometBFT",
        );
    }
}

/// Issue 10 items 5 and 6, end to end: one writer per data directory, and read-only commands
/// that never touch a file.
mod store_integrity {
    use super::*;
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    /// Every file under `dir` with its bytes.
    fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for entry in std::fs::read_dir(d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    todo.push(path);
                } else {
                    out.push((path.clone(), std::fs::read(&path).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    /// A child process that is killed (SIGKILL) when dropped, even by a failing test.
    struct KillOnDrop(std::process::Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Runs tally, killing it after `secs`: with the fix reverted, a second writer would run
    /// its whole benchmark instead of failing at once.
    fn tally_within(args: &[&str], secs: u64) -> Output {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tally"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(secs) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tally {args:?} was still running after {secs} s: it was not refused");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }

    fn failure(out: &Output) -> String {
        assert!(!out.status.success(), "expected a failure");
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    #[test]
    fn issue_10_a_second_process_on_a_data_dir_in_use_is_refused_clearly() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().to_str().unwrap();
        let args = [
            "bench",
            "--data",
            d,
            "--transfers",
            "5000000",
            "--accounts",
            "1000",
            "--block-size",
            "1000",
        ];
        let writer = KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_tally"))
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        // Wait until the writer has committed blocks past genesis.
        let log = tmp.path().join("store").join("log-00000000.tlog");
        let start = Instant::now();
        while std::fs::metadata(&log).map_or(0, |m| m.len()) < 64 << 10 {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the writer never committed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let store = tmp.path().join("store").display().to_string();
        let second = failure(&tally_within(&args, 60));
        assert!(
            second.contains("in use by another tally process") && second.contains(&store),
            "{second}"
        );
        let reader = failure(&tally_within(&["blocks", "--data", d], 60));
        assert!(
            reader.contains("in use by another tally process") && reader.contains(&store),
            "{reader}"
        );
        drop(writer); // kill -9
        // The lock died with its process; the store is whole.
        let verified: serde_json::Value =
            serde_json::from_str(&stdout(&tally(&["verify", "--json", "--data", d]))).unwrap();
        assert_eq!(verified["ok"], true);
    }

    #[test]
    fn issue_10_read_only_commands_change_no_file_even_with_a_torn_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("chain");
        let d = dir.to_str().unwrap();
        for args in [
            &["init", "--data", d][..],
            &["account", "create", "simplecoin", "--data", d],
            &[
                "deploy",
                "simplecoin",
                "contracts/simplecoin.wasm",
                "--data",
                d,
            ],
            &[
                "push",
                "simplecoin",
                "transfer",
                "simplecoin",
                "alice",
                "7",
                "m",
                "--auth",
                "simplecoin",
                "--data",
                d,
            ],
        ] {
            stdout(&tally(args));
        }
        // A crash in the middle of the last append: its record is cut short.
        let log = dir.join("store").join("log-00000000.tlog");
        let bytes = std::fs::read(&log).unwrap();
        std::fs::write(&log, &bytes[..bytes.len() - 10]).unwrap();
        let before = tree(&dir);
        let head = |out: &Output| {
            serde_json::from_str::<serde_json::Value>(&stdout(out)).unwrap()["head"].clone()
        };
        let blocks = tally(&["blocks", "--json", "--data", d]);
        let h = head(&blocks);
        let warning = String::from_utf8_lossy(&blocks.stderr);
        assert!(
            warning.contains("warning: the last") && warning.contains("skipped, file unchanged"),
            "dropping the torn record must be reported: {warning}"
        );
        stdout(&tally(&["verify", "--data", d]));
        stdout(&tally(&["get", "simplecoin", "name:alice", "--data", d]));
        // alice is no account, and the torn block held her only balance: balance says so
        // (issue 23), without writing either.
        let out = tally(&["balance", "alice", "--data", d]);
        assert!(String::from_utf8_lossy(&out.stderr).contains("there is no account alice"));
        stdout(&tally(&["balance", "simplecoin", "--data", d]));
        assert_eq!(tree(&dir), before, "a read-only command changed a file");
        // A writer repairs the tail and goes on from the last whole block.
        stdout(&tally(&[
            "push",
            "simplecoin",
            "transfer",
            "simplecoin",
            "alice",
            "7",
            "m2",
            "--auth",
            "simplecoin",
            "--data",
            d,
        ]));
        let after = head(&tally(&["blocks", "--json", "--data", d]));
        assert_eq!(after.as_u64().unwrap(), h.as_u64().unwrap() + 1);
        stdout(&tally(&["verify", "--data", d]));
    }

    #[test]
    fn issue_10_a_corrupt_log_is_reported_and_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().to_str().unwrap();
        let bench = [
            "bench",
            "--data",
            d,
            "--transfers",
            "3000",
            "--accounts",
            "50",
            "--block-size",
            "500",
        ];
        stdout(&tally(&bench));
        let log = tmp.path().join("store").join("log-00000000.tlog");
        let mut bytes = std::fs::read(&log).unwrap();
        // Inside the setup block's record, with the six transfer blocks after it.
        bytes[200] ^= 0x10;
        std::fs::write(&log, &bytes).unwrap();
        let before = tree(tmp.path());
        for args in [&["blocks", "--data", d][..], &["verify", "--data", d]] {
            let err = failure(&tally(args));
            assert!(
                err.contains("corrupt store") && err.contains(&log.display().to_string()),
                "{err}"
            );
        }
        let err = failure(&tally(&bench));
        assert!(err.contains("corrupt store"), "{err}");
        assert_eq!(tree(tmp.path()), before, "a refused open changed a file");
    }
}

/// Issue 14: `kill -9` at forced points of the log store's background work. Each point aborts
/// the process there (`TALLY_TEST_CRASH_AT`); the store reopens at a committed block, `tally
/// verify` passes, and resuming the run ends at the uninterrupted run's checksum.
mod store_crash_points {
    use super::*;

    fn bench(dir: &Path) -> Vec<String> {
        [
            "bench",
            // The store is under test, not signatures: unsigned keeps eleven debug runs short.
            "--unsigned",
            "--data",
            dir.to_str().unwrap(),
            // 600 blocks: more than the 512 retained, so old segments die and get deleted.
            "--transfers",
            "30000",
            "--accounts",
            "2000",
            "--block-size",
            "50",
            "--dist",
            "zipf",
            "--json",
            "-",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn checksum(out: &Output) -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(&stdout(out)).unwrap()["state_checksum"].clone()
    }

    #[test]
    fn issue_14_kill_9_during_rotation_snapshot_and_compaction_loses_nothing() {
        let fresh = tempfile::tempdir().unwrap();
        let args = bench(fresh.path());
        let expected = checksum(&tally(&args.iter().map(String::as_str).collect::<Vec<_>>()));
        for point in [
            "rotate",
            "snapshot-written",
            "snapshot-renamed",
            "snapshot-installed",
            "compact-delete",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let args = bench(dir.path());
            let crashed = Command::new(env!("CARGO_BIN_EXE_tally"))
                .args(&args)
                .env("TALLY_TEST_CRASH_AT", format!("{point}:2"))
                // Small segments and snapshots, so every point comes up in a short run.
                .env("TALLY_LOG_SEGMENT_BYTES", "65536")
                .env("TALLY_LOG_SNAPSHOT_BYTES", "131072")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&crashed.stderr);
            assert!(
                !crashed.status.success() && err.contains(&format!("crash point {point}")),
                "{point}: the run did not crash there: {err}"
            );
            let d = dir.path().to_str().unwrap();
            let verified: serde_json::Value =
                serde_json::from_str(&stdout(&tally(&["verify", "--json", "--data", d]))).unwrap();
            assert_eq!(verified["ok"], true, "{point}");
            // Issue 10: an unsigned run's directory switches signature checks off for verify;
            // the report must say so.
            assert_eq!(verified["signatures_checked"], false, "{point}");
            let resumed = Command::new(env!("CARGO_BIN_EXE_tally"))
                .args(&args)
                .env("TALLY_LOG_SEGMENT_BYTES", "65536")
                .env("TALLY_LOG_SNAPSHOT_BYTES", "131072")
                .output()
                .unwrap();
            assert_eq!(checksum(&resumed), expected, "{point}");
            stdout(&tally(&["verify", "--data", d]));
        }
    }
}

#[test]
fn storebench_reports_no_read_amplification_for_a_workload_without_reads() {
    // iavl only writes: the log store's reads are then its own read-before-write, and the
    // ratio used to divide them by zero bytes (shown as 385,114,709 on 100 versions).
    let iavl = tally(&[
        "storebench",
        "--workload",
        "iavl",
        "--versions",
        "3",
        "--scale",
        "0.01",
        "--store",
        "log,memory",
        "--json",
        "-",
    ]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&iavl)).unwrap();
    for store in report["stores"].as_array().unwrap() {
        assert!(store["read_amplification"].is_null(), "{store}");
    }
    // A workload that reads still gets a finite ratio.
    let griffin = tally(&[
        "storebench",
        "--workload",
        "griffin",
        "--scale",
        "0.0002",
        "--store",
        "log",
        "--json",
        "-",
    ]);
    let report: serde_json::Value = serde_json::from_str(&stdout(&griffin)).unwrap();
    let ra = report["stores"][0]["read_amplification"].as_f64().unwrap();
    assert!(ra.is_finite() && ra >= 0.0, "{ra}");
}
