//! The `baton` binary.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = baton_server::cli::Cli::parse();
    match baton_server::cli::run(cli).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
