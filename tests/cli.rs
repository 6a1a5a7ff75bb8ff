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
    assert_eq!(a["state_checksum"], bench_json("5")["state_checksum"]);
    assert_ne!(a["state_checksum"], bench_json("6")["state_checksum"]);
}

#[test]
fn bench_rejects_bad_flags() {
    let out = tally(&["bench", "--dist", "pareto"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("uniform"));
    assert!(!tally(&["bench", "--accounts", "1"]).status.success());
}

#[test]
fn help_has_examples() {
    for cmd in ["build", "bench"] {
        let help = stdout(&tally(&[cmd, "--help"]));
        assert!(help.contains("Examples:"), "{cmd} --help:\n{help}");
    }
}
