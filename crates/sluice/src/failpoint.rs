//! Named crash points for tests, compiled in only with the `failpoints` cargo feature.
//!
//! A test reaches a crash point at a known place instead of killing the process after a
//! guessed time: it starts `sluice` built with `--features failpoints` with the environment
//! variable `FAILPOINTS` set in the `fail` crate's syntax, e.g.
//! `FAILPOINTS="snapshot::chunks_recorded=6*off->return"`: the first six passes do nothing,
//! the seventh aborts the process (as a crash would: no destructor, no flush). Without the
//! feature, `crash_point!` expands to nothing and the `fail` crate is not even linked, so
//! release builds carry no crash points and read no such variable.
//!
//! Two older hooks read environment variables, also only with the feature:
//! `SLUICE_TEST_HANG_ON_VALUE` ([`crate::sink::worker`]) and `SLUICE_TEST_ABORT_AFTER_UPLOAD`
//! ([`crate::sink::files`]). `scripts/check-test-hooks` checks a binary built without the
//! feature for every `SLUICE_TEST_` string and every point's name.
//!
//! The points:
//! - `snapshot::chunks_recorded` (crash): after finished snapshot chunks were recorded in the
//!   state file (once per batch of chunks that finished together).
//! - `snapshot::slot_created` (crash): a new slot was created with its exported snapshot, the
//!   state file not yet updated with it.
//! - `encode::change` (the `fail` crate's actions, e.g. `panic(msg)`): before a row change is
//!   encoded.
//! - `stream::refresh_tables` (delay): an async wait of `return(MS)` milliseconds before the
//!   captured tables are listed, e.g. `stream::refresh_tables=1*return(25000)->off`.
//! - `incremental::sweep` (delay): before a republication's sweep reads the table's topic
//!   (after its copy of the key set was taken).
//! - `mysql_incremental::close` (delay): a MySQL incremental snapshot chunk's read is done, its
//!   closing watermark not written yet (widens the window in which streamed changes are noted).
//! - `mysql_incremental::progress_saved` (crash): the MySQL state file was written with an
//!   incremental snapshot's chunk progress.
//! - `exactly_once::before_commit` (crash): an exactly-once Kafka transaction's records and
//!   offsets record are produced, its commit not begun.
//! - `exactly_once::after_commit` (crash): the transaction committed, before the delivery
//!   core (and so the source's confirmation) or the snapshot's state file learn of it.
//! - `sink::postgres::batch_committed` (crash): right after a PostgreSQL sink batch and its
//!   progress committed, before the batch's records are acknowledged (so before their Kafka
//!   offsets can be committed).
//! - `sink::iceberg::committed` (crash): right after an Iceberg sink epoch's snapshot (its
//!   data files and its offsets in the summary) committed, before the epoch's records are
//!   acknowledged (so before their Kafka offsets can be committed).
//! - `sink::iceberg::before_swap` (crash): in an Iceberg sink upsert commit, after the
//!   epoch's data and delete files, manifests and manifest list are written and before the
//!   catalog's pointer is swapped (the commit did not happen).
//! - `sink::iceberg::before_commit` (gate): in an Iceberg sink commit (either mode), after the
//!   writer read the table and checked that it still owns its sub-partition, before the commit
//!   is sent to the catalog (on every attempt). In-process tests hold one writer there with
//!   `fail::cfg_callback` while another commits.
//! - `sink::files::commit` (gate): in a files sink epoch commit, after the epoch's files are
//!   finished and before anything of the commit is written (uploads, state). Armed with
//!   `return(PATH)`, the worker logs `failpoint: waiting for the gate file` and blocks until
//!   the file `PATH` exists (two minutes at most), e.g.
//!   `sink::files::commit=1*off->1*return(/tmp/gate)->off` holds the second commit. The
//!   zombie-writer tests stop the process there.

/// Arms the crash points named in `FAILPOINTS`; the returned guard keeps them for the
/// process's life.
#[cfg(feature = "failpoints")]
pub fn setup() -> fail::FailScenario<'static> {
    fail::FailScenario::setup()
}

/// Aborts the process at crash point `name`.
#[cfg(feature = "failpoints")]
pub fn crash(name: &str) -> ! {
    eprintln!("failpoint {name}: aborting the process");
    std::process::abort()
}

/// A crash point: aborts the process here when the test armed `$name` (see the module docs).
#[macro_export]
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            if fail::eval($name, |_| ()).is_some() {
                $crate::failpoint::crash($name);
            }
        }
    };
}

/// Blocks the calling thread until the file `path` exists (at most two minutes): the gate of
/// [`gate_point!`].
#[cfg(feature = "failpoints")]
pub fn wait_for_gate(name: &str, path: &str) {
    use std::time::{Duration, Instant};
    tracing::warn!(
        point = name,
        gate = path,
        "failpoint: waiting for the gate file"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while !std::path::Path::new(path).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    tracing::warn!(point = name, "failpoint: gate open, going on");
}

/// A gate point: when the test armed `$name` with `return(PATH)`, blocks the thread until the
/// file PATH exists (see the module docs).
#[macro_export]
macro_rules! gate_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            if let Some(Some(path)) = fail::eval($name, |arg| arg) {
                $crate::failpoint::wait_for_gate($name, &path);
            }
        }
    };
}

/// A delay point: when the test armed `$name` with `return(MS)`, waits MS milliseconds
/// (asynchronously: the runtime's thread goes on) before going on.
#[macro_export]
macro_rules! delay_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        {
            let delay = fail::eval($name, |arg| arg.and_then(|ms| ms.parse::<u64>().ok()));
            if let Some(Some(ms)) = delay {
                tracing::warn!(point = $name, ms, "failpoint: delaying");
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
        }
    };
}
