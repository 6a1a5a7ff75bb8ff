//! `tally`: build, deploy and benchmark WebAssembly smart contracts.

mod commands;
mod node;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // Output to a closed pipe (`tally blocks | head`) ends the process quietly, as it does for
    // any Unix filter, instead of panicking in `println!`. Rust ignores SIGPIPE by default;
    // sockets are unaffected, since std sends on them with MSG_NOSIGNAL.
    // SAFETY: restoring the default disposition of one signal, before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = commands::Cli::parse();
    match cli.command.run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
