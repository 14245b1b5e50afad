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
    let thp = disable_transparent_huge_pages();
    let cli = Cli::parse();
    #[cfg(feature = "failpoints")]
    let _failpoints = sluice::failpoint::setup();
    sluice::app::init_tracing(&cli);
    tracing::debug!("transparent huge pages: {thp}");
    match sluice::app::main(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("{}", sluice::app::render_report(&error));
            ExitCode::FAILURE
        }
    }
}

/// Turns transparent huge pages off for this process, unless `MIMALLOC_ALLOW_THP` is set (then
/// mimalloc's own option decides, as it documents).
///
/// With THP, the allocator's partly used 2 MiB regions stay resident as whole huge pages:
/// measured on the backlog cases (3 rounds, default vs `MIMALLOC_ALLOW_THP=0`; bench/PROFILE.md
/// "The allocator decision"), peak RSS fell 131 -> 88 MiB (PostgreSQL), 124 -> 78 (MariaDB) and
/// 132 -> 76 (MySQL) at the same or lower CPU per row. The `prctl` also covers kernels whose THP
/// mode is `always` (mimalloc's `no_thp` build option only stops its own `madvise`), and it is
/// made before any thread starts, so every allocation after it is covered.
#[cfg(target_os = "linux")]
fn disable_transparent_huge_pages() -> &'static str {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return "left to MIMALLOC_ALLOW_THP";
    }
    match rustix::thread::disable_transparent_huge_pages(true) {
        Ok(()) => "off for this process",
        // Kernels before 3.15 or without THP: nothing to turn off.
        Err(_) => "unchanged (prctl refused)",
    }
}

#[cfg(not(target_os = "linux"))]
fn disable_transparent_huge_pages() -> &'static str {
    "not Linux: unchanged"
}
