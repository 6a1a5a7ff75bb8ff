//! One module per subcommand: its arguments, its `run`, and examples in its `--help`.

mod account;
mod bench;
mod blocks;
mod build;
mod deploy;
mod get;
mod init;
mod local;
mod plot;
mod push;
mod store;
mod storebench;
mod storebench_workload;
mod wasmi_baseline;

use clap::{Parser, Subcommand};

/// Tally: a fast, deterministic WebAssembly smart-contract runtime.
#[derive(Debug, Parser)]
#[command(name = "tally", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compile a C contract to WebAssembly.
    Build(build::BuildArgs),
    /// Push signed transfers through the simplecoin contract and report transfers per second.
    Bench(bench::BenchArgs),
    /// Create a local chain in a data directory.
    Init(init::InitArgs),
    /// Manage accounts.
    Account(account::AccountArgs),
    /// Deploy a contract to an account.
    Deploy(deploy::DeployArgs),
    /// Sign and push an action.
    Push(push::PushArgs),
    /// Read a key of a contract's storage.
    Get(get::GetArgs),
    /// Show a simplecoin balance.
    Balance(get::BalanceArgs),
    /// List the stored blocks.
    Blocks(blocks::BlocksArgs),
    /// Verify every stored block and the state.
    Verify(blocks::VerifyArgs),
    /// Compare state stores on a storage workload (GriffinDB, IAVL or transfers).
    Storebench(storebench::StorebenchArgs),
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Build(args) => build::run(args),
            Command::Bench(args) => bench::run(args),
            Command::Init(args) => init::run(args),
            Command::Account(args) => account::run(args),
            Command::Deploy(args) => deploy::run(args),
            Command::Push(args) => push::run(args),
            Command::Get(args) => get::run(args),
            Command::Balance(args) => get::run_balance(args),
            Command::Blocks(args) => blocks::run(args),
            Command::Verify(args) => blocks::run_verify(args),
            Command::Storebench(args) => storebench::run(args),
        }
    }
}
