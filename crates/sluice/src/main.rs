//! The `sluice` binary: parse the command line, set up logging, run.

use std::process::ExitCode;

use clap::Parser;
use sluice::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    sluice::app::init_tracing(&cli);
    match sluice::app::main(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("{}", sluice::app::render_report(&error));
            ExitCode::FAILURE
        }
    }
}
