//! `tally build`: compile a C contract (a `.c` file) or a Rust contract (a cargo package
//! directory) for wasm32 with the flags Tally's ABI expects.

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
/// - the stack first in memory, below the data: a stack that runs out then moves its pointer
///   below address 0, so the next access traps (and the runtime names it a stack overflow)
///   instead of overwriting the contract's own data, where wasm-ld puts the stack by default;
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
    "-Wl,--stack-first",
    "-Wl,--initial-memory=65536",
    "-Wl,--strip-all",
];

const INSTALL_HINT: &str = "clang with wasm32 support not found: apt-get install clang lld \
     (or set TALLY_CLANG to a clang that has the WebAssembly target and wasm-ld)";

/// Compile a contract to WebAssembly.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally build contracts/simplecoin.c
  tally build my_contract.c -o build/my_contract.wasm
  tally build contracts/token-rs                  # a Rust contract: writes contracts/token-rs.wasm
  tally build my_contract.c --names               # keep function names for `tally push --trace`
  tally build my_contract.c --stack-size 32768    # a bigger stack, for deep recursion

The C API is sdk-c/include/tally.h (embedded in tally; #include \"tally.h\").
C needs clang and wasm-ld: apt-get install clang lld. TALLY_CLANG picks another clang.
Rust contracts are cargo packages (crate-type cdylib) using tally-host-api's `guest` feature;
they need the wasm32 target: rustup target add wasm32-unknown-unknown.")]
pub struct BuildArgs {
    /// The contract: a C source file, or the directory of a Rust contract's Cargo.toml.
    pub source: PathBuf,
    /// Where to write the module [default: the source with a .wasm extension].
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Keep the module's function names (its `name` section), so `tally push --trace` and
    /// the test harness can say in which function an action failed. Builds are stripped by
    /// default: smaller, and the bytes committed builds are checked against.
    #[arg(long)]
    pub names: bool,
    /// The contract's stack in bytes, for deep recursion or large local arrays [default: 8192
    /// for C, 65536 for Rust]. Every byte of it that an action touches is memory the runtime
    /// restores and the action pays for, so keep it small.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1024..=MAX_STACK_SIZE))]
    pub stack_size: Option<u32>,
}

/// The largest `--stack-size`: 1 MiB, Rust's own default for native threads; a contract's
/// memory is at most `MAX_MEMORY_PAGES` pages, and its stack must leave room for its data.
const MAX_STACK_SIZE: i64 = 1 << 20;

/// The alignment wasm-ld requires of a stack size: the wasm32 C ABI's 16-byte stack alignment.
const STACK_ALIGN: u32 = 16;

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

/// Compiles `source` to `output` with [`C_FLAGS`]; with `names`, keeps the name section
/// (function names do not depend on paths, unlike debug info, which stays stripped).
pub fn compile_c(
    source: &Path,
    output: &Path,
    names: bool,
    stack_size: Option<u32>,
) -> anyhow::Result<()> {
    if !source.is_file() {
        bail!("{} is not a file", source.display());
    }
    if source.extension().and_then(|e| e.to_str()) != Some("c") {
        bail!(
            "{} is not a C source (.c) nor a directory with a Cargo.toml (a Rust contract)",
            source.display()
        );
    }
    let clang = clang();
    check_toolchain(&clang)?;
    let sdk = tempfile::tempdir().context("cannot create a temporary directory")?;
    std::fs::write(sdk.path().join("tally.h"), TALLY_H).context("cannot write tally.h")?;
    let stack = stack_size.map(|bytes| format!("-Wl,-z,stack-size={bytes}"));
    let flags = C_FLAGS.iter().filter_map(|&flag| match flag {
        "-Wl,--strip-all" if names => Some("-Wl,--strip-debug"),
        "-Wl,-z,stack-size=8192" if stack.is_some() => stack.as_deref(),
        // A bigger stack needs more than the one page: wasm-ld sizes the memory to the stack
        // and the data when not told.
        "-Wl,--initial-memory=65536" if stack.is_some() => None,
        other => Some(other),
    });
    let out = Command::new(&clang)
        .args(flags)
        .arg("-I")
        .arg(sdk.path())
        .arg("-o")
        .arg(output)
        .arg(source)
        .output()
        .with_context(|| format!("cannot run {clang}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if let Some((header, instead)) = missing_libc_header(&err) {
            bail!(
                "{} includes <{header}>, but contracts have no libc: {instead}. Only tally.h \
                 and the compiler's freestanding headers (stdint.h, stddef.h, stdbool.h, \
                 limits.h) are there. clang said:\n{}",
                source.display(),
                err.trim_end()
            );
        }
        bail!(
            "clang failed to compile {}:\n{}",
            source.display(),
            err.trim_end()
        );
    }
    // Warnings are the author's business, but they must see them.
    let warnings = String::from_utf8_lossy(&out.stderr);
    if !warnings.trim().is_empty() {
        eprintln!("{}", warnings.trim_end());
    }
    Ok(())
}

/// What tally.h offers instead of each C library header an author is likely to include.
const LIBC_INSTEAD: &[(&str, &str)] = &[
    (
        "stdio.h",
        "use tally.h's prints(text) and printi(number), which write to the action's console (tally push shows it)",
    ),
    (
        "string.h",
        "use __builtin_memcpy, __builtin_memset and __builtin_memcmp, and tally.h's tally_strlen",
    ),
    (
        "strings.h",
        "use __builtin_memcpy, __builtin_memset and __builtin_memcmp, and tally.h's tally_strlen",
    ),
    (
        "stdlib.h",
        "there is no malloc or free: use static buffers, and tally.h's assert(cond, msg) to abort",
    ),
    ("malloc.h", "there is no malloc or free: use static buffers"),
    (
        "assert.h",
        "use tally.h's assert(cond, msg), which aborts the action with msg",
    ),
    (
        "math.h",
        "there is no floating point in contracts: use integers (tally.h has 128-bit arithmetic)",
    ),
    (
        "time.h",
        "a contract has no clock but the block's time: use tally.h's tally_block_time()",
    ),
    (
        "ctype.h",
        "compare characters directly ('a' <= c && c <= 'z')",
    ),
    (
        "errno.h",
        "abort with tally.h's assert(cond, msg) instead of error codes",
    ),
    (
        "unistd.h",
        "a contract has no operating system: tally.h's imports are all it can call",
    ),
    ("wchar.h", "strings are UTF-8 bytes: use tally.h's String"),
];

/// The C library header clang could not find, and what to use instead, if that is why it
/// failed (`fatal error: 'stdio.h' file not found`).
fn missing_libc_header(clang_stderr: &str) -> Option<(&'static str, &'static str)> {
    clang_stderr.lines().find_map(|line| {
        let rest = line.split("fatal error: '").nth(1)?;
        let header = rest.strip_suffix("' file not found")?;
        LIBC_INSTEAD.iter().find(|(h, _)| *h == header).copied()
    })
}

/// Where Rust contracts are built from: a symlink to the contract's grandparent directory.
/// Cargo hashes the absolute path of a path dependency that lies outside the contract's
/// workspace (here `tally-host-api`) into symbol names, which changes the module's function
/// order; building through one fixed path makes the bytes the same in any checkout.
const BUILD_ROOT: &str = "/tmp/tally-contract-build";

/// Held while a build goes through [`BUILD_ROOT`], by every `tally build` on the machine.
const BUILD_LOCK: &str = "/tmp/tally-contract-build.lock";

/// Flags for Rust contracts: a 64 KiB stack instead of Rust's 1 MiB default keeps the initial
/// memory small, and the remappings keep local paths out of the module.
fn rust_flags(stack_size: Option<u32>) -> String {
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_default();
    format!(
        "-C link-arg=-zstack-size={} --remap-path-prefix={BUILD_ROOT}=/build \
         --remap-path-prefix={}=/cargo",
        stack_size.unwrap_or(65536),
        cargo_home.display()
    )
}

/// Builds the Rust contract in `package` with cargo and copies the module to `output`. With
/// `names`, the package's release profile strips debug info only, keeping function names.
pub fn compile_rust(
    package: &Path,
    output: &Path,
    names: bool,
    stack_size: Option<u32>,
) -> anyhow::Result<()> {
    let package = package
        .canonicalize()
        .with_context(|| format!("cannot find {}", package.display()))?;
    super::sdk::ensure_linked(&package)?;
    let manifest = package.join("Cargo.toml");
    let meta: toml_name::Manifest = std::fs::read_to_string(&manifest)
        .ok()
        .and_then(|text| toml_name::parse(&text))
        .with_context(|| format!("{} has no [package] name", manifest.display()))?;
    let root = package
        .parent()
        .and_then(Path::parent)
        .context("a Rust contract needs a parent and a grandparent directory")?;
    let relative = package.strip_prefix(root).expect("root is an ancestor");
    // Two builds at once would repoint the one symlink under each other: take turns.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(BUILD_LOCK)
        .with_context(|| format!("cannot open {BUILD_LOCK}"))?;
    lock.lock()
        .with_context(|| format!("cannot lock {BUILD_LOCK}"))?;
    let link = Path::new(BUILD_ROOT);
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(link)
            .with_context(|| format!("cannot replace {BUILD_ROOT} (remove it)"))?;
    }
    std::os::unix::fs::symlink(root, link)
        .with_context(|| format!("cannot create {BUILD_ROOT}"))?;
    let target_dir = package.join("target");
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.args(["build", "--release", "--target", "wasm32-unknown-unknown"]);
    // A committed lock file pins the dependencies (reproducible builds); a new contract gets
    // one on its first build.
    if package.join("Cargo.lock").exists() {
        cargo.arg("--locked");
    }
    let out = cargo
        .arg("--manifest-path")
        .arg(link.join(relative).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(link.join(relative))
        .env("RUSTFLAGS", rust_flags(stack_size))
        .envs(names.then_some(("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")))
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .context("cannot run cargo")?;
    let _ = std::fs::remove_file(link);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("wasm32-unknown-unknown") && err.contains("target may not be installed") {
            bail!("the wasm32 target is missing: rustup target add wasm32-unknown-unknown");
        }
        bail!(
            "cargo failed to build {}:\n{}",
            package.display(),
            err.trim_end()
        );
    }
    let built = target_dir
        .join("wasm32-unknown-unknown/release")
        .join(format!("{}.wasm", meta.name.replace('-', "_")));
    std::fs::copy(&built, output)
        .with_context(|| format!("cannot copy {} to {}", built.display(), output.display()))?;
    Ok(())
}

/// The one field `tally build` needs from a Cargo.toml, without a TOML dependency.
mod toml_name {
    pub struct Manifest {
        pub name: String,
    }

    /// The `name` of the `[package]` table.
    pub fn parse(text: &str) -> Option<Manifest> {
        let mut in_package = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                in_package = line == "[package]";
            } else if in_package && let Some(value) = line.strip_prefix("name") {
                let value = value
                    .trim_start()
                    .strip_prefix('=')?
                    .trim()
                    .trim_matches('"');
                return Some(Manifest {
                    name: value.to_string(),
                });
            }
        }
        None
    }
}

/// Where a build writes by default: `x.c` → `x.wasm`; a Rust package `dir` → `dir.wasm`
/// (for `.`, the current directory's name beside it).
fn default_output(source: &Path) -> PathBuf {
    if source.is_dir() {
        let dir = source.components().as_path();
        if dir.file_name().is_none()
            && let Ok(full) = dir.canonicalize()
        {
            return full.with_extension("wasm");
        }
        dir.with_extension("wasm")
    } else {
        source.with_extension("wasm")
    }
}

pub fn run(args: BuildArgs) -> anyhow::Result<()> {
    if let Some(bytes) = args.stack_size
        && bytes % STACK_ALIGN != 0
    {
        bail!(
            "--stack-size {bytes}: the stack is {STACK_ALIGN}-byte aligned (wasm32's ABI); use \
             {}",
            bytes.next_multiple_of(STACK_ALIGN)
        );
    }
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| default_output(&args.source));
    if args.source.is_dir() {
        compile_rust(&args.source, &output, args.names, args.stack_size)?;
    } else {
        compile_c(&args.source, &output, args.names, args.stack_size)?;
    }
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
        EntryPoints::Apply(_) => "apply(receiver, code, action)".to_string(),
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
    if contract.info().has_query {
        println!("  query(receiver, method): answers read-only queries (tally query)");
    }
    if contract.info().has_migrate {
        println!("  migrate: runs when setcode replaces this account's code");
    }
    println!("  sha256: {}", hex::encode(contract.code_hash()));
    Ok(())
}
