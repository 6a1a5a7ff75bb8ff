//! `tally new`: create a contract project (C or Rust) that builds, tests and deploys as
//! generated: its source, its ABI, the types generated from it, a test script over the CLI on
//! a throwaway chain, and a README. A Rust project also gets Rust tests on the in-process
//! harness (`tally_chain::testing`).
//!
//! The templates live in `src/commands/new/`, with `{{name}}`-style placeholders.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Args;

use super::abi::Abi;
use super::abigen::{self, Lang, Source};
use super::sdk::{self, SDK_LINK};

const ABI: &str = include_str!("new/abi.json");
const C_SOURCE: &str = include_str!("new/contract.c");
const RUST_SOURCE: &str = include_str!("new/lib.rs");
const CARGO_TOML: &str = include_str!("new/Cargo.toml");
const TEST_SH: &str = include_str!("new/test.sh");
const TEST_CARGO_TOML: &str = include_str!("new/test_Cargo.toml");
const TEST_RS: &str = include_str!("new/test.rs");
const README: &str = include_str!("new/README.md");
const GITIGNORE: &str = include_str!("new/gitignore");
const HARNESS_SH: &str = include_str!("new/harness.sh");

/// Create a contract project: source, ABI, generated types, a test and a README.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  tally new counter --lang c        # counter/: counter.c, counter.abi.json, counter.abi.h, test.sh
  tally new counter --lang rust     # counter/: Cargo.toml, src/lib.rs, src/abi.rs,
                                    #   test/counter.rs (tests on an in-process chain), test.sh
  cd counter && ./test.sh           # build, deploy on a throwaway chain, push, check

The project is a working contract (a per-account counter with actions `hit` and `reset`) to
edit. Its README lists the commands; its name is also the account the test deploys it to.
A C contract needs clang and lld (apt-get install clang lld); a Rust contract needs the wasm32
target (rustup target add wasm32-unknown-unknown).")]
pub struct NewArgs {
    /// The contract's name: a directory, a file and an account name, so 1-12 characters of
    /// a-z and 1-5, starting with a letter.
    pub name: String,
    /// The language to write the contract in.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// The directory to create [default: ./NAME].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The tally-host-api crate a Rust contract depends on [default: $TALLY_SDK/host-api, else
    /// the Tally checkout this tally was built from]. Its test uses the tally-chain crate
    /// beside it (DIR/../chain). The project reaches both through its own link `.tally/sdk`.
    #[arg(long, value_name = "DIR")]
    pub host_api: Option<PathBuf>,
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = (1..=12).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || ('1'..='5').contains(&c));
    if !ok {
        bail!(
            "{name:?} cannot name a contract: use 1-12 characters of a-z and 1-5, starting with a \
             letter (it names the directory, the files and the account)"
        );
    }
    Ok(())
}

/// Files of a new project: path relative to its directory, and contents.
type Files = Vec<(PathBuf, String)>;

/// `template` with the contract's name filled in.
fn fill(template: &str, name: &str) -> String {
    template.replace("{{name}}", name)
}

/// Where a language's project keeps what the README names.
struct Layout {
    /// The file `tally abigen` writes.
    generated: String,
    /// The contract's source.
    source: String,
    /// The command that builds it.
    build: String,
    /// The language, for people.
    lang_name: &'static str,
}

/// A C project's header and source.
fn c_files(name: &str, abi: &Abi, abi_file: &str, files: &mut Files) -> anyhow::Result<Layout> {
    let header = format!("{name}.abi.h");
    let source = Source {
        file: abi_file.to_string(),
        path: abi_file.to_string(),
    };
    files.push((
        PathBuf::from(&header),
        abigen::generate(abi, Lang::C, name, &source, "")?,
    ));
    files.push((PathBuf::from(format!("{name}.c")), fill(C_SOURCE, name)));
    Ok(Layout {
        generated: header,
        source: format!("{name}.c"),
        build: format!("tally build {name}.c"),
        lang_name: "C",
    })
}

/// A Rust project's package, source, generated types and test package. Its manifests name
/// Tally's crates by a path inside the project's own link to them ([`SDK_LINK`]), so the
/// project carries no path of this machine and builds wherever `tally build` re-links it.
fn rust_files(
    name: &str,
    abi: &Abi,
    abi_file: &str,
    sdk_root: &Path,
    files: &mut Files,
) -> anyhow::Result<Layout> {
    let source = Source {
        file: abi_file.to_string(),
        path: format!("../{abi_file}"),
    };
    files.push((
        PathBuf::from("src/abi.rs"),
        abigen::generate(abi, Lang::Rust, name, &source, "")?,
    ));
    files.push((PathBuf::from("src/lib.rs"), fill(RUST_SOURCE, name)));
    files.push((
        PathBuf::from("Cargo.toml"),
        fill(CARGO_TOML, name).replace("{{sdk}}", SDK_LINK),
    ));
    files.push((
        PathBuf::from("test/Cargo.toml"),
        fill(TEST_CARGO_TOML, name).replace("{{sdk}}", &format!("../{SDK_LINK}")),
    ));
    files.push((
        PathBuf::from(format!("test/{name}.rs")),
        fill(TEST_RS, name),
    ));
    // The versions the checkout was built and tested with, rather than whatever is
    // newest today (the harness pulls in wasmtime, pinned, and its dependencies).
    if let Ok(lock) = std::fs::read_to_string(sdk_root.join("Cargo.lock")) {
        files.push((PathBuf::from("test/Cargo.lock"), lock));
    }
    Ok(Layout {
        generated: "src/abi.rs".to_string(),
        source: "src/lib.rs".to_string(),
        build: format!("tally build . -o {name}.wasm"),
        lang_name: "Rust",
    })
}

/// `test.sh`: builds the contract, with function names (`--names`) so a failed check's trace
/// names the function, and checks it on a throwaway local chain.
fn test_sh(lang: Lang, name: &str, abi_file: &str, layout: &Layout) -> String {
    let generated = &layout.generated;
    let test_build = match lang {
        Lang::C => format!(
            "echo \"building {name}.c\"\n\"$tally\" abigen {abi_file} --lang c -o {generated} --check >/dev/null\n\"$tally\" build {name}.c --names >/dev/null"
        ),
        Lang::Rust => format!(
            "echo \"building {name} (the first build of a Rust contract takes a minute or two)\"\n\"$tally\" abigen {abi_file} --lang rust -o {generated} --check >/dev/null\n\"$tally\" build . -o {name}.wasm --names >/dev/null"
        ),
    };
    let harness = match lang {
        Lang::C => String::new(),
        Lang::Rust => fill(HARNESS_SH, name),
    };
    fill(TEST_SH, name)
        .replace("{{build}}", &test_build)
        .replace("{{harness}}\n", &harness)
}

/// The project's README: its files, how to build, test and regenerate.
fn readme(lang: Lang, name: &str, abi_file: &str, layout: &Layout) -> String {
    let lang_arg = match lang {
        Lang::C => "c",
        Lang::Rust => "rust",
    };
    let abigen_cmd = format!(
        "tally abigen {abi_file} --lang {lang_arg} -o {}",
        layout.generated
    );
    let test_files = match lang {
        Lang::C => {
            "| `test.sh` | builds the contract, deploys it on a throwaway local chain, pushes \
                    actions and checks the state |"
                .to_string()
        }
        Lang::Rust => format!(
            "| `test/{name}.rs` | its tests, on an in-process chain (`tally_chain::testing`): \
             deploy, push as named accounts, check receipts and state |\n\
             | `test/Cargo.toml` | the test package |\n\
             | `test.sh` | builds the contract, deploys it on a throwaway local chain, pushes \
             actions and checks the state, then runs `test/{name}.rs` |\n\
             | `.tally/sdk` | a link to the Tally checkout whose crates the manifests use; not \
             committed: `tally build` makes it on any machine (`TALLY_SDK` picks the checkout) |"
        ),
    };
    let harness_test = match lang {
        Lang::C => "",
        Lang::Rust => {
            "\n`test.sh` also runs the Rust tests on an in-process chain (deploy, push as named \
             accounts, check receipts), in a build directory every project on the machine shares \
             (`~/.cache/tally/test-target`): only the first project pays for compiling Tally's \
             chain crate. On their own, after a build:\n\n```sh\ncargo test --manifest-path \
             test/Cargo.toml\n```\n"
        }
    };
    const GENERATED: &str = "its action types, generated from the ABI by `tally abigen`";
    let table = match lang {
        Lang::C => format!("| `{name}.c` | the contract |\n| `{name}.abi.h` | {GENERATED} |"),
        Lang::Rust => format!(
            "| `src/lib.rs` | the contract |\n| `src/abi.rs` | {GENERATED} |\n\
             | `Cargo.toml` | the package (on `tally-host-api` with the `guest` feature) |"
        ),
    };
    fill(README, name)
        .replace("{{lang_name}}", layout.lang_name)
        .replace("{{lang}}", lang_arg)
        .replace("{{files}}", &table)
        .replace("{{test_files}}", &test_files)
        .replace("{{harness_test}}", harness_test)
        .replace("{{source}}", &format!("`{}`", layout.source))
        .replace("{{abigen}}", &abigen_cmd)
        .replace("{{build}}", &layout.build)
}

/// Writes `files` under `dir`, and makes `test.sh` executable.
fn write_files(dir: &Path, files: &Files) -> anyhow::Result<()> {
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let test = dir.join("test.sh");
    let mut perms = std::fs::metadata(&test)?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&test, perms)?;
    Ok(())
}

pub fn run(args: NewArgs) -> anyhow::Result<()> {
    check_name(&args.name)?;
    let name = args.name.as_str();
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .with_context(|| format!("{} exists and is not a directory", dir.display()))?
            .next()
            .is_some()
    {
        bail!(
            "{} already exists and is not empty: pick another name or --dir",
            dir.display()
        );
    }
    let sdk_root = match args.lang {
        Lang::Rust => Some(sdk::root(args.host_api.as_deref())?),
        Lang::C => None,
    };
    let abi_text = fill(ABI, name);
    let abi = Abi::parse(&abi_text).expect("the template ABI is valid");
    let abi_file = format!("{name}.abi.json");
    let mut files: Files = vec![(PathBuf::from(&abi_file), abi_text)];
    let layout = match &sdk_root {
        None => c_files(name, &abi, &abi_file, &mut files)?,
        Some(root) => rust_files(name, &abi, &abi_file, root, &mut files)?,
    };
    files.push((
        PathBuf::from("test.sh"),
        test_sh(args.lang, name, &abi_file, &layout),
    ));
    files.push((
        PathBuf::from("README.md"),
        readme(args.lang, name, &abi_file, &layout),
    ));
    files.push((PathBuf::from(".gitignore"), GITIGNORE.to_string()));
    write_files(&dir, &files)?;
    if let Some(root) = &sdk_root {
        sdk::link(&dir, root)?;
    }
    println!(
        "created {} (a {} contract):",
        dir.display(),
        layout.lang_name
    );
    for (path, _) in &files {
        println!("  {}", dir.join(path).display());
    }
    if let Some(root) = &sdk_root {
        println!(
            "  {} -> {} (Tally's crates; not committed: tally build re-links it)",
            dir.join(SDK_LINK).display(),
            root.display()
        );
    }
    println!("next:");
    println!("  cd {} && ./test.sh", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_names_must_work_as_files_identifiers_and_accounts() {
        for good in ["counter", "a", "token5", "abcdefghijkl"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Counter",
            "1abc",
            "my.token",
            "my-token",
            "abcdefghijklm",
            "tok6",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
