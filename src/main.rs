//! `tally`: build, deploy and benchmark WebAssembly smart contracts.

mod commands;
mod common;
mod node;

use clap::Parser;

/// mimalloc: a block's journal, receipts and store reads allocate many small buffers, and
/// glibc's allocator (malloc, free, consolidation) was about a quarter of a ten-million-account
/// run's CPU under perf.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = commands::Cli::parse();
    if !cli.command.serves_sockets() {
        // Output to a closed pipe (`tally blocks | head`) ends the process quietly, as it does
        // for any Unix filter, instead of panicking in `println!`. Not for the commands that
        // serve connections: a write to a unix socket whose peer went away would then kill
        // the node instead of failing that one connection (std ignores SIGPIPE by default).
        // SAFETY: restoring the default disposition of one signal, before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    // A verification backend named in the environment that is unknown, or that this CPU
    // cannot run, stops every command here with what to do, rather than verifying some other
    // way or failing mid-run.
    use tally_chain::crypto::{BACKEND_ENV, BackendChoice, set_backend};
    if let Err(err) = BackendChoice::from_env().and_then(set_backend) {
        eprintln!("error: {BACKEND_ENV}: {err}");
        return std::process::ExitCode::FAILURE;
    }
    match cli.command.run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
