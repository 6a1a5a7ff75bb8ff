//! One module per subcommand: its arguments, its `run`, and examples in its `--help`.

mod abi;
mod abigen;
mod account;
mod bench;
mod blocks;
mod build;
mod deploy;
mod devnet;
pub mod fees;
mod get;
mod init;
mod keys;
mod load;
mod local;
mod new;
mod node;
mod plot;
mod push;
mod query;
mod receipt;
mod sdk;
mod state;
mod storebench;
mod target;
mod tx;

use clap::{Parser, Subcommand};

pub use local::Keystore;

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
    /// Create a contract project (C or Rust): source, ABI, generated types, a test, a README.
    New(new::NewArgs),
    /// Compile a contract (C or Rust) to WebAssembly.
    Build(build::BuildArgs),
    /// Generate a contract's action types (C or Rust) from its ABI file.
    Abigen(abigen::AbigenArgs),
    /// Push signed transfers through the simplecoin contract and report transfers per second.
    Bench(bench::BenchArgs),
    /// Create a local chain in a data directory.
    Init(init::InitArgs),
    /// Manage accounts.
    Account(account::AccountArgs),
    /// Deploy a contract to an account.
    Deploy(deploy::DeployArgs),
    /// Sign and push a transaction of one or more actions.
    Push(push::PushArgs),
    /// Show a committed transaction: its outcome, fuel, events and call tree.
    Tx(tx::TxArgs),
    /// Read a key of a contract's storage.
    Get(get::GetArgs),
    /// List a contract's keys in order, with their values.
    Keys(keys::KeysArgs),
    /// Show a simplecoin balance.
    Balance(get::BalanceArgs),
    /// Run a contract's read-only query against the committed state.
    Query(query::QueryArgs),
    /// Show the sha256 of the code an account runs.
    Code(query::CodeArgs),
    /// Show the fee prices of the five dimensions and the last blocks' usage.
    Fees(fees::FeesArgs),
    /// List the stored blocks.
    Blocks(blocks::BlocksArgs),
    /// Verify every stored block and the state.
    Verify(blocks::VerifyArgs),
    /// Run Tally as the ABCI application of a CometBFT node.
    Node(node::NodeArgs),
    /// Start or stop a local network of CometBFT validators running Tally.
    Devnet(devnet::DevnetArgs),
    /// Sign transfers, submit them to a network and measure committed transfers per second.
    Load(load::LoadArgs),
    /// Compare state stores on a storage workload (GriffinDB, IAVL or transfers).
    Storebench(storebench::StorebenchArgs),
}

impl Command {
    /// Whether the command keeps sockets open to other processes (and must survive a peer
    /// that disconnects).
    pub fn serves_sockets(&self) -> bool {
        matches!(
            self,
            Command::Node(_) | Command::Devnet(_) | Command::Load(_)
        )
    }

    /// Runs the subcommand.
    pub fn run(self) -> anyhow::Result<()> {
        match self {
            Command::New(args) => new::run(args),
            Command::Build(args) => build::run(args),
            Command::Abigen(args) => abigen::run(args),
            Command::Bench(args) => bench::run(args),
            Command::Init(args) => init::run(args),
            Command::Account(args) => account::run(args),
            Command::Deploy(args) => deploy::run(args),
            Command::Push(args) => push::run(args),
            Command::Tx(args) => tx::run(args),
            Command::Get(args) => get::run(args),
            Command::Keys(args) => keys::run(args),
            Command::Balance(args) => get::run_balance(args),
            Command::Query(args) => query::run(args),
            Command::Code(args) => query::run_code(args),
            Command::Fees(args) => fees::run(args),
            Command::Blocks(args) => blocks::run(args),
            Command::Verify(args) => blocks::run_verify(args),
            Command::Node(args) => node::run(args),
            Command::Devnet(args) => devnet::run(args),
            Command::Load(args) => load::run(args),
            Command::Storebench(args) => storebench::run(args),
        }
    }
}
