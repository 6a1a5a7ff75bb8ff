//! `tally build`: compile a C contract for wasm32 with the flags Tally's ABI expects.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use clap::Args;
use tally_runtime::{EntryPoints, Runtime, RuntimeConfig};

/// The C SDK, embedded so `tally build` works from any directory.
const TALLY_H: &str = include_str!("../../sdk-c/include/tally.h");

/// Flags for every C contract. Each one matters:
/// - freestanding, no libc, no entry: a contract is a library of exports, not a program;
/// - default visibility + `--export-dynamic`: every non-static function is exported, so the
///   2017 handlers (`onInit`, `onApply_<Action>_<code>`) need no annotations (clang hides
///   wasm32 symbols by default and would silently drop them);
/// - bulk memory: struct copies become `memory.copy` rather than calls to a missing `memcpy`;
/// - an 8 KiB stack in one 64 KiB page: every action resets its memory, so each page costs
///   time on every action (shared/PROBE.md);
/// - strip: names and debug info would make builds path-dependent.
pub const C_FLAGS: &[&str] = &[
    "--target=wasm32-unknown-unknown",
    "-O2",
    "-ffreestanding",
    "-nostdlib",
    "-fvisibility=default",
    "-mbulk-memory",
    "-Wall",
    "-Wl,--no-entry",
    "-Wl,--export-dynamic",
    "-Wl,-z,stack-size=8192",
    "-Wl,--initial-memory=65536",
    "-Wl,--strip-all",
];

const INSTALL_HINT: &str = "clang with wasm32 support not found: apt-get install clang lld \
     (or set TALLY_CLANG to a clang that has the WebAssembly target and wasm-ld)";

/// Compile a C contract to WebAssembly.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally build contracts/simplecoin.c
  tally build my_contract.c -o build/my_contract.wasm

The C API is sdk-c/include/tally.h (embedded in tally; #include \"tally.h\").
Needs clang and wasm-ld: apt-get install clang lld. TALLY_CLANG picks another clang.")]
pub struct BuildArgs {
    /// The contract's C source.
    pub source: PathBuf,
    /// Where to write the module [default: the source with a .wasm extension].
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

fn clang() -> String {
    std::env::var("TALLY_CLANG").unwrap_or_else(|_| "clang".to_string())
}

/// Checks that clang runs and knows the wasm32 target, and that wasm-ld is there.
fn check_toolchain(clang: &str) -> anyhow::Result<()> {
    let targets = Command::new(clang).arg("-print-targets").output();
    let ok = matches!(&targets, Ok(out) if out.status.success()
        && String::from_utf8_lossy(&out.stdout).contains("wasm32"));
    if !ok {
        bail!("{INSTALL_HINT}");
    }
    let ld = Command::new("wasm-ld").arg("--version").output();
    if !matches!(ld, Ok(out) if out.status.success()) {
        bail!("wasm-ld (the WebAssembly linker) not found: apt-get install lld");
    }
    Ok(())
}

/// Compiles `source` to `output` with [`C_FLAGS`].
pub fn compile_c(source: &Path, output: &Path) -> anyhow::Result<()> {
    if !source.is_file() {
        bail!("{} is not a file", source.display());
    }
    if source.extension().and_then(|e| e.to_str()) != Some("c") {
        bail!(
            "{} is not a C source (.c); Rust contracts are not supported by `tally build` yet",
            source.display()
        );
    }
    let clang = clang();
    check_toolchain(&clang)?;
    let sdk = tempfile::tempdir().context("cannot create a temporary directory")?;
    std::fs::write(sdk.path().join("tally.h"), TALLY_H).context("cannot write tally.h")?;
    let out = Command::new(&clang)
        .args(C_FLAGS)
        .arg("-I")
        .arg(sdk.path())
        .arg("-o")
        .arg(output)
        .arg(source)
        .output()
        .with_context(|| format!("cannot run {clang}"))?;
    if !out.status.success() {
        bail!(
            "clang failed to compile {}:\n{}",
            source.display(),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    // Warnings are the author's business, but they must see them.
    let warnings = String::from_utf8_lossy(&out.stderr);
    if !warnings.trim().is_empty() {
        eprintln!("{}", warnings.trim_end());
    }
    Ok(())
}

pub fn run(args: BuildArgs) -> anyhow::Result<()> {
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| args.source.with_extension("wasm"));
    compile_c(&args.source, &output)?;
    let wasm = std::fs::read(&output)?;
    // Check it as a deploy would, so a module that cannot be deployed fails here, not later.
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let contract = runtime.prepare(&wasm).with_context(|| {
        format!(
            "{} builds but would be rejected at deploy",
            output.display()
        )
    })?;
    let entry = match &contract.info().entry {
        EntryPoints::Apply => "apply(receiver, code, action)".to_string(),
        EntryPoints::Legacy(handlers) => handlers
            .iter()
            .map(|h| format!("{} ({} on {})", h.export, h.action, h.code))
            .collect::<Vec<_>>()
            .join(", "),
    };
    println!("built {} ({} bytes)", output.display(), wasm.len());
    println!("  entry points: {entry}");
    if contract.info().has_init {
        println!("  onInit: runs once at deploy");
    }
    println!("  sha256: {}", hex::encode(contract.code_hash()));
    Ok(())
}
