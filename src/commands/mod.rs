//! One module per subcommand: its arguments, its `run`, and examples in its `--help`.

mod bench;
mod build;
mod store;

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
}

impl Command {
    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::Build(args) => build::run(args),
            Command::Bench(args) => bench::run(args),
        }
    }
}
