//! The `baton` binary.

use clap::Parser;

fn main() -> std::process::ExitCode {
    // Inside a networked sandbox this binary is the relay to the egress proxy: plain
    // threads, no runtime (`baton_sandbox::relay`).
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(baton_server::cli::SANDBOX_RELAY) {
        let code = baton_sandbox::relay::main(&args[2..]);
        return std::process::ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX));
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let cli = baton_server::cli::Cli::parse();
    match runtime.block_on(baton_server::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
