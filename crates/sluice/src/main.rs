//! The `sluice` binary: parse the command line, set up logging, run.

use std::process::ExitCode;

use clap::Parser;
use sluice::cli::Cli;

/// mimalloc for every allocation in the process: with the `override` feature it also serves
/// librdkafka's malloc/free. glibc's allocator spent ~30 % of sluice's CPU during a backlog
/// catch-up (malloc_consolidate, _int_free; bench/RESULTS.md has the profile); mimalloc cut
/// CPU per million rows by ~25 % there.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    #[cfg(feature = "failpoints")]
    let _failpoints = sluice::failpoint::setup();
    sluice::app::init_tracing(&cli);
    match sluice::app::main(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("{}", sluice::app::render_report(&error));
            ExitCode::FAILURE
        }
    }
}
